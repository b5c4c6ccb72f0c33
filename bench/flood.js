// Part 5, key flood: can strangers with random declared ids reset a client's pace?
//
// In simulated time (bench/simulated.js), through the real plugins and routes, both at 10/s per
// client id. Every 100 ms, an attacker sends 5001 requests with fresh random client ids and wrong
// secrets (more than @fastify/rate-limit's default LRU of 5000 holds), then requests with the
// victim's id and secret are fired until one is refused (the victim client over its rate, or
// anyone holding its credentials). A limiter that keeps its rate admits at most
// rate x (1 + seconds) for the victim's id over the run; admitted-over-rate is what it let through
// beyond that. Also: the rows each limiter holds at the end.
//
// Run alone: node bench/flood.js [--quick|--smoke] [--out DIR]

import { CLIENT_ID, CLIENT_SECRET, tokenBody } from './apps.js'
import { byMode, log, parseOptions, random, table, writeResult } from './common.js'
import { simulate, simulatedClock } from './simulated.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { ticks: 20 },
  quick: { ticks: 10 },
  smoke: { ticks: 2 }
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
  return simulate(kind, clock, { perSecond: RATE }, async (send, app) => {
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
    const rows = kind === 'exchangepace'
      ? app.pace.get('/token').size
      : null
    return {
      seconds,
      strangers: settings.ticks * STRANGERS_PER_TICK,
      strangersAdmittedByLimiter: strangersAdmitted,
      victimAdmitted,
      victimAllowed: RATE * (1 + seconds),
      admittedOverRate: Math.max(0, victimAdmitted - RATE * (1 + seconds)),
      victimPerTick: perTick,
      rows
    }
  })
}

const results = {}
for (const [library, kind] of Object.entries(LIBRARIES)) {
  log(`flood: ${library}, ${settings.ticks} ticks of ${STRANGERS_PER_TICK} strangers + the victim's burst`)
  results[library] = await flood(kind)
}
// @fastify/rate-limit keeps its store private: after more than 5000 distinct ids its LRU (default
// size 5000) is full, and every entry is a stranger's but possibly the victim's.
results['@fastify/rate-limit'].rows = 5000

log(`\nflood: victim at ${RATE}/s, ${STRANGERS_PER_TICK} strangers every ${TICK_MS} ms, ${results.exchangepace.seconds} s simulated`)
log(table(['', 'victim admitted', `allowed (rate x (1 + s))`, 'admitted over rate', 'rows at the end'], Object.entries(results).map(([name, r]) => [
  name, r.victimAdmitted, r.victimAllowed, r.admittedOverRate, r.rows
])))

const file = writeResult(options, 'flood', {
  description: "a flood of random declared ids against one client's pace, simulated time, both limiters at the same rate",
  rate: RATE,
  tickMs: TICK_MS,
  strangersPerTick: STRANGERS_PER_TICK,
  target: {
    what: "exchangepace: the victim's pace untouched (nothing admitted over rate), only spenders hold rows",
    met: results.exchangepace.admittedOverRate === 0 && results.exchangepace.rows <= 1
  },
  results
})
log(`\nflood: wrote ${file}`)
