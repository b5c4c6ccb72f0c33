// Part 9, soak: does anything grow or get lost over an hour of mixed traffic? Two replicas on the
// in-process store and two on a RedisStore, all four at once, each its own process
// (bench/parts/soak/soak-replica.js) serving the README's recommended token route, with the failure budget's
// window shortened to 600 s (60 s in --quick; bench/parts/soak/soak-traffic.js says why). Each store's pair gets the same
// traffic over loopback HTTP, alternating between its replicas: 20 registered clients, 10 at their
// rate (5/s) and 10 below it (2/s); wrong secrets naming those below their rate from addresses that
// change (refunded on the client's pace); a flood of made-up client ids (50/s, each refunded); a
// guesser at one client's secret from one address (10/s). 135 requests a second per store.
//
// The Redis replicas share a redis-server of the part's own (a spare loopback port, nothing kept on
// disk), stopped (SIGSTOP) for a few seconds every ten minutes, between two samples: each stop is
// an outage the replicas pace through in memory. The in-process store has no outage to suffer.
//
// Every sample (each minute; every 15 s in --quick) records per replica the rows each pace holds,
// heap (after a full collection), RSS, the event loop's delay since the last sample (p99, max) and
// each pace's counts; on Redis, the keys of each pace, those without an expiry, those whose expiry
// lies beyond their pace's window, and the refund script's calls and answers. What is checked:
// - rows: a budget's rows in a replica's memory at most twice the (client, source) pairs that
//   replica was sent within the last window, plus the registered clients' (the sweep's bound);
//   one-second paces with no row once traffic has stopped for a second and the paces are swept;
// - Redis: every key with an expiry, none beyond its window; no one-second key once traffic stopped;
// - refunds: each pace keeps what its spend says it should (the client pace one unit per 200, the
//   budget one per 401: a refund that never came back would show as one more), and every refund
//   script call sent to Redis answered;
// - flat: the median of the last third of the samples within 10% (and a little: 2 MB of heap,
//   10 MB of RSS, 100 rows) of that of the middle third, per replica.
//
// Run alone: node bench/parts/soak/soak.js [--quick|--smoke] [--out DIR]: an hour, 4 minutes, or 4 seconds.

import { fork } from 'node:child_process'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import Redis from 'ioredis'
import { CLIENTS, STREAMS, drive, pacesOf } from './soak-traffic.js'
import { BENCH_DIR, byMode, fmt, log, median, parseOptions, table, writeResult } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { seconds: 3600, sampleSeconds: 60, outageEverySeconds: 600, outageSeconds: 5, budgetWindow: 600 },
  quick: { seconds: 240, sampleSeconds: 15, outageEverySeconds: 60, outageSeconds: 3, budgetWindow: 60 },
  smoke: { seconds: 4, sampleSeconds: 1, outageEverySeconds: 2, outageSeconds: 0.4, budgetWindow: 2 }
})
const PACES = pacesOf(settings.budgetWindow)

