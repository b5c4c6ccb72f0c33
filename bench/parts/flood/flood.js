// Part 5, key flood: can strangers with random declared ids reset a client's pace?
//
// In simulated time (bench/shared/simulated.js), through the real plugins and routes, both at 10/s per
// client id. Every 100 ms, an attacker sends 5001 requests with fresh random client ids and wrong
// secrets (more than @fastify/rate-limit's default LRU of 5000 holds), then requests with the
// victim's id and secret are fired until one is refused (the victim client over its rate, or
// anyone holding its credentials). A limiter that keeps its rate admits at most rate x (1 + span)
// for the victim's id, span being the time from the victim's first request to its last (all within
// one window of that width); admitted-over-rate is what it let through beyond that. Also: the rows
// each limiter holds at the end, counted in each.
//
// Then the borrowed name: can strangers naming the victim's client id exhaust its pace? The victim
// sends at a steady rate below its pace while strangers send its client id with wrong secrets (a
// Poisson stream, seeded), and checking each secret takes 30 to 70 ms of simulated time, during
// which the stranger's unit is held (the handler awaits the check; exchangepace then refunds it).
// Reported: the victim's requests refused. Beside the two limiters, the same arrivals go through a
// reference that replays every grant still kept (the victim's, and the strangers' still being
// checked) in exact order: it admits a request exactly when the kept grants and this one fit the
// bucket, which is the most any limiter can admit while it keeps the rate whatever the pending
// checks conclude. Units held by strangers under check count there too, so under a heavy flood it
// refuses the victim as well.
//
// Then made-up ids from many sources (bench/parts/flood/made-up-ids.js): wrong secrets under made-up client ids
// from many IPv4 addresses and IPv6 /64s of one /48, against each limiter as recommended, with the
// rows, heap and RSS of the replica and the real client's 200s; the row ceiling of the in-process
// store against 1,000 to 1M sources; and the keys and memory of the same sources on Redis.
//
// Then the key flood and the made-up ids through a gateway in front of oidc-provider
// (bench/parts/flood/flood-gateway.js): exchangepace's examples/gateway.js beside @fastify/rate-limit as its
// README shows a route's limit, on Node 22 or later (oidc-provider 9).
//
// Run alone: node --expose-gc bench/parts/flood/flood.js [--quick|--smoke] [--out DIR]

import { CLIENT_ID, CLIENT_SECRET, FORM, tokenBody } from '../../shared/apps.js'
import { byMode, log, parseOptions, random, table, writeResult } from '../../shared/common.js'
import { countedLocalStore } from '../../shared/login-limiters.js'
import { floodThroughGateway } from './flood-gateway.js'
import { madeUpIds } from './made-up-ids.js'
import { simulate, simulatedClock } from '../../shared/simulated.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { ticks: 20, borrowedSeconds: 60, borrowedCases: [[8, 50], [8, 100], [10, 100], [8, 200]] },
  quick: { ticks: 10, borrowedSeconds: 20, borrowedCases: [[8, 100], [10, 100]] },
  smoke: { ticks: 2, borrowedSeconds: 1, borrowedCases: [[8, 100]] }
})
const madeUpSettings = byMode(options, {
  full: { sources: 200, idsPerSource: 100, ceilingSources: [1000, 65_536, 1_000_000], redisRuns: [{ sources: 1000 }, { sources: 65_536 }, { sources: 1_000_000 }, { sources: 1_000_000, maxmemoryMB: 64, policy: 'volatile-ttl' }] },
  quick: { sources: 100, idsPerSource: 20, ceilingSources: [1000, 65_536], redisRuns: [{ sources: 1000 }, { sources: 20_000, maxmemoryMB: 4, policy: 'volatile-ttl' }] },
  smoke: { sources: 5, idsPerSource: 4, ceilingSources: [200], redisRuns: [{ sources: 100 }, { sources: 500, maxmemoryMB: 1, policy: 'volatile-ttl' }] }
})
/**
 * The key flood and made-up ids through a gateway in front of oidc-provider (bench/parts/flood/flood-gateway.js):
 * every request crosses HTTP to it, so fewer ticks and ids; 5001 strangers a tick, as above, but in
 * the smoke.
 */
const gatewaySettings = byMode(options, {
  full: { ticks: 6, strangersPerTick: 5001, sources: 200, idsPerSource: 25 },
  quick: { ticks: 3, strangersPerTick: 5001, sources: 100, idsPerSource: 10 },
  smoke: { ticks: 2, strangersPerTick: 20, sources: 5, idsPerSource: 2 }
})
const RATE = 10
const TICK_MS = 100
const STRANGERS_PER_TICK = 5001
const MAX_BURST = 3 * RATE
const LIBRARIES = { exchangepace: 'exchangepace', '@fastify/rate-limit': 'ratelimit' }

