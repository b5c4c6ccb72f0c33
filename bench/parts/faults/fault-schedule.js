// Faults at random between app replicas and Redis (issue 37, item 6): a seeded schedule of the
// fault proxy's kinds (bench/shared/fault-proxy.js), run under traffic through two app replicas, and the
// invariants checked after it. test/redis/faults.test.ts runs a few seeds; the bench's faults part
// (bench/parts/faults/faults.js) runs many and reports the worst. Plain JavaScript, as tap runs tests without
// type-checking them; the plugin and the store are passed in, so that the tests run lib/ and the
// bench the built package.
//
// The shape: two replicas (Fastify apps, asked through inject), each with its own ioredis client
// (default options, auto-pipelining on) to one proxy in front of Redis, each a RedisStore (the
// default `whenUnavailable`, 'fallback'); one route paced at `rate` a second per client, every
// exchange accepted; `clients` clients each sending `perReplica` requests a second to each replica
// (three times the rate in all), and one more client blocked (through one replica's
// `fastify.pace.block`) for the whole run before the first fault. The faults come one after
// another, a gap of 200 to 800 ms before each, and one in three overlaps the next (a slow close
// during a reset, a latency on top of a stall...); the run goes on `retryMs` + 1.5 s after the last
// fault's end, and longer while a replica is degraded (at most `retryMs` + 2 s more). The invariants, each a violation when broken:
// - no 5xx, no error logged, no request that failed;
// - every key under the prefix carries an expiry but the catalog of paces and the audit trail,
//   kept by design (checked after every fault's end and at the end);
// - no client admitted above the bound docs/stores.md gives for the time it was degraded (What a
//   failed master costs a key on it, over several outages): in any span of w seconds (between two
//   of its admissions, widened by `timeoutMs`, the most a decision precedes its answer),
//   `rate x (w + 1)` through Redis, one bucket for a lost row or reply, and per replica one bucket
//   for each of its degradations the span meets plus `rate x t`, t the seconds of the span it was
//   degraded (see `admissionBound`);
// - every degradation (a replica's outage, from its warning to its "shared again" line) over
//   within `retryMs` + 1 s of the end of its fault (the latest to end of the faults that began
//   before it ended); none open at the end;
// - the blocked client refused on every replica, every time;
// - every "shared again" line true: from it to the replica's next warning (or the end), that
//   replica decided no request without Redis's answer but the one its next warning is about.
//
// ioredis reconnects after a reset with waits growing by 50 ms (to 2 s): a reset fault longer than
// about 1.5 s leaves it waiting past the fault's end, longer than the bound above gives. The
// schedule's faults last 100 ms to 1 s.

import Fastify from 'fastify'
import Redis from 'ioredis'
import { startFaultProxy } from '../../shared/fault-proxy.js'
import { random } from '../../shared/common.js'

const PACE = '/token'
const KINDS = ['latency', 'stall', 'reset', 'half-open', 'slow-close']
const DIRECTIONS = ['upstream', 'downstream', 'both']

/** The default shape; a caller may change any of it. */
export const SHAPE = { rate: 10, clients: 4, perReplica: 15, faults: 4, warmupMs: 500, timeoutMs: undefined, retryMs: 500 }

/**
 * The schedule of `seed`: `faults` faults, each `{ atMs, forMs, fault }` (from the run's start),
 * in order of their start. A latency is up to twice `timeoutMs` (so some time out and some do not).
 */
export function faultSchedule (seed, { faults = SHAPE.faults, warmupMs = SHAPE.warmupMs, timeoutMs }) {
  const rand = random(Math.imul(seed, 0x9e3779b1) ^ 0x85ebca6b) // neighbouring seeds, unrelated schedules
  const pick = list => list[Math.floor(rand() * list.length)]
  const schedule = []
  let at = warmupMs
  for (let i = 0; i < faults; i++) {
    at += 200 + Math.round(rand() * 600)
    const forMs = 100 + Math.round(rand() * 900)
    const kind = pick(KINDS)
    const fault = kind === 'latency'
      ? { kind, ms: Math.round(rand() * 2 * timeoutMs), jitterMs: Math.round(rand() * timeoutMs / 4), direction: pick(DIRECTIONS) }
      : kind === 'stall' || kind === 'half-open'
        ? { kind, direction: pick(DIRECTIONS) }
        : kind === 'slow-close' ? { kind, delayMs: 100 + Math.round(rand() * 900) } : { kind }
    schedule.push({ atMs: at, forMs, fault })
    at += rand() < 1 / 3 ? Math.round(forMs / 2) : forMs
  }
  return schedule
}

