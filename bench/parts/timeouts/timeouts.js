// Part 15, timeouts: how long Redis takes to answer the reserve script under the soak's traffic,
// and how many outages a `timeoutMs` of 50, 100, 250, 500 or 1000 ms would begin on a Redis that never
// failed (false outages: each one paces per replica for `retryMs`, and warns). Two replicas of the
// soak (bench/parts/soak/soak-replica.js, the README's token route, 135 requests a second in all, the soak's
// streams) on a redis-server of the part's own, each with `timeoutMs` 10 s so that no answer is
// cut off; each reserve call is timed from the store's call to its answer, what the store's
// timeout counts (the event loop's turns in between included). Two phases of equal length: the
// traffic alone, then the same traffic with BURNERS processes spinning on the CPU beside it (the
// load of a busy host: the machine has two cores).
//
// The false outages are counted on each replica's calls as they came: an answer later than T
// begins one T after its call; while it lasts the calls that start within `retryMs` (1000, the
// default) of its latest try would not have asked Redis; the first call after that is the retry,
// which ends it if answered within T, and otherwise tries again `retryMs` later.
//
// Run alone: node bench/parts/timeouts/timeouts.js [--quick|--smoke] [--out DIR]. Needs redis-server; without it
// the part records that it was skipped, and why.

import { fork, spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { STREAMS, drive } from '../soak/soak-traffic.js'
import { BENCH_DIR, byMode, fmt, log, parseOptions, table, writeResult } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { seconds: 60, burners: 4 },
  quick: { seconds: 20, burners: 4 },
  smoke: { seconds: 1, burners: 1 }
})
/** The timeouts compared, in ms (the three, and two longer), and the store's retry interval the outages are counted with. */
const TIMEOUTS = [50, 100, 250, 500, 1000]
const RETRY_MS = 1000
/** The replicas' own timeout: long enough that no answer is cut off. */
const MEASURING_TIMEOUT_MS = 10_000
const BUDGET_WINDOW = 60

function startReplica (redisPort) {
  const child = fork(join(BENCH_DIR, 'parts', 'soak', 'soak-replica.js'), [String(BUDGET_WINDOW), 'redis', String(redisPort), String(MEASURING_TIMEOUT_MS)], { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const next = cmd => new Promise((resolve, reject) => {
    const onMessage = message => {
      if (message.cmd !== cmd) return
      child.off('message', onMessage)
      resolve(message)
    }
    child.on('message', onMessage)
    child.once('exit', code => reject(new Error(`timeouts: a replica exited (${code})`)))
  })
  const ask = cmd => {
    const answering = next(cmd)
    child.send({ cmd })
    return answering
  }
  const exit = () => child.exitCode !== null ? Promise.resolve() : new Promise(resolve => { child.once('exit', resolve); child.send({ cmd: 'exit' }) })
  return next('ready').then(ready => ({ port: ready.port, ask, exit, child }))
}

const at = (sorted, q) => sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]

/**
 * The outages a store with `timeoutMs` T would have begun on one replica's calls (`[startMs, ms]`
 * in the order they began), and the time it would have paced in memory, as the file's head says.
 */
function falseOutages (calls, timeoutMs, retryMs = RETRY_MS) {
  let outages = 0
  let degradedMs = 0
  let triedAt = null // the latest try of the outage in course, or null while none
  let began = 0
  for (const [startMs, ms] of calls) {
    if (triedAt !== null) {
      if (startMs - triedAt < retryMs) continue
      if (ms < timeoutMs) {
        degradedMs += startMs + ms - began
        triedAt = null
      } else triedAt = startMs + timeoutMs
      continue
    }
    if (ms >= timeoutMs) {
      outages++
      began = triedAt = startMs + timeoutMs
    }
  }
  if (triedAt !== null) degradedMs += (calls.at(-1)?.[0] ?? began) - began
  return { outages, degradedMs }
}

/** One phase: the soak's traffic on both replicas for `seconds`; the answer times and what each timeout makes of them. */
async function phase (name, replicas, seconds) {
  await Promise.all(replicas.map(r => r.ask('answers'))) // drops what came before
  const statuses = {}
  const startMs = performance.now()
  const driven = await drive({
    ports: replicas.map(r => r.port),
    untilMs: startMs + seconds * 1000,
    tally: (replica, stream, status) => { statuses[status] = (statuses[status] ?? 0) + 1 }
  })
  const answered = await Promise.all(replicas.map(r => r.ask('answers')))
  const perReplica = answered.map(a => a.answers.sort((x, y) => x[0] - y[0]))
  const sorted = perReplica.flat().map(([, ms]) => ms).sort((a, b) => a - b)
  const hours = seconds / 3600
  const byTimeout = TIMEOUTS.map(timeoutMs => {
    const slower = sorted.filter(ms => ms >= timeoutMs).length
    const counted = perReplica.map(calls => falseOutages(calls, timeoutMs))
    const outages = counted.reduce((sum, c) => sum + c.outages, 0)
    return { timeoutMs, slower, outages, outagesPerHour: outages / hours, degradedMs: counted.reduce((sum, c) => sum + c.degradedMs, 0) }
  })
  const result = {
    name,
    seconds,
    calls: sorted.length,
    statuses,
    skipped: driven.skipped,
    answerMs: { p50: at(sorted, 0.5), p99: at(sorted, 0.99), p999: at(sorted, 0.999), max: sorted.at(-1) ?? NaN },
    byTimeout,
    outagesLogged: answered.reduce((sum, a) => sum + a.logged.outages, 0)
  }
  log(`  ${name}: ${result.calls} reserve calls; answer p50 ${fmt(result.answerMs.p50, 2)} ms, p99 ${fmt(result.answerMs.p99, 2)}, p99.9 ${fmt(result.answerMs.p999, 2)}, max ${fmt(result.answerMs.max, 1)}`)
  return result
}

/** `count` processes spinning on the CPU until killed. */
function burn (count) {
  return Array.from({ length: count }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }))
}

