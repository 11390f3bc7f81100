// kafkajs against hpbroker: a transactional producer commits, aborts, and
// commits consumer offsets in a transaction; then a kafkajs consumer (read
// committed, kafkajs's default) reads the topic back.  Prints one JSON line:
// {"read": [values...]}.  Usage: node kafkajs_transactions.js BROKER TOPIC TXN_ID GROUP
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, transactionalId, group] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'hpbroker-kafkajs-test', brokers: [broker], logLevel: logLevel.NOTHING })

const messages = (prefix, n) => Array.from({ length: n }, (_, i) => ({ value: `${prefix}-${i}`, partition: i % 2 }))

async function produce () {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let txn = await producer.transaction()
  await txn.send({ topic, messages: messages('committed', 10) })
  await txn.commit()
  txn = await producer.transaction()
  await txn.send({ topic, messages: messages('aborted', 6) })
  await txn.abort()
  txn = await producer.transaction()
  await txn.send({ topic, messages: messages('with-offsets', 4) })
  await txn.sendOffsets({ consumerGroupId: group, topics: [{ topic, partitions: [{ partition: 0, offset: '7' }] }] })
  await txn.commit()
  await producer.disconnect()
}

async function consume (expected) {
  const consumer = kafka.consumer({ groupId: `${group}-reader`, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const read = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${expected} in time`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        read.push(message.value.toString())
        if (read.length >= expected) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  return read
}

async function main () {
  await produce()
  const read = await consume(14)
  process.stdout.write(JSON.stringify({ read }) + '\n')
}

main().then(() => process.exit(0), (err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1) })
