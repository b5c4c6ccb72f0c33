// Part 5 through a gateway: the key flood (bench/parts/flood/flood.js) and the made-up ids from many sources
// (bench/parts/flood/made-up-ids.js) sent to a Fastify gateway in front of oidc-provider started unpaced, over
// real HTTP from the gateway to it, in simulated time: the two gateways of
// bench/parts/guessing/guessing-gateway.js, exchangepace's (examples/gateway.js, the README's four token paces,
// given the upstream's client ids as `isClient`, the outcome read from oidc-provider's answer) and
// @fastify/rate-limit's as its README shows a route's limit (5 a minute per address). The victim and
// real client is `billing`.
//
// The key flood: every TICK_MS, strangers send fresh random client ids with wrong secrets, each
// from a /64 of its own in one /48 (what one attacker holds; a limiter keyed by address sees as
// many addresses), then the victim's requests fire from its own address until one is refused. A
// limiter that keeps the victim's rate, `limit` a `window`, admits at most limit x (1 + span /
// window) over a span of the victim's requests; admitted-over-rate is what it let through beyond
// that. Also: the rows it holds at the end (exchangepace's by pace too) and the heap's growth over
// the flood (the process holds the gateway and oidc-provider both), from a second after the
// previous gateway closed.
//
// oidc-provider 9 supports Node 22 and later: on an older Node the runs are skipped, and say why.

import { FORM, tokenBody } from '../../shared/apps.js'
import { log, random, table } from '../../shared/common.js'
import { GATEWAY_CONFIGURATIONS, gatewaySkipped } from '../guessing/guessing-gateway.js'
import { FAMILIES, heapMB, madeUpFlood, settledHeapMB } from './made-up-ids.js'
import { simulatedClock, withSimulatedDateNow } from '../../shared/simulated.js'

const TICK_MS = 100
const VICTIM_ADDRESS = '192.0.2.10'
const STRANGERS = FAMILIES['IPv6 /48']

/** Counts `status` in `statuses`, which must be one of `expected`. */
function count (statuses, status, expected, who) {
  if (!expected.includes(status)) throw new Error(`flood: unexpected status ${status} for the ${who} through a gateway`)
  statuses[status] = (statuses[status] ?? 0) + 1
}

/** The key flood through `configuration`'s gateway: `ticks` of `strangersPerTick` strangers, then the victim's burst. */
async function keyFlood (configuration, { ticks, strangersPerTick }) {
  const clock = simulatedClock()
  const rand = random(0xbad)
  const { limit, window } = configuration.rate
  const victim = tokenBody(configuration.client.id, configuration.client.secret)
  return withSimulatedDateNow(clock, async () => {
    const { app, rows, rowsByPace, close } = await configuration.build(clock)
    const send = async (remoteAddress, payload) => (await app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload, remoteAddress })).statusCode
    try {
      const heapBefore = await settledHeapMB()
      const strangers = {}
      const victimStatuses = {}
      const perTick = []
      for (let tick = 0; tick < ticks; tick++) {
        clock.ms = tick * TICK_MS
        for (let i = 0; i < strangersPerTick; i++) {
          const id = `stranger-${Math.floor(rand() * 2 ** 48).toString(36)}`
          count(strangers, await send(STRANGERS(tick * strangersPerTick + i), tokenBody(id, 'not-the-secret')), [401, 429], 'stranger')
        }
        let admitted = 0
        for (let i = 0; i < 3 * limit; i++) {
          const status = await send(VICTIM_ADDRESS, victim)
          count(victimStatuses, status, [200, 429], 'victim')
          if (status === 429) break
          admitted++
        }
        perTick.push(admitted)
      }
      const span = (ticks - 1) * TICK_MS / 1000
      const victimAdmitted = perTick.reduce((a, b) => a + b, 0)
      const victimAllowed = limit * (1 + span / window)
      return {
        span,
        strangers: ticks * strangersPerTick,
        strangerStatuses: strangers,
        victimStatuses,
        victimAdmitted,
        victimAllowed,
        admittedOverRate: Math.max(0, victimAdmitted - victimAllowed),
        victimPerTick: perTick,
        rows: rows(),
        ...(rowsByPace === undefined ? {} : { rowsByPace: rowsByPace() }),
        heapGrowthMB: heapMB() - heapBefore
      }
    } finally {
      await close()
    }
  })
}

/**
 * Part 5's key flood and made-up ids through a gateway in front of oidc-provider, with `settings`
 * ({ ticks, strangersPerTick } for the key flood, { sources, idsPerSource } for the made-up ids),
 * or why they were skipped.
 */
export async function floodThroughGateway (settings) {
  const skipped = gatewaySkipped()
  if (skipped !== null) {
    log(`flood: through a gateway in front of oidc-provider: skipped: ${skipped}`)
    return { skipped }
  }
  const keyFloods = []
  for (const configuration of GATEWAY_CONFIGURATIONS) {
    log(`flood: ${configuration.name}, ${settings.ticks} ticks of ${settings.strangersPerTick} strangers + the victim's burst`)
    keyFloods.push({ name: configuration.name, library: configuration.library, setup: configuration.setup, rate: configuration.rate, ...await keyFlood(configuration, settings) })
  }
  log(`\nflood: through a gateway in front of oidc-provider, ${settings.strangersPerTick} strangers from as many /64s every ${TICK_MS} ms`)
  log(table(['gateway', 'victim admitted', 'allowed', 'admitted over rate', 'rows at the end', 'heap growth (MB)'], keyFloods.map(r => [
    r.name, r.victimAdmitted, r.victimAllowed.toFixed(2), r.admittedOverRate.toFixed(2), r.rows, r.heapGrowthMB.toFixed(2)
  ])))

  const madeUp = []
  for (const family of Object.keys(FAMILIES)) {
    for (const configuration of GATEWAY_CONFIGURATIONS) {
      log(`flood: made-up ids, ${configuration.name}, ${settings.sources} ${family} sources x ${settings.idsPerSource}`)
      madeUp.push({ name: configuration.name, family, ...await madeUpFlood(configuration, family, settings) })
    }
  }
  log(table(['gateway', 'sources', 'records', 'heap growth (MB)', 'RSS (MB)', "real client's 200s"], madeUp.map(r => [
    r.name, r.family, r.rows, r.heapGrowthMB.toFixed(2), r.rssMB.toFixed(0), `${r.client.ok} of ${r.client.calls}`
  ])))
  return {
    skipped: null,
    description: "part 5's key flood and made-up ids through a gateway in front of oidc-provider started unpaced, exchangepace's and @fastify/rate-limit's",
    settings,
    tickMs: TICK_MS,
    keyFlood: keyFloods,
    madeUp
  }
}
