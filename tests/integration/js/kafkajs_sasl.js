// kafkajs logging in to a SASL_PLAINTEXT listener with each mechanism given:
// for each, a producer writes COUNT records and a consumer group reads them
// back; then a wrong password must be refused.  Prints one JSON line:
// {"read": {mechanism: count}, "refused": error name}.
// Usage: node kafkajs_sasl.js BROKER TOPIC COUNT mechanism:user:password...
// With HPBROKER_CA set (a PEM file), over TLS (a SASL_SSL listener) trusting that authority.
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, count, ...logins] = process.argv.slice(2)
const wanted = Number(count)
const ssl = process.env.HPBROKER_CA ? { ca: [fs.readFileSync(process.env.HPBROKER_CA, 'utf-8')] } : undefined

async function roundTrip (mechanism, username, password) {
  const kafka = new Kafka({ clientId: 'hpbroker-sasl', brokers: [broker], logLevel: logLevel.NOTHING, ssl,
    sasl: { mechanism, username, password } })
  const name = `${topic}-${mechanism}`
  const producer = kafka.producer({ idempotent: true })
  await producer.connect()
  const messages = []
  for (let i = 0; i < wanted; i++) messages.push({ value: `${mechanism}-${i}` })
  await producer.send({ topic: name, messages })
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: `${name}-g` })
  await consumer.connect()
  await consumer.subscribe({ topic: name, fromBeginning: true })
  const seen = new Set()
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${mechanism}: only ${seen.size} read in 60 s`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        seen.add(message.value.toString())
        if (seen.size === wanted) { clearTimeout(timer); resolve() }
      }
    })
  })
  await consumer.disconnect()
  return seen.size
}

async function main () {
  const read = {}
  for (const login of logins) {
    const [mechanism, username, password] = login.split(':')
    read[mechanism] = await roundTrip(mechanism, username, password)
  }
  const [mechanism, username] = logins[0].split(':')
  const wrong = new Kafka({ clientId: 'hpbroker-sasl', brokers: [broker], logLevel: logLevel.NOTHING, ssl,
    retry: { retries: 0 }, sasl: { mechanism, username, password: 'wrong' } }).producer()
  let refused = null
  try {
    await wrong.connect()
  } catch (error) {
    refused = error.name
  }
  console.log(JSON.stringify({ read, refused }))
}

main().catch(error => { console.error(error); process.exit(1) })