const basic = id => `Basic ${Buffer.from(`${id}:secret`).toString('base64')}`

/** One replica: its app, client, log lines as they came (with when), and its counts at each outage line. */
async function startReplica ({ exchangePace, RedisStore, proxy, prefix, rate, timeoutMs, retryMs, now }) {
  const replica = { lines: [], clientErrors: 0 }
  const client = new Redis({ host: proxy.host, port: proxy.port, enableAutoPipelining: true, lazyConnect: true })
  client.on('error', () => { replica.clientErrors++ }) // the faults' resets: the store reports what they cost
  await client.connect()
  const store = new RedisStore({ client, prefix, retryMs, ...(timeoutMs === undefined ? {} : { timeoutMs }) })
  const stream = {
    write (line) {
      // Warnings and errors, and the lines that end an outage; not the requests' own.
      if (!/"level":[456]0/.test(line) && !line.includes('shared by all replicas again')) return
      const entry = JSON.parse(line)
      // Read at the line: what this replica decided without Redis so far (the line's own request included).
      const counts = replica.app?.pace.counts(PACE)
      replica.lines.push({ atMs: now(), level: entry.level, msg: entry.msg, alone: counts === undefined ? 0 : counts.grantedWithoutStore + counts.refusedWithoutStore })
    }
  }
  const app = Fastify({ logger: { level: 'info', stream } })
  await app.register(exchangePace, { store })
  app.post(PACE, { config: { pace: { perSecond: rate, key: 'client', spend: 'accepted' } } }, async () => ({ access_token: 'token', token_type: 'Bearer' }))
  await app.ready()
  replica.app = app
  replica.store = store
  replica.client = client
  return replica
}

/** Keys under `prefix` without an expiry, read past the proxy. */
async function keysWithoutExpiry (check, prefix) {
  const found = []
  let cursor = '0'
  do {
    const [next, keys] = await check.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
    cursor = next
    for (const key of keys) {
      // The catalog of paces and the audit trail are kept without an expiry by design, one key each
      // (docs/operating.md); every other key is a row, a block or the index of blocks.
      if (key === `${prefix}catalog` || key === `${prefix}audit`) continue
      if (await check.pttl(key) === -1) found.push(key)
    }
  } while (cursor !== '0')
  return found
}

/**
 * The degradations of one replica from its lines: `[{ warnedMs, beganMs, endedMs }]`, from its
 * warning to its "shared again" line (endedMs Infinity when it never ended). Its decisions in
 * memory begin `timeoutMs` before the warning: the request that timed out took its unit in memory
 * when it reached the store.
 */
function degradationsOf (replica, timeoutMs) {
  const spans = []
  let open = null
  for (const line of replica.lines) {
    if (line.level === 40 && line.msg.includes('unavailable (')) {
      if (open === null) open = { warnedMs: line.atMs, beganMs: line.atMs - timeoutMs, endedMs: Infinity }
    } else if (line.level === 30 && line.msg.includes('shared by all replicas again') && open !== null) {
      open.endedMs = line.atMs
      spans.push(open)
      open = null
    }
  }
  if (open !== null) spans.push(open)
  return spans
}

/** The length of the part of [from, to] that `spans` cover (spans may overlap). */
function covered (spans, from, to) {
  const parts = spans.map(s => [Math.max(from, s.beganMs), Math.min(to, s.endedMs)]).filter(([a, b]) => b > a).sort((x, y) => x[0] - y[0])
  let total = 0
  let reach = -Infinity
  for (const [a, b] of parts) {
    if (b <= reach) continue
    total += b - Math.max(a, reach)
    reach = b
  }
  return total
}

/**
 * The most one client may be admitted in `w` seconds, [from, to] (ms of the run), over all
 * replicas, by docs/stores.md (What a failed master costs a key on it, over several outages):
 * `rate x (w + 1)` through Redis, one bucket for a lost row or reply, and for each replica, each of
 * its degradations the span meets brings its bucket and the rate for the seconds it lasts.
 */
