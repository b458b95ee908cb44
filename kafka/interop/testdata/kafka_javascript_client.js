// A librdkafka consumer, through @confluentinc/kafka-javascript's
// node-rdkafka API (KafkaConsumer), driven by the interop tests.
// GROUP_PROTOCOL=consumer (KIP-848, the server assigns) or classic (with
// ASSIGNOR). Reads commands on stdin (commit, fetch, close), writes JSON
// lines on stdout.
//
// Ownership: every rebalance callback is reported as an "ev" line with both
// of its ends on CLOCK_MONOTONIC (process.hrtime, one clock for every
// process of the machine): t0 when it was called, t when it returned, an
// assignment after (incremental_)assign, a revocation after
// (incremental_)unassign, which is what lets librdkafka tell the
// coordinator it gave the partitions up.
//
// Commits: "commit" commits, for every owned partition, the current
// CLOCK_MONOTONIC in microseconds (so a later commit, from any process,
// carries a larger offset). KafkaConsumer.commit only queues a commit (so
// does commitCb's callback say); a commit counts as acknowledged only when
// librdkafka's offset_commit_cb reports it without error (librdkafka sets
// that error when any partition failed): then an "acked" line. One commit
// is in flight at a time, and a revocation waits for it: no commit names a
// partition outside the callbacks that bound its ownership.
// COMMIT_EVERY_MS also commits in the background.
const Kafka = require('@confluentinc/kafka-javascript')
const readline = require('readline')

const env = process.env
const topic = env.TOPIC
const parts = Number(env.PARTITIONS)
const protocol = env.GROUP_PROTOCOL || 'consumer'
const ERR = Kafka.CODES.ERRORS

const now = () => Number(process.hrtime.bigint())
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n')

const owned = new Set()
const sorted = (s) => [...s].sort((a, b) => a - b)
const report = (event) => emit({ owned: sorted(owned), gen: -1, member: '', event })

let inflight = null // the commit in flight: a promise
let pending = null // its offsets and how to settle it

const conf = {
  'bootstrap.servers': env.BOOTSTRAP,
  'group.id': env.GROUP,
  'client.id': env.CLIENT_ID,
  'group.protocol': protocol,
  'enable.auto.commit': false,
  'auto.offset.reset': 'earliest',
  event_cb: true,
  rebalance_cb: onRebalance,
  offset_commit_cb: onOffsetCommit,
}
if (protocol === 'classic') {
  // The consumer protocol takes these from the coordinator; librdkafka
  // refuses them with it.
  conf['partition.assignment.strategy'] = env.ASSIGNOR || 'range'
  conf['session.timeout.ms'] = Number(env.SESSION_MS)
  conf['heartbeat.interval.ms'] = 500
}
if (env.RECONNECT_BACKOFF_MAX_MS) conf['reconnect.backoff.max.ms'] = Number(env.RECONNECT_BACKOFF_MAX_MS)
// RDKAFKA_DEBUG (cgrp, say) writes librdkafka's debug log to stderr.
if (env.RDKAFKA_DEBUG) conf.debug = env.RDKAFKA_DEBUG

const consumer = new Kafka.KafkaConsumer(conf, {})

function onRebalance (err, assignment) {
  const t0 = now()
  const mine = assignment.filter((tp) => tp.topic === topic).map((tp) => tp.partition)
  const incremental = this.rebalanceProtocol() === 'COOPERATIVE'
  if (err && err.code === ERR.ERR__ASSIGN_PARTITIONS) {
    try {
      if (incremental) this.incrementalAssign(assignment)
      else this.assign(assignment)
    } catch (e) {
      // Refused while the consumer closes: it never had them.
      emit({ log: 'assign: ' + e.message })
      return
    }
    if (!incremental) owned.clear()
    mine.forEach((p) => owned.add(p))
    emit({ ev: 'assigned', parts: mine, t0, t: now() })
    report('assign')
    return
  }
  if (err && err.code === ERR.ERR__REVOKE_PARTITIONS) {
    const lost = this.assignmentLost()
    // A revocation may name partitions whose assignment never reached the
    // application (its assign call refused while closing): those it never
    // held.
    const never = mine.filter((p) => !owned.has(p))
    if (never.length > 0) emit({ log: 'revoked ' + JSON.stringify(never) + ', never assigned to the application' })
    const held = mine.filter((p) => owned.has(p))
    // No commit started from now on names them; the one in flight, if any,
    // is answered before they are given up.
    held.forEach((p) => owned.delete(p))
    const release = () => {
      try {
        if (incremental) this.incrementalUnassign(assignment)
        else this.unassign()
      } catch (e) {
        emit({ log: 'unassign: ' + e.message })
      }
      emit({ ev: lost ? 'lost' : 'revoked', parts: held, t0, t: now() })
      report(lost ? 'lost' : 'revoke')
    }
    if (inflight) inflight.then(release, release)
    else release()
    return
  }
  emit({ log: 'rebalance error: ' + (err && err.message) })
}

