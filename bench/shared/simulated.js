// Simulated time for the fidelity, flood and guessing parts: the limiters run in this process
// behind real Fastify routes (through inject), and time only moves when the script moves it, so the
// worst moments are hit exactly and every run gives the same figures.
//
// exchangepace takes the clock as its `now` option. @fastify/rate-limit's LocalStore and
// rate-limiter-flexible's in-memory storage read Date.now, which is replaced while a simulation
// runs and restored afterwards.

import { FORM, buildTokenApp } from './apps.js'

/** A settable clock in milliseconds. */
export function simulatedClock (start = 0) {
  const clock = { ms: start, now: () => clock.ms }
  return clock
}

/**
 * Runs `run()` with Date.now following `clock` (the real time when it starts, plus the simulated
 * ms), and restores Date.now afterwards: the clock @fastify/rate-limit's LocalStore and
 * rate-limiter-flexible's in-memory storage read.
 */
export async function withSimulatedDateNow (clock, run) {
  const realDateNow = Date.now
  const epoch = realDateNow()
  Date.now = () => epoch + clock.ms
  try {
    return await run()
  } finally {
    Date.now = realDateNow
  }
}

/**
 * Builds the token app of `kind` driven by `clock`, runs `script(send)` and restores Date.now.
 * `send(url, body)` resolves with the status code.
 */
export async function simulate (kind, clock, appOptions, script) {
  return withSimulatedDateNow(clock, async () => {
    const app = await buildTokenApp(kind, { ...appOptions, now: clock.now })
    try {
      const send = async (url, body) => {
        const response = await app.inject({ method: 'POST', url, headers: { 'content-type': FORM }, payload: body })
        return response.statusCode
      }
      return await script(send, app)
    } finally {
      await app.close()
    }
  })
}

/** Most events in any half-open window [t, t + widthMs) of sorted event times. */
export function maxInWindow (times, widthMs) {
  let best = 0
  let first = 0
  for (let last = 0; last < times.length; last++) {
    while (times[last] - times[first] >= widthMs) first++
    best = Math.max(best, last - first + 1)
  }
  return best
}

/** Event counts per bin of `binMs` from 0 to `untilMs`. */
export function histogram (times, binMs, untilMs) {
  const bins = new Array(Math.ceil(untilMs / binMs)).fill(0)
  for (const t of times) {
    const bin = Math.floor(t / binMs)
    if (bin >= 0 && bin < bins.length) bins[bin]++
  }
  return bins
}