async function flood (kind) {
  const clock = simulatedClock()
  const rand = random(0xbad)
  const victim = tokenBody(CLIENT_ID, CLIENT_SECRET)
  const routeStores = []
  return simulate(kind, clock, { perSecond: RATE, rateLimitStore: countedLocalStore(routeStores) }, async (send, app) => {
    let victimAdmitted = 0
    let strangersAdmitted = 0
    const perTick = []
    for (let tick = 0; tick < settings.ticks; tick++) {
      clock.ms = tick * TICK_MS
      for (let i = 0; i < STRANGERS_PER_TICK; i++) {
        const id = `stranger-${Math.floor(rand() * 2 ** 48).toString(36)}`
        const status = await send('/token', tokenBody(id, 'not-the-secret'))
        if (status !== 429) strangersAdmitted++
      }
      let admitted = 0
      for (let i = 0; i < MAX_BURST; i++) {
        const status = await send('/token', victim)
        if (status === 429) break
        if (status !== 200) throw new Error(`flood: unexpected status ${status} for the victim`)
        admitted++
      }
      victimAdmitted += admitted
      perTick.push(admitted)
    }
    const seconds = settings.ticks * TICK_MS / 1000
    // The victim's requests come at the ticks, the first at 0 and the last one tick before the end:
    // all within a window of `span` seconds, where a limiter that keeps the rate admits rate x (1 + span).
    const spanMs = (settings.ticks - 1) * TICK_MS
    const victimAllowed = RATE * (1000 + spanMs) / 1000
    const rows = kind === 'exchangepace'
      ? app.pace.get('/token').size
      : routeStores.reduce((sum, store) => sum + store.lru.size, 0)
    return {
      seconds,
      span: spanMs / 1000,
      strangers: settings.ticks * STRANGERS_PER_TICK,
      strangersAdmittedByLimiter: strangersAdmitted,
      victimAdmitted,
      victimAllowed,
      admittedOverRate: Math.max(0, victimAdmitted - victimAllowed),
      victimPerTick: perTick,
      rows
    }
  })
}

/** Inserts `item` into `list`, kept sorted by `item[field]`, after any equal ones. */
function insertSorted (list, item, field) {
  const after = list.findIndex(other => other[field] > item[field])
  list.splice(after === -1 ? list.length : after, 0, item)
}

/** How long checking a wrong secret takes, in simulated ms: from CHECK_MS[0] to CHECK_MS[1]. */
const CHECK_MS = [30, 70]

/**
 * The arrivals of one borrowed-name case over `seconds`: the victim every 1000 / clientPerSecond ms
 * (from 5 ms), strangers as a Poisson stream of `strangersPerSecond`, each with the time its check
 * takes. Sorted by time; the victim first at a tie.
 */
function borrowedArrivals (clientPerSecond, strangersPerSecond, seconds) {
  const rand = random(0x5eed + clientPerSecond * 1000 + strangersPerSecond)
  const events = []
  for (let at = 5; at < seconds * 1000; at += 1000 / clientPerSecond) events.push({ at, stranger: false })
  for (let at = -Math.log(1 - rand()) * 1000 / strangersPerSecond; at < seconds * 1000; at += -Math.log(1 - rand()) * 1000 / strangersPerSecond) {
    events.push({ at, stranger: true, checkMs: CHECK_MS[0] + (CHECK_MS[1] - CHECK_MS[0]) * rand() })
  }
  return events.sort((a, b) => a.at - b.at || a.stranger - b.stranger)
}

/** The borrowed-name arrivals through the plugin of `kind`: the victim's requests refused, and the strangers that reached the check. */
async function borrowedThroughPlugin (kind, events) {
  const clock = simulatedClock()
  const checks = new Map()
  // The handler awaits this before checking the secret: a stranger's check ends when the driver says.
  const verifying = body => {
    const check = checks.get(body.client_secret)
    if (check === undefined) return
    checks.delete(body.client_secret)
    check.arrived()
    return check.done
  }
  return simulate(kind, clock, { perSecond: RATE, verifying }, async (send, app) => {
    const inject = body => app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload: body })
    const pending = [] // strangers under check, by the time their check ends
    let victim = 0
    let victimRefused = 0
    let checked = 0
    const finishChecksUntil = async at => {
      while (pending.length > 0 && pending[0].at <= at) {
        const check = pending.shift()
        clock.ms = check.at
        check.finish()
        if ((await check.response).statusCode !== 401) throw new Error('flood: a stranger was not answered 401')
        await new Promise(resolve => setImmediate(resolve)) // onResponse (the refund) has run
      }
    }
    for (const [n, event] of events.entries()) {
      await finishChecksUntil(event.at)
      clock.ms = event.at
      if (!event.stranger) {
        const status = (await inject(tokenBody(CLIENT_ID, CLIENT_SECRET))).statusCode
        if (status !== 200 && status !== 429) throw new Error(`flood: unexpected status ${status} for the victim`)
        victim++
        if (status === 429) victimRefused++
        continue
      }
      const secret = `wrong-${n}`
      const check = {}
      const reached = new Promise(resolve => { check.arrived = resolve })
      check.done = new Promise(resolve => { check.finish = resolve })
      checks.set(secret, check)
      check.response = inject(tokenBody(CLIENT_ID, secret))
      const answer = await Promise.race([reached.then(() => null), check.response])
      checks.delete(secret)
      if (answer !== null) continue // refused before the check: nothing held
      checked++
      check.at = event.at + event.checkMs
      insertSorted(pending, check, 'at')
    }
    await finishChecksUntil(Infinity)
    return { victim, victimRefused, strangers: events.length - victim, strangersChecked: checked }
  })
}