export function admissionBound (rate, w, spansByReplica, from, to) {
  let memory = 0
  for (const spans of spansByReplica) {
    const met = spans.filter(span => span.beganMs < to && span.endedMs > from).length
    memory += rate * (met + covered(spans, from, to) / 1000)
  }
  return rate * (w + 1) + rate + memory
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

/**
 * Drives the run: the traffic on both replicas until `endMs` (and on while a replica is degraded, a
 * stall of the process may begin one late, at most `retryMs` + 2 s more), the schedule's faults on
 * the proxy, and a look for keys without expiry after each fault's end and at the end.
 */
async function drive ({ replicas, proxy, check, prefix, schedule, endMs, clients, perReplica, retryMs, now }) {
  const seen = { statuses: {}, admitted: Array.from({ length: clients }, () => []), blockedAdmitted: 0, failed: 0 }
  const pending = new Set()
  const send = (replica, id, index) => {
    const sending = replica.app.inject({ method: 'POST', url: PACE, headers: { authorization: basic(id) } }).then(response => {
      const status = response.statusCode
      seen.statuses[status] = (seen.statuses[status] ?? 0) + 1
      if (status === 200 && index === -1) seen.blockedAdmitted++
      else if (status === 200) seen.admitted[index].push(now())
    }, () => { seen.failed++ }).finally(() => pending.delete(sending))
    pending.add(sending)
  }
  const traffic = async () => {
    const degraded = () => replicas.some(replica => replica.store.unavailable)
    for (let at = now(); at < endMs || (degraded() && at < endMs + retryMs + 2000); at += 1000 / perReplica) {
      await sleep(at - now())
      for (const replica of replicas) {
        for (let c = 0; c < clients; c++) send(replica, `client-${c}`, c)
        send(replica, 'blocked', -1)
      }
    }
  }
  const expiryChecks = []
  const faulting = async () => {
    const ends = []
    for (const { atMs, forMs, fault } of schedule) {
      await sleep(atMs - now())
      const id = await proxy.add(fault)
      ends.push(sleep(forMs).then(async () => {
        await proxy.remove(id)
        expiryChecks.push(keysWithoutExpiry(check, prefix))
      }))
    }
    await Promise.all(ends)
  }
  await Promise.all([traffic(), faulting()])
  await Promise.all(pending)
  expiryChecks.push(keysWithoutExpiry(check, prefix))
  seen.noExpiry = [...new Set((await Promise.all(expiryChecks)).flat())]
  return seen
}

/**
 * The degradations' ends against their faults': the violations, and the latest end after its
 * fault's. A degradation's fault is the latest to end of those that began before it ended: a fault
 * that begins during a degradation holds it on.
 */
function lateEnds (spans, schedule, retryMs, violations) {
  let worst = -Infinity
  for (const span of spans) {
    const before = schedule.filter(s => s.atMs <= span.endedMs)
    const faultEndMs = before.length === 0 ? span.warnedMs : Math.max(...before.map(s => s.atMs + s.forMs))
    const late = span.endedMs - Math.max(faultEndMs, span.warnedMs)
    worst = Math.max(worst, late)
    if (span.endedMs === Infinity) violations.push(`replica ${span.replica + 1}'s degradation from ${Math.round(span.warnedMs)} ms never ended`)
    else if (late > retryMs + 1000) violations.push(`replica ${span.replica + 1}'s degradation from ${Math.round(span.warnedMs)} ms ended ${Math.round(late)} ms after its fault's end, more than retryMs + 1 s`)
  }
  return spans.length === 0 ? null : Math.round(worst)
}

/** Each "shared again" line against what its replica decided without Redis until its next warning (or the end). */
function falseReturns (replicas, violations) {
  replicas.forEach((replica, r) => {
    const lines = replica.lines
    lines.forEach((line, i) => {
      if (!(line.level === 30 && line.msg.includes('shared by all replicas again'))) return
      const next = lines.slice(i + 1).find(l => l.level === 40 && l.msg.includes('unavailable ('))
      const counts = replica.app.pace.counts(PACE)
      const untilNext = next === undefined ? counts.grantedWithoutStore + counts.refusedWithoutStore - line.alone : next.alone - line.alone - 1
      if (untilNext > 0) violations.push(`replica ${r + 1} said "shared again" at ${Math.round(line.atMs)} ms, then decided ${untilNext} requests without Redis before ${next === undefined ? 'the end' : 'its next warning'}`)
    })
  })
}

/** Every client's admissions against `admissionBound` in every span between two of them: the violations, and the highest share of the bound. */
function overBound (admitted, rate, timeoutMs, spansByReplica, violations) {
  let worst = 0
  admitted.forEach((times, c) => {
    for (let i = 0; i < times.length; i++) {
      for (let j = i; j < times.length; j++) {
        const from = times[i] - timeoutMs
        const w = (times[j] - from) / 1000
        const bound = admissionBound(rate, w, spansByReplica, from, times[j])
        const count = j - i + 1
        worst = Math.max(worst, count / bound)
        if (count > bound) {
          const t = spansByReplica.map(spans => covered(spans, from, times[j]) / 1000)
          violations.push(`client-${c} was admitted ${count} times in ${w.toFixed(2)} s (the replicas degraded ${t.map(s => s.toFixed(2)).join(' and ')} s of it), above the bound ${bound.toFixed(1)}`)
          return
        }
      }
    }
  })
  return worst
}

/** The invariants after a run: what broke, in words, and the figures. */
function judge ({ replicas, seen, schedule, rate, timeoutMs, retryMs, runMs }) {
  const violations = []
  const fiveHundreds = Object.entries(seen.statuses).filter(([status]) => Number(status) >= 500).reduce((sum, [, n]) => sum + n, 0)
  if (fiveHundreds > 0) violations.push(`${fiveHundreds} answers were 5xx`)
  if (seen.failed > 0) violations.push(`${seen.failed} requests failed`)
  const errors = replicas.flatMap(r => r.lines.filter(line => line.level >= 50))
  if (errors.length > 0) violations.push(`${errors.length} errors logged (the first: ${errors[0].msg})`)
  if (seen.noExpiry.length > 0) violations.push(`${seen.noExpiry.length} keys without expiry (${seen.noExpiry.slice(0, 3).join(', ')})`)
  if (seen.blockedAdmitted > 0) violations.push(`the blocked client was admitted ${seen.blockedAdmitted} times`)
  const spansByReplica = replicas.map(replica => degradationsOf(replica, timeoutMs))
  const spans = spansByReplica.flatMap((replicaSpans, r) => replicaSpans.map(span => ({ ...span, replica: r })))
  const worstEndAfterFaultMs = lateEnds(spans, schedule, retryMs, violations)
  falseReturns(replicas, violations)
  const worstToBound = overBound(seen.admitted, rate, timeoutMs, spansByReplica, violations)
  return {
    violations,
    figures: {
      runMs: Math.round(runMs),
      statuses: seen.statuses,
      degradations: spans.length,
      degradedMs: Math.round(covered(spans, 0, runMs)),
      worstEndAfterFaultMs,
      worstToBound,
      clientErrors: replicas.reduce((sum, r) => sum + r.clientErrors, 0)
    }
  }
}

/**
 * Runs the schedule of `seed` and checks the invariants. `redis` is `{ host, port }` of the server
 * behind the proxy; `check` a client of it (past the proxy) for the keys. Resolves to
 * `{ seed, schedule, lines, violations, figures }`: each replica's log lines (when, level, message),
 * and what broke, in words (`violations`, empty when every invariant held).
 */
export async function runFaultSchedule ({ seed, exchangePace, RedisStore, redis, check, shape = {} }) {
  const { rate, clients, perReplica, faults, warmupMs, timeoutMs, retryMs } = { ...SHAPE, ...shape }
  const prefix = `exchangepace-faults:${seed}:${process.pid}:${Date.now()}:`
  const proxy = await startFaultProxy({ target: redis, random: random(seed ^ 0x5eed) })
  let started = performance.now()
  const now = () => performance.now() - started
  const replicas = []
  try {
    for (let i = 0; i < 2; i++) replicas.push(await startReplica({ exchangePace, RedisStore, proxy, prefix, rate, timeoutMs, retryMs, now }))
    const effectiveTimeout = replicas[0].store.timeoutMs
    await replicas[0].app.pace.block(PACE, { client: 'blocked' }, 3600)
    // The announcement reaches the other replica over its subscription: wait for it (at most 5 s).
    for (let waited = 0; waited < 5000 && (replicas[1].app.pace.get(PACE)?.inspect('blocked').blockedMs ?? 0) === 0; waited += 10) await sleep(10)
    const schedule = faultSchedule(seed, { faults, warmupMs, timeoutMs: effectiveTimeout })
    started = performance.now() // the schedule's times count from here, the replicas set up
    const endMs = Math.max(...schedule.map(s => s.atMs + s.forMs)) + retryMs + 1500
    const seen = await drive({ replicas, proxy, check, prefix, schedule, endMs, clients, perReplica, retryMs, now })
    const lines = replicas.map(replica => replica.lines.map(({ atMs, level, msg }) => ({ atMs: Math.round(atMs), level, msg })))
    return { seed, schedule, lines, ...judge({ replicas, seen, schedule, rate, timeoutMs: effectiveTimeout, retryMs, runMs: now() }) }
  } finally {
    for (const replica of replicas) {
      await replica.app.close()
      replica.client.disconnect()
    }
    await proxy.close()
  }
}