function onOffsetCommit (err, offsets) {
  if (!pending) return
  const mine = offsets.filter((tp) => tp.topic === topic)
  const same = mine.length === pending.offsets.length &&
    mine.every((tp) => pending.offsets.some((o) => o.partition === tp.partition && o.offset === tp.offset))
  if (!same) return
  const p = pending
  pending = null
  if (err) p.reject(new Error('offset_commit_cb: ' + err.message + ' (code ' + err.code + ')'))
  else p.resolve()
}

// commit commits what the consumer owns and resolves to partition ->
// offset once offset_commit_cb reported it without error.
function commit () {
  if (inflight) return inflight.then(commit, commit)
  const ps = sorted(owned)
  if (ps.length === 0) return Promise.resolve({})
  const sent = now()
  const off = Math.floor(sent / 1000)
  const offsets = ps.map((p) => ({ topic, partition: p, offset: off }))
  inflight = new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      pending = null
      reject(new Error('no offset_commit_cb within 30s'))
    }, 30000)
    pending = {
      offsets,
      resolve: () => { clearTimeout(timer); resolve() },
      reject: (e) => { clearTimeout(timer); reject(e) },
    }
    try {
      consumer.commit(offsets)
    } catch (e) {
      pending.reject(e)
      pending = null
    }
  }).then(() => {
    const acked = {}
    ps.forEach((p) => { acked[String(p)] = off })
    emit({ acked, sent, t: now() })
    return acked
  }).finally(() => { inflight = null })
  return inflight
}

consumer.on('event.error', (err) => {
  if (err.code === ERR.ERR_INCONSISTENT_GROUP_PROTOCOL) emit({ rejected: err.message })
  else emit({ log: 'error: ' + err.message + ' (code ' + err.code + ')' })
})
consumer.on('event.log', (l) => process.stderr.write(JSON.stringify(l) + '\n'))
consumer.on('data', () => {})

let background = null
let closing = false
let ready = false
const connected = new Promise((resolve) => consumer.once('ready', resolve))
consumer.on('ready', () => {
  ready = true
  emit({ hello: '@confluentinc/kafka-javascript ' + require('@confluentinc/kafka-javascript/package.json').version + ' librdkafka ' + Kafka.librdkafkaVersion + ' group.protocol=' + protocol })
  if (closing) return // told to close before it was connected
  consumer.subscribe([topic])
  consumer.consume()
  const every = Number(env.COMMIT_EVERY_MS || 0)
  if (every > 0) {
    background = setInterval(() => {
      if (inflight) return
      commit().catch((e) => emit({ commit_failed: e.message }))
    }, every)
  }
})
consumer.connect({}, (err) => {
  if (err) {
    emit({ error: 'connect: ' + err.message })
    process.exit(1)
  }
})

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', (line) => {
  const cmd = line.trim()
  if (cmd === 'commit') {
    commit().then(
      (acked) => emit({ committed_own: acked }),
      (e) => { emit({ commit_failed: e.message }); emit({ error: e.message, command: 'commit' }) })
  } else if (cmd === 'fetch') {
    const tps = []
    for (let p = 0; p < parts; p++) tps.push({ topic, partition: p })
    consumer.committed(tps, 10000, (err, res) => {
      if (err) return emit({ error: err.message, command: 'fetch' })
      const out = {}
      res.forEach((tp) => { out[String(tp.partition)] = tp.offset })
      emit({ committed: out })
    })
  } else if (cmd === 'close') {
    closing = true
    if (background) clearInterval(background)
    const leave = () => consumer.disconnect(() => {
      // Whatever no callback released is released by the close.
      if (owned.size > 0) {
        emit({ ev: 'closed', parts: sorted(owned), t0: now(), t: now() })
        owned.clear()
      }
      emit({ closed: true })
      process.exit(0)
    })
    // Told to close before it was connected: it connects first.
    const settled = ready ? Promise.resolve() : connected
    settled.then(() => (inflight ? inflight.then(leave, leave) : leave()))
  }
})