/**
 * The same arrivals through the reference: a request is granted when the grants still kept (each
 * unit debited at its grant and refilled continuously, GCRA in ms) leave one unit; a stranger's
 * grant stops being kept when its check ends.
 */
function borrowedThroughReference (events) {
  const unitMs = 1000 / RATE
  const grantsMade = []
  /** Whether one more unit fits at `at` beside the grants still kept, replayed in order. */
  const fits = (at) => {
    let full = -Infinity
    for (const grant of grantsMade) if (grant.kept) full = Math.max(full, grant.at) + unitMs
    return full - at <= 1000 - unitMs + 1e-9
  }
  const pending = []
  let victim = 0
  let victimRefused = 0
  let checked = 0
  for (const event of events) {
    while (pending.length > 0 && pending[0].ends <= event.at) pending.shift().kept = false
    const granted = fits(event.at)
    if (!event.stranger) {
      victim++
      if (granted) grantsMade.push({ at: event.at, kept: true })
      else victimRefused++
      continue
    }
    if (!granted) continue
    checked++
    const grant = { at: event.at, kept: true, ends: event.at + event.checkMs }
    grantsMade.push(grant)
    insertSorted(pending, grant, 'ends')
  }
  return { victim, victimRefused, strangers: events.length - victim, strangersChecked: checked }
}

const results = {}
for (const [library, kind] of Object.entries(LIBRARIES)) {
  log(`flood: ${library}, ${settings.ticks} ticks of ${STRANGERS_PER_TICK} strangers + the victim's burst`)
  results[library] = await flood(kind)
}

log(`\nflood: victim at ${RATE}/s, ${STRANGERS_PER_TICK} strangers every ${TICK_MS} ms, ${results.exchangepace.seconds} s simulated`)
log(table(['', 'victim admitted', 'allowed (rate x (1 + s))', 'admitted over rate', 'rows at the end'], Object.entries(results).map(([name, r]) => [
  name, r.victimAdmitted, r.victimAllowed, r.admittedOverRate, r.rows
])))

const borrowed = []
for (const [clientPerSecond, strangersPerSecond] of settings.borrowedCases) {
  log(`flood: borrowed name, victim at ${clientPerSecond}/s, ${strangersPerSecond} strangers/s naming it, ${settings.borrowedSeconds} s simulated`)
  const events = borrowedArrivals(clientPerSecond, strangersPerSecond, settings.borrowedSeconds)
  const row = { clientPerSecond, strangersPerSecond, results: {} }
  for (const [library, kind] of Object.entries(LIBRARIES)) row.results[library] = await borrowedThroughPlugin(kind, events)
  row.results.reference = borrowedThroughReference(events)
  borrowed.push(row)
}
log(`\nflood: borrowed name, ${RATE}/s per client id, checks of ${CHECK_MS[0]}-${CHECK_MS[1]} ms: the victim's requests refused`)
log(table(['victim', 'strangers naming it', 'exchangepace', 'reference (the most that keeps the rate)', '@fastify/rate-limit'], borrowed.map(row => [
  `${row.clientPerSecond}/s`, `${row.strangersPerSecond}/s`,
  ...['exchangepace', 'reference', '@fastify/rate-limit'].map(name => `${row.results[name].victimRefused} of ${row.results[name].victim}`)
])))

const madeUp = await madeUpIds(madeUpSettings)
const throughGateway = await floodThroughGateway(gatewaySettings)

const file = writeResult(options, 'flood', {
  description: "a flood of random declared ids against one client's pace, simulated time, both limiters at the same rate",
  rate: RATE,
  tickMs: TICK_MS,
  strangersPerTick: STRANGERS_PER_TICK,
  target: {
    what: "exchangepace: the victim's pace untouched (nothing admitted over rate), only spenders hold rows",
    met: results.exchangepace.admittedOverRate === 0 && results.exchangepace.rows <= 1
  },
  results,
  borrowedName: {
    description: "strangers naming the victim's client id with wrong secrets, each check taking simulated time, while the victim sends below its rate",
    seconds: settings.borrowedSeconds,
    checkMs: CHECK_MS,
    cases: borrowed
  },
  madeUp,
  throughGateway
})
log(`\nflood: wrote ${file}`)