/** A replica process; `ask(cmd)` sends a command and resolves with the answer of the same name. */
function startReplica (store, redisPort) {
  const args = [String(settings.budgetWindow), store, ...(store === 'redis' ? [String(redisPort)] : [])]
  const child = fork(join(BENCH_DIR, 'parts', 'soak', 'soak-replica.js'), args, { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const waiting = new Map()
  let exited = null
  child.on('message', message => {
    waiting.get(message.cmd)?.resolve(message)
    waiting.delete(message.cmd)
  })
  child.on('exit', code => {
    exited = new Error(`soak: a ${store} replica exited (${code})`)
    for (const next of waiting.values()) next.reject(exited)
  })
  const answer = cmd => new Promise((resolve, reject) => {
    if (exited) reject(exited)
    else waiting.set(cmd, { resolve, reject })
  })
  const ask = cmd => {
    const answering = answer(cmd)
    child.send({ cmd })
    return answering
  }
  const exit = () => exited ? Promise.resolve() : new Promise(resolve => { child.once('exit', resolve); child.send({ cmd: 'exit' }) })
  return answer('ready').then(ready => ({ port: ready.port, timeoutMs: ready.timeoutMs, ask, exit }))
}

/** The keys under the soak's prefix (but the catalog of paces), per pace; those without an expiry; those expiring beyond their pace's window. */
async function redisKeys (client) {
  const found = { keys: {}, noExpiry: 0, beyondWindow: 0, longestTtlS: {} }
  for (const pace of Object.keys(PACES)) {
    found.keys[pace] = 0
    found.longestTtlS[pace] = 0
  }
  found.keys.other = 0
  const paceOf = key => Object.keys(PACES).find(pace => key.startsWith(`soak:${PACES[pace].name.replace(/[%:]/g, c => c === ':' ? '%3A' : '%25')}:`)) ?? 'other'
  let cursor = '0'
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', 'soak:*', 'COUNT', 2000)
    cursor = next
    const pipeline = client.pipeline()
    for (const key of keys) pipeline.pttl(key)
    const ttls = await pipeline.exec()
    keys.forEach((key, i) => {
      // The catalog of paces the app records when ready: one hash, kept without an expiry by design.
      if (key === 'soak:catalog') return
      const pace = paceOf(key)
      const ttl = ttls[i][1]
      found.keys[pace]++
      if (ttl === -1) found.noExpiry++
      if (pace === 'other') return
      found.longestTtlS[pace] = Math.max(found.longestTtlS[pace], ttl / 1000)
      if (ttl > PACES[pace].horizon * 1000) found.beyondWindow++
    })
  } while (cursor !== '0')
  const memory = await client.info('memory')
  found.usedMemoryMB = Number(/used_memory:(\d+)/.exec(memory)[1]) / 2 ** 20
  return found
}

/** A store's tally: statuses per replica and stream, and per second the distinct pairs each replica was sent. */
function newTally (seconds) {
  return {
    statuses: [0, 1].map(() => STREAMS.map(() => ({}))),
    distinct: [0, 1].map(() => new Uint32Array(seconds + 120))
  }
}

function tallier (tally, startMs) {
  return (replica, stream, status, sentAt) => {
    const byStatus = tally.statuses[replica][stream]
    byStatus[status] = (byStatus[status] ?? 0) + 1
    if (STREAMS[stream].distinct) tally.distinct[replica][Math.floor((sentAt - startMs) / 1000)]++
  }
}

/** The bound on a replica's budget rows at `second`: twice the pairs it was sent within the last window, and the fixed ones. */
function budgetBound (distinct, second) {
  let pairs = 0
  for (let s = Math.max(0, second - settings.budgetWindow - 1); s <= second && s < distinct.length; s++) pairs += distinct[s]
  return 2 * (pairs + CLIENTS + 1)
}

async function sampleStore (soak, second, cmd) {
  const replicas = []
  for (const replica of soak.replicas) replicas.push((await replica.ask(cmd)).sample)
  replicas.forEach((sample, r) => { sample.budgetBound = budgetBound(soak.tally.distinct[r], second) })
  const sample = { atS: second, replicas }
  if (soak.checkClient) sample.redis = await redisKeys(soak.checkClient)
  return sample
}

/** Stops the soak's redis-server for `outageSeconds` every `outageEverySeconds`, half a sample off the samples, until `untilMs`. */
async function outages (server, startMs, untilMs, record) {
  const { outageEverySeconds, outageSeconds, sampleSeconds } = settings
  for (let k = 0; ; k++) {
    const at = startMs + ((k + 0.5) * outageEverySeconds + sampleSeconds / 2) * 1000
    if (at + outageSeconds * 1000 > untilMs) return
    await sleep(at - performance.now())
    server.pause()
    record.push({ atS: (performance.now() - startMs) / 1000, seconds: outageSeconds })
    await sleep(outageSeconds * 1000)
    server.resume()
  }
}

/** Starts a store's replicas (and for Redis, a client that counts its keys). */
async function startStore (store, redisPort) {
  const replicas = await Promise.all([0, 1].map(() => startReplica(store, redisPort)))
  const checkClient = store === 'redis' ? new Redis({ host: '127.0.0.1', port: redisPort }) : null
  return { store, replicas, checkClient, tally: newTally(settings.seconds), samples: [] }
}

/** The whole run: traffic on every store until the end, a sample of each every `sampleSeconds`, the outages; then the final sample. */
async function soakAll (soaks, server) {
  const startMs = performance.now()
  const untilMs = startMs + settings.seconds * 1000
  const stalls = []
  const driving = soaks.map(soak => drive({ ports: soak.replicas.map(r => r.port), untilMs, tally: tallier(soak.tally, startMs) }))
  const stopping = server === null ? Promise.resolve() : outages(server, startMs, untilMs, stalls)
  for (let k = 1; k * settings.sampleSeconds <= settings.seconds; k++) {
    await sleep(startMs + k * settings.sampleSeconds * 1000 - performance.now())
    for (const soak of soaks) {
      const sample = await sampleStore(soak, k * settings.sampleSeconds, 'sample')
      soak.samples.push(sample)
      printSample(soak.store, sample)
    }
  }
  const driven = await Promise.all(driving)
  await stopping
  // One second-pace horizon and a little more with no traffic: then no second-pace row or key may be left.
  await sleep(1500)
  const ends = []
  for (const soak of soaks) ends.push(await sampleStore(soak, Math.round((performance.now() - startMs) / 1000), 'tidy'))
  return { stalls, skipped: driven.map(d => d.skipped), ends }
}

function printSample (store, sample) {
  const rows = sample.replicas.map(r => Object.values(r.rows).join('/')).join(' | ')
  const redis = sample.redis ? `; Redis keys ${Object.values(sample.redis.keys).join('/')}, ${fmt(sample.redis.usedMemoryMB)} MB` : ''
  log(`  soak ${fmt(sample.atS / 60, 1)} min ${store}: rows ${rows}; heap ${sample.replicas.map(r => fmt(r.heapMB)).join(' | ')} MB; RSS ${sample.replicas.map(r => fmt(r.rssMB)).join(' | ')} MB; ELD p99 ${sample.replicas.map(r => fmt(r.eld.p99Ms)).join(' | ')} ms${redis}`)
}

const total = values => values.reduce((a, b) => a + b, 0)

/** Each status's count over a replica's streams. */
function statusesOf (byStream) {
  const out = {}
  for (const byStatus of byStream) for (const [status, n] of Object.entries(byStatus)) out[status] = (out[status] ?? 0) + n
  return out
}

/** Whether the median of the last third of `values` is within 10% (and `slack`) of the middle third's. */
function flatness (values, slack) {
  const third = Math.floor(values.length / 3)
  const middle = median(values.slice(third, 2 * third))
  const last = median(values.slice(2 * third))
  const ok = values.length < 3 || last <= middle * 1.1 + slack
  return { middle, last, flat: ok }
}

/** What a store's run lost or kept too long, and whether it stayed flat. */
function checkStore (soak, end) {
  const { name: budget } = PACES.budget
  const oneSecond = [PACES.client.name, PACES.source.name]
  const perReplica = end.replicas.map((replica, r) => {
    const statuses = statusesOf(soak.tally.statuses[r])
    const kept = name => replica.counts[name].granted - replica.counts[name].refunded
    const samples = soak.samples.map(s => s.replicas[r])
    return {
      statuses,
      failed: total(Object.entries(statuses).filter(([status]) => status === 'error' || Number(status) >= 500).map(([, n]) => n)),
      clientPace: { kept: kept(PACES.client.name), accepted: statuses[200] ?? 0 },
      budgetPace: { kept: kept(budget), rejected: statuses[401] ?? 0 },
      budgetRowsOverBound: samples.filter(s => s.rows[budget] > s.budgetBound).length,
      oneSecondRowsAtEnd: total(oneSecond.map(name => replica.rows[name])),
      refundsUnanswered: replica.refunds === null ? 0 : replica.refunds.sent - replica.refunds.gave - replica.refunds.nothing - replica.refunds.failed,
      refunds: replica.refunds,
      outagesLogged: replica.logged.outages,
      flat: {
        heapMB: flatness(samples.map(s => s.heapMB), 2),
        rssMB: flatness(samples.map(s => s.rssMB), 10),
        rows: flatness(samples.map(s => total(Object.values(s.rows))), 100)
      }
    }
  })
  const redis = end.redis === undefined
    ? null
    : {
        noExpiry: total(soak.samples.map(s => s.redis.noExpiry)) + end.redis.noExpiry,
        beyondWindow: total(soak.samples.map(s => s.redis.beyondWindow)) + end.redis.beyondWindow,
        oneSecondKeysAtEnd: end.redis.keys.client + end.redis.keys.source,
        otherKeys: end.redis.keys.other,
        flat: flatness(soak.samples.map(s => s.redis.usedMemoryMB), 2)
      }
  const lost = perReplica.some(r => r.failed > 0 || r.clientPace.kept !== r.clientPace.accepted || r.budgetPace.kept !== r.budgetPace.rejected ||
    r.budgetRowsOverBound > 0 || r.oneSecondRowsAtEnd > 0 || r.refundsUnanswered !== 0 || (r.refunds?.failed ?? 0) > 0) ||
    (redis !== null && (redis.noExpiry > 0 || redis.beyondWindow > 0 || redis.oneSecondKeysAtEnd > 0 || redis.otherKeys > 0))
  const flat = perReplica.every(r => Object.values(r.flat).every(f => f.flat)) && (redis === null || redis.flat.flat)
  return { replicas: perReplica, redis, lost, flat }
}

function printChecks (store, checks) {
  log(`\nsoak, ${store}: ${checks.flat ? 'flat' : 'NOT flat'}; ${checks.lost ? 'something lost or kept too long' : 'nothing lost, nothing kept past its window'}`)
  log(table(['replica', 'statuses', 'client pace kept / 200s', 'budget kept / 401s', 'samples over the budget bound', 'second-pace rows at the end', 'refunds sent / unanswered', 'heap MB middle -> last third', 'RSS MB', 'rows'],
    checks.replicas.map((r, i) => [String(i + 1), Object.entries(r.statuses).map(([s, n]) => `${s}:${n}`).join(' '), `${r.clientPace.kept} / ${r.clientPace.accepted}`, `${r.budgetPace.kept} / ${r.budgetPace.rejected}`,
      String(r.budgetRowsOverBound), String(r.oneSecondRowsAtEnd), r.refunds === null ? '-' : `${r.refunds.sent} / ${r.refundsUnanswered}`,
      `${fmt(r.flat.heapMB.middle)} -> ${fmt(r.flat.heapMB.last)}`, `${fmt(r.flat.rssMB.middle)} -> ${fmt(r.flat.rssMB.last)}`, `${fmt(r.flat.rows.middle, 0)} -> ${fmt(r.flat.rows.last, 0)}`])))
  if (checks.redis) log(`Redis: keys without expiry ${checks.redis.noExpiry}, beyond their window ${checks.redis.beyondWindow}, one-second keys at the end ${checks.redis.oneSecondKeysAtEnd}; used_memory ${fmt(checks.redis.flat.middle)} -> ${fmt(checks.redis.flat.last)} MB`)
}

async function main () {
  const redisServer = redisServerVersion()
  let server = null // under a watchdog: a stopped server does not outlive the bench, whatever ends it
  if (redisServer !== null) {
    server = await startAlone()
  } else log('soak: redis-server is not installed: the Redis replicas are left out')
  const soaks = [await startStore('memory')]
  if (server !== null) soaks.push(await startStore('redis', server.port))
  log(`soak: ${settings.seconds} s of ${total(STREAMS.map(s => s.perSecond))} requests/s per store, two replicas each (${soaks.map(s => s.store).join(', ')}), a sample every ${settings.sampleSeconds} s`)
  try {
    const { stalls, skipped, ends } = await soakAll(soaks, server)
    const stores = {}
    soaks.forEach((soak, i) => {
      const checks = checkStore(soak, ends[i])
      printChecks(soak.store, checks)
      stores[soak.store] = { samples: soak.samples, end: ends[i], skipped: skipped[i], checks }
    })
    const file = writeResult(options, 'soak', {
      description: 'mixed traffic through two replicas per store: rows held, heap, RSS, event-loop delay and counts each sample; losses and flatness checked',
      settings: { ...settings, timeoutMs: soaks.find(soak => soak.store === 'redis')?.replicas[0].timeoutMs, streams: STREAMS.map(s => ({ name: s.name, perSecond: s.perSecond })) },
      redisServer,
      redisSkipped: server === null ? 'redis-server is not installed' : undefined,
      stalls,
      stores,
      target: {
        what: 'rows, heap and RSS flat after the warm-up; no refund lost, no row or key kept past its window, no request failed',
        met: Object.values(stores).every(s => s.checks.flat && !s.checks.lost)
      }
    })
    log(`\nsoak: wrote ${file}`)
  } finally {
    for (const soak of soaks) {
      soak.checkClient?.disconnect()
      await Promise.all(soak.replicas.map(r => r.exit()))
    }
    await server?.kill()
  }
}

await main()
