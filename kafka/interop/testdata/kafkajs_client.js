// A kafkajs consumer driven by the interop tests.
// Reads commands on stdin (commit [base], fetch, close), writes JSON lines on
// stdout. "commit B" commits offset B+p for each owned partition p (B: 100).
const { Kafka, logLevel } = require('kafkajs')
const readline = require('readline')

const env = process.env
const topic = env.TOPIC
const parts = Number(env.PARTITIONS)
const groupId = env.GROUP
let owned = []

const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n')

// KAFKAJS_LOG=info (or debug, warn, error) writes kafkajs's own log to stderr.
const level = { debug: logLevel.DEBUG, info: logLevel.INFO, warn: logLevel.WARN, error: logLevel.ERROR }[env.KAFKAJS_LOG] || logLevel.NOTHING
const logCreator = () => ({ namespace, level, log }) => process.stderr.write(JSON.stringify({ namespace, level, ...log }) + '\n')
// KAFKAJS_RETRIES overrides kafkajs's retry count (5): after that many failed
// attempts in a row the consumer crashes, leaves its group and restarts.
const retry = env.KAFKAJS_RETRIES ? { retries: Number(env.KAFKAJS_RETRIES) } : undefined
const kafka = new Kafka({ clientId: env.CLIENT_ID, brokers: env.BOOTSTRAP.split(','), logLevel: level, logCreator, retry })
// CLIENT_DEFAULTS=1 keeps kafkajs's own heartbeat interval (3 s) and
// rebalance timeout (60 s), as an application that sets only its session.
const defaults = env.CLIENT_DEFAULTS === '1'
const consumer = kafka.consumer({
  groupId,
  sessionTimeout: Number(env.SESSION_MS),
  rebalanceTimeout: defaults ? undefined : 10000,
  heartbeatInterval: defaults ? undefined : 500,
  retry,
  maxWaitTimeInMs: 500,
})

consumer.on(consumer.events.GROUP_JOIN, (e) => {
  owned = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  emit({ owned, gen: -1, member: e.payload.memberId, event: 'join' })
})

async function main () {
  emit({ hello: 'kafkajs ' + require('kafkajs/package.json').version })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({ autoCommit: false, eachMessage: async () => {} })
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    const cmd = line.trim()
    if (cmd.startsWith('commit')) {
      const words = cmd.split(/\s+/)
      const base = words.length > 1 ? Number(words[1]) : 100
      const mine = owned.slice()
      try {
        if (mine.length > 0) await consumer.commitOffsets(mine.map((p) => ({ topic, partition: p, offset: String(base + p) })))
      } catch (err) {
        emit({ error: String(err && err.message || err), command: 'commit' })
        continue
      }
      const out = {}
      mine.forEach((p) => { out[String(p)] = base + p })
      emit({ committed_own: out })
    } else if (cmd === 'fetch') {
      const admin = kafka.admin()
      await admin.connect()
      const res = await admin.fetchOffsets({ groupId, topics: [topic] })
      await admin.disconnect()
      const out = {}
      for (const p of res[0].partitions) out[String(p.partition)] = Number(p.offset)
      for (let p = 0; p < parts; p++) if (!(String(p) in out)) out[String(p)] = -1
      emit({ committed: out })
    } else if (cmd === 'close') {
      await consumer.disconnect()
      emit({ closed: true })
      process.exit(0)
    }
  }
}

main().catch((err) => { emit({ error: String(err && err.stack || err) }); process.exit(1) })
