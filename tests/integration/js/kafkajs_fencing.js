// kafkajs against hpbroker: a second instance of a transactional id fences the
// first (whose open transaction is aborted and whose commit then fails), and a
// producer that dies inside a transaction (the process exits without ending
// it) is aborted by the broker at its transaction timeout.  Prints one JSON
// line: {"fenced": <error name>, "read": [values a read_committed consumer saw]}.
// Usage: node kafkajs_fencing.js BROKER TOPIC TXN_ID
const { Kafka, logLevel } = require('kafkajs')

const [broker, topic, transactionalId] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'hpbroker-kafkajs-fencing', brokers: [broker], logLevel: logLevel.NOTHING })

async function main () {
  const first = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await first.connect()
  const old = await first.transaction()
  await old.send({ topic, messages: [{ value: 'fenced-0', partition: 0 }] })

  const second = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await second.connect()
  // kafkajs sends its transactional InitProducerId at the first transaction(): that
  // aborts the first instance's open transaction and bumps the epoch
  const txn = await second.transaction()
  let fenced = 'none'
  try {
    await old.commit()
  } catch (err) {
    fenced = err.type || err.name
  }
  await txn.send({ topic, messages: [{ value: 'second-0', partition: 0 }] })
  await txn.commit()

  // a producer that dies in its transaction: the broker aborts it at its timeout
  const doomed = kafka.producer({ transactionalId: `${transactionalId}-doomed`, idempotent: true,
    maxInFlightRequests: 1, transactionTimeout: 3000 })
  await doomed.connect()
  const open = await doomed.transaction()
  await open.send({ topic, messages: [{ value: 'doomed-0', partition: 0 }] })
  // ... and it is gone: no commit, no abort, no disconnect (as after a SIGKILL)
  const after = await second.transaction()
  await after.send({ topic, messages: [{ value: 'after-0', partition: 0 }] })
  await after.commit()

  const consumer = kafka.consumer({ groupId: `${transactionalId}-reader`, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const read = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${JSON.stringify(read)} in time`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        read.push(message.value.toString())
        if (read.includes('after-0')) { clearTimeout(timer); resolve() }
      }
    }).catch(reject)
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ fenced, read }) + '\n')
}

main().then(() => process.exit(0), (err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1) })
