// Part 5's key flood through a gateway (bench/flood.js): strangers with fresh random client ids and
// wrong secrets, each from an address of its own (a flood from many hosts), then the victim's
// requests from its own address until one is refused, every tick, sent to a Fastify gateway in
// front of oidc-provider started unpaced (bench/guessing-gateway.js has the two gateways), the
// gateway's clock and Date.now simulated. The victim is `billing` with its secret.
//
// A limiter that keeps the victim's rate admits at most its limit x (1 + span) in a span of
// seconds within one window: 5 x (1 + span) for exchangepace's 5/s per client id, and 5 in one
// minute for @fastify/rate-limit's per-route limit of 5 a minute per address. Admitted over that
// is what a flood of other keys won the victim (an LRU that evicts the victim's entry forgets it).
// Also: the rows each limiter holds at the end. Fewer strangers a tick than bench/flood.js sends:
// each one the gateway lets through reaches oidc-provider over HTTP.

import { GATEWAY_CLIENT, GATEWAY_CONFIGURATIONS } from './guessing-gateway.js'
import { FORM, tokenBody } from './apps.js'
import { random } from './common.js'
import { simulatedClock, withSimulatedDateNow } from './simulated.js'

const TICK_MS = 100
const MAX_BURST = 30
const VICTIM_ADDRESS = '192.0.2.10'

/** The most the victim may be admitted by a limiter that keeps its rate, over `spanMs`. */
const ALLOWED = {
  'exchangepace, the gateway': spanMs => 5 * (1000 + spanMs) / 1000,
  '@fastify/rate-limit, the gateway': () => 5
}

/** One flood of `ticks` ticks of `strangersPerTick` through the gateway of `configuration`. */
async function floodThrough (configuration, ticks, strangersPerTick) {
  const clock = simulatedClock()
  const rand = random(0xbad)
  const victim = tokenBody(GATEWAY_CLIENT.id, GATEWAY_CLIENT.secret)
  return withSimulatedDateNow(clock, async () => {
    const { app, close } = await configuration.build(clock)
    const send = async (remoteAddress, payload) => (await app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload, remoteAddress })).statusCode
    try {
      let victimAdmitted = 0
      let strangersAdmitted = 0
      let stranger = 0
      for (let tick = 0; tick < ticks; tick++) {
        clock.ms = tick * TICK_MS
        for (let i = 0; i < strangersPerTick; i++, stranger++) {
          const id = `stranger-${Math.floor(rand() * 2 ** 48).toString(36)}`
          const status = await send(`10.${(stranger >> 16) & 255}.${(stranger >> 8) & 255}.${stranger & 255}`, tokenBody(id, 'not-the-secret'))
          if (status !== 429) strangersAdmitted++
        }
        for (let i = 0; i < MAX_BURST; i++) {
          const status = await send(VICTIM_ADDRESS, victim)
          if (status === 429) break
          if (status !== 200) throw new Error(`flood through a gateway: unexpected status ${status} for the victim`)
          victimAdmitted++
        }
      }
      const spanMs = (ticks - 1) * TICK_MS
      const victimAllowed = ALLOWED[configuration.name](spanMs)
      return {
        strangers: ticks * strangersPerTick,
        strangersAdmittedByLimiter: strangersAdmitted,
        victimAdmitted,
        victimAllowed,
        admittedOverRate: Math.max(0, victimAdmitted - victimAllowed),
        exchangepaceRows: app.pace?.get('token').size ?? null
      }
    } finally {
      await close()
    }
  })
}

/** The flood through each gateway: `{ name: figures }`. */
export async function floodThroughGateways (ticks, strangersPerTick) {
  const results = {}
  for (const configuration of GATEWAY_CONFIGURATIONS) results[configuration.name] = await floodThrough(configuration, ticks, strangersPerTick)
  return results
}