async function main () {
  const redisServer = redisServerVersion()
  if (redisServer === null) {
    log('timeouts: redis-server is not installed: skipped')
    writeResult(options, 'timeouts', { skipped: 'redis-server is not installed', target: { met: false } })
    return
  }
  const server = await startAlone()
  const { port } = server
  let burners = []
  const release = () => {
    for (const burner of burners) burner.kill('SIGKILL')
  }
  process.once('exit', release)
  const replicas = await Promise.all([0, 1].map(() => startReplica(port)))
  try {
    log(`timeouts: ${settings.seconds} s of the soak's ${STREAMS.reduce((sum, s) => sum + s.perSecond, 0)} requests/s on two replicas, alone and beside ${settings.burners} processes spinning on the CPU`)
    const alone = await phase('soak traffic alone', replicas, settings.seconds)
    const loadBefore = (await import('node:os')).loadavg()[0]
    burners = burn(settings.burners)
    await sleep(Math.min(5000, settings.seconds * 250)) // the load average follows
    const loaded = await phase(`the same, beside ${settings.burners} processes spinning`, replicas, settings.seconds)
    const loadDuring = (await import('node:os')).loadavg()[0]
    for (const burner of burners) burner.kill('SIGKILL')
    await Promise.all(burners.map(burner => burner.exitCode === null && burner.signalCode === null ? once(burner, 'exit') : null))
    burners = []
    const phases = [alone, loaded]
    log(table(['phase', 'calls', 'p50 ms', 'p99 ms', 'p99.9 ms', 'max ms', ...TIMEOUTS.map(ms => `at ${ms} ms: outages, degraded`)],
      phases.map(p => [p.name, p.calls, fmt(p.answerMs.p50, 2), fmt(p.answerMs.p99, 2), fmt(p.answerMs.p999, 2), fmt(p.answerMs.max, 1),
        ...p.byTimeout.map(b => `${b.outages}, ${fmt(b.degradedMs / 1000, 1)} s`)])))
    const failed = phases.reduce((sum, p) => sum + Object.entries(p.statuses).filter(([status]) => status === 'error' || Number(status) >= 500).reduce((s, [, n]) => s + n, 0), 0)
    const file = writeResult(options, 'timeouts', {
      description: 'the reserve script\'s answer time under the soak\'s traffic, alone and at load, and the outages each timeoutMs would begin on a Redis that never failed',
      settings: { ...settings, timeouts: TIMEOUTS, retryMs: RETRY_MS, requestsPerSecond: STREAMS.reduce((sum, s) => sum + s.perSecond, 0) },
      redisServer,
      loadavg1: { before: loadBefore, during: loadDuring },
      phases,
      target: { what: 'no request failed; every reserve call answered', met: failed === 0 && phases.every(p => p.calls > 0) }
    })
    log(`timeouts: wrote ${file}`)
  } finally {
    await Promise.all(replicas.map(r => r.exit()))
    release()
    await server.kill()
  }
}

await main()
