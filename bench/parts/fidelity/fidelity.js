// Part 4, fidelity: how many requests one client gets admitted in any window of w seconds, when it
// fires at the worst moments, under exchangepace and under @fastify/rate-limit, both at 10/s.
//
// In simulated time (bench/shared/simulated.js), through the real plugins and routes. Two schedules:
//
// - "window edge": a single request opens @fastify/rate-limit's window (t = 50 ms), then a burst
//   1 ms before that window ends (t = 1049 ms) and another as it rolls over (t = 1050 ms);
//   repeated every 2 s. Each burst fires until refused.
// - "greedy": the client fires until refused every 10 ms, for the whole run.
//
// exchangepace's guarantee: at most rate x (1 + w) in any window of w seconds (a full bucket of one
// second, then the refill). A fixed window admits up to twice its limit within milliseconds at each
// rollover. Windows are half-open, [t, t + w).
//
// Run alone: node bench/parts/fidelity/fidelity.js [--quick|--smoke] [--out DIR]

import { KINDS, tokenBody } from '../../shared/apps.js'
import { byMode, log, parseOptions, table, writeResult } from '../../shared/common.js'
import { histogram, maxInWindow, simulate, simulatedClock } from '../../shared/simulated.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { seconds: 4 },
  quick: { seconds: 4 },
  smoke: { seconds: 2 }
})
const RATE = 10
const BURST = 3 * RATE
const WIDTHS = [0.01, 0.1, 0.5, 1, 2]
const LIBRARIES = { exchangepace: 'exchangepace', '@fastify/rate-limit': 'ratelimit' }
const BODY = tokenBody()

/** Fires until refused (at most BURST), at the current simulated time; records admitted times. */
async function burst (send, clock, admitted) {
  for (let i = 0; i < BURST; i++) {
    const status = await send('/token', BODY)
    if (status === 429) return
    if (status !== 200) throw new Error(`fidelity: unexpected status ${status}`)
    admitted.push(clock.ms)
  }
}

const schedules = {
  'window edge': async (send, clock, admitted, untilMs) => {
    // The window opens 50 ms into each 2 s, so both bursts fall in one 100 ms bin of the chart.
    for (let open = 50; open < untilMs; open += 2000) {
      clock.ms = open
      if ((await send('/token', BODY)) === 200) admitted.push(clock.ms)
      clock.ms = open + 999
      await burst(send, clock, admitted)
      clock.ms = open + 1000
      await burst(send, clock, admitted)
    }
  },
  greedy: async (send, clock, admitted, untilMs) => {
    for (let t = 0; t < untilMs; t += 10) {
      clock.ms = t
      await burst(send, clock, admitted)
    }
  }
}

const untilMs = settings.seconds * 1000
const results = {}
for (const [schedule, run] of Object.entries(schedules)) {
  results[schedule] = {}
  for (const [library, kind] of Object.entries(LIBRARIES)) {
    if (!KINDS.includes(kind)) throw new Error(`fidelity: unknown kind ${kind}`)
    const clock = simulatedClock()
    const admitted = []
    await simulate(kind, clock, { perSecond: RATE }, send => run(send, clock, admitted, untilMs))
    results[schedule][library] = {
      admitted: admitted.length,
      maxInWindow: Object.fromEntries(WIDTHS.map(w => [w, maxInWindow(admitted, w * 1000)])),
      per100ms: histogram(admitted, 100, untilMs),
      times: admitted
    }
  }
}

for (const [schedule, byLibrary] of Object.entries(results)) {
  log(`\nfidelity, ${schedule} (${RATE}/s, ${settings.seconds} s simulated): most admitted in any window of w seconds`)
  log(table(['w (s)', 'bound rate x (1 + w)', ...Object.keys(byLibrary)], WIDTHS.map(w => [
    w, RATE * (1 + w), ...Object.values(byLibrary).map(r => r.maxInWindow[w])
  ])))
  log(`admitted in total: ${Object.entries(byLibrary).map(([name, r]) => `${name} ${r.admitted}`).join(', ')}`)
}

const withinBound = Object.values(results).every(byLibrary =>
  WIDTHS.every(w => byLibrary.exchangepace.maxInWindow[w] <= RATE * (1 + w)))
const file = writeResult(options, 'fidelity', {
  description: 'most requests admitted for one client in any window of w seconds, simulated time, both limiters at the same rate',
  rate: RATE,
  seconds: settings.seconds,
  widths: WIDTHS,
  target: {
    what: 'exchangepace admits at most rate x (1 + w) in any window of w seconds',
    met: withinBound,
    maxInOneSecond: Object.fromEntries(Object.entries(results).map(([schedule, byLibrary]) => [schedule, Object.fromEntries(Object.entries(byLibrary).map(([name, r]) => [name, r.maxInWindow[1]]))]))
  },
  schedules: results
})
log(`\nfidelity: wrote ${file}`)
