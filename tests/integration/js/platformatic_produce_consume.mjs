// @platformatic/kafka against hpbroker: three idempotent producers made one
// after the other (each asks for its producer id naming id 0, epoch 0, as this
// client does), each writing a codec of its own with headers to every
// partition; a transactional producer commits, aborts and commits again; then
// a consumer group (read_committed, this client's default) reads everything
// committed and commits its offsets.  Prints one JSON line:
// {"ids": [producer ids], "read": [values], "headers": ok}.
// Usage: node platformatic_produce_consume.mjs BROKER TOPIC GROUP PER_PRODUCER
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

// an ES module ignores NODE_PATH: resolve the package from there by hand
const resolve = createRequire(join(process.env.NODE_PATH, 'noop.js')).resolve
const { Producer, Consumer, stringSerializers, stringDeserializers } =
  await import(pathToFileURL(resolve('@platformatic/kafka')))

const [broker, topic, groupId, perProducer] = process.argv.slice(2)
const bootstrapBrokers = [broker]
const ids = []
const written = Number(perProducer)
for (const compression of ['gzip', 'snappy', 'lz4']) {
  const producer = new Producer({ clientId: `hpbroker-${compression}`, bootstrapBrokers, serializers: stringSerializers,
    idempotent: true, compression })
  for (let start = 0; start < written; start += 50) {
    const messages = []
    for (let i = start; i < Math.min(start + 50, written); i++) {
      messages.push({ topic, key: `k${i % 7}`, value: `${compression}-${i}`, headers: { from: compression } })
    }
    await producer.send({ messages })
  }
  ids.push(String(producer.producerId))
  await producer.close()
}

const transactional = new Producer({ clientId: 'hpbroker-txn', bootstrapBrokers, serializers: stringSerializers,
  idempotent: true, transactionalId: `${topic}-txn` })
const outcomes = [['commit', 0], ['abort', 1], ['commit', 2]]
for (const [outcome, n] of outcomes) {
  const transaction = await transactional.beginTransaction()
  const messages = [0, 1, 2].map(partition =>
    ({ topic, partition, value: `txn-${outcome}-${n}`, headers: { from: 'txn' } }))
  await transaction.send({ messages })
  await transaction[outcome]()
}
await transactional.close()
// the idempotent producers' records and one record per partition of each committed transaction
const wanted = 3 * written + 3 * outcomes.filter(([outcome]) => outcome === 'commit').length

const consumer = new Consumer({ groupId, clientId: 'hpbroker-consumer', bootstrapBrokers,
  deserializers: stringDeserializers })
const stream = await consumer.consume({ autocommit: false, topics: [topic], mode: 'earliest', sessionTimeout: 10000,
  heartbeatInterval: 500 })
const read = []
let headers = true
const timer = setTimeout(() => stream.destroy(new Error(`only ${read.length} records in 60 s`)), 60000)
for await (const message of stream) {
  read.push(message.value)
  headers &&= message.headers.get('from') === message.value.split('-')[0]
  await message.commit()
  if (read.length === wanted) break
}
clearTimeout(timer)
await stream.close()
await consumer.close(true)
console.log(JSON.stringify({ ids, read, headers }))
