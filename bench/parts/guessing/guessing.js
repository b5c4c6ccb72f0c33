// Part 8, guessing: how many guesses at one client's secret reach the secret check, and is the
// real client refused meanwhile?
//
// In simulated time (bench/shared/simulated.js), each configuration behind a real Fastify token route,
// through inject with `remoteAddress` set per request. An attacker names the client `reporting`
// with a new wrong secret every ATTACK_MS of simulated time, from one address, then (a second run)
// rotating over 100 addresses; all the while the real client calls at its exchange rate, 5/s, with
// its secret, from an address of its own. A guess is *checked* when it reaches the handler's
// comparison of the secret, that is, when no limit refused it before. Checking takes no simulated
// time here (part 5's borrowed name measures what a slow check holds).
//
// Configurations:
//   exchangepace, recommended three   examples/server.js's TOKEN_PACES but its per-source failure budget: a failure budget per
//                                     (client id, source) of 5 an hour, 5/s per client id
//                                     spent on accepted exchanges, 50/s per source on every request
//   exchangepace, three + per-source budget
//                                     examples/server.js's TOKEN_PACES: the same and the README's 100 failures per day per source
//   @fastify/rate-limit, README login the README's `{ increment: false }` example: a limiter from
//                                     fastify.createRateLimit({ max: 5, timeWindow: '1 minute' }),
//                                     peeked before the check, consumed on a failure; keyed by
//                                     request.ip, its default
//   ... keyed by client id            the same limiter with a keyGenerator reading the body's
//                                     client_id: the per-client lock-out the issue warns of
//   rate-limiter-flexible, login recipe
//                                     its wiki's "Login endpoint protection": failures per IP per
//                                     day (100, then blocked a day) and consecutive failures per
//                                     username and IP (10, then blocked an hour; deleted on a
//                                     success), read before the check, consumed on a failure
//
// Full: one simulated hour (the figures are per hour as measured, not extrapolated), with the
// first 60 s reported apart; quick: 60 s; smoke: 2 s.
//
// Run alone: node bench/parts/guessing/guessing.js [--quick|--smoke] [--out DIR]

import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import { TOKEN_PACES } from '../../../examples/server.js'
import { CLIENT_ID, CLIENT_SECRET, FORM, tokenBody } from '../../shared/apps.js'
import { byMode, log, parseOptions, table, writeResult } from '../../shared/common.js'
import { exchangepaceWith, fastifyRateLimitWith, rateLimiterFlexibleRecipe, TOKEN } from '../../shared/login-limiters.js'
import { simulatedClock, withSimulatedDateNow } from '../../shared/simulated.js'
import { GATEWAY_CLIENT, GATEWAY_CONFIGURATIONS, gatewaySkipped } from './guessing-gateway.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { seconds: 3600 },
  quick: { seconds: 60 },
  smoke: { seconds: 2 }
})
/** One guess every ATTACK_MS: 100 a second, twice the per-source ceiling of the recommended paces. */
const ATTACK_MS = 10
/** The real client: 5 a second (its exchange rate), from 5 ms on, so it never ties with a guess. */
const CLIENT_MS = 200
const CLIENT_FROM_MS = 5
const CLIENT_ADDRESS = '192.0.2.10'
const ATTACKERS = { '1 address': ['203.0.113.7'], '100 addresses': Array.from({ length: 100 }, (_, i) => `198.51.100.${i + 1}`) }
const FIRST_SPAN_MS = 60_000
/** examples/server.js's per-source failure budget, among its TOKEN_PACES. */
const PER_SOURCE_BUDGET = TOKEN_PACES.find(pace => pace.key === 'source' && pace.spend === 'rejected')

const CONFIGURATIONS = [
  exchangepaceWith('exchangepace, recommended three', TOKEN_PACES.filter(pace => pace !== PER_SOURCE_BUDGET)),
  exchangepaceWith('exchangepace, three + per-source budget', TOKEN_PACES),
  fastifyRateLimitWith('@fastify/rate-limit, README login example'),
  fastifyRateLimitWith('@fastify/rate-limit, the same keyed by client id', request => request.body.client_id),
  rateLimiterFlexibleRecipe()
]

/** The token route of `configuration`; every wrong secret that reaches the check is pushed on `checked` at its simulated time. */
async function buildApp (configuration, clock, checked) {
  const app = Fastify()
  await app.register(formbody)
  const routeOptions = await configuration.register(app, clock)
  app.post('/token', routeOptions, async (request, reply) => {
    if (request.body.client_id !== CLIENT_ID || request.body.client_secret !== CLIENT_SECRET) {
      checked.push(clock.ms)
      return configuration.failed(request, reply)
    }
    await configuration.accepted?.(request)
    return reply.code(200).send(TOKEN)
  })
  await app.ready()
  return app
}

/** Counts `status` in `statuses`, which must be one of `expected`. */
function count (statuses, status, expected, who) {
  if (!expected.includes(status)) throw new Error(`guessing: unexpected status ${status} for the ${who}`)
  statuses[status] = (statuses[status] ?? 0) + 1
}

/**
 * One run: the attacker from `addresses` and the real client, interleaved in time order, for
 * `seconds`. A configuration with `build` is a gateway in front of oidc-provider
 * (guessing-gateway.js): a guess is checked when oidc-provider answers it (401).
 */
async function run (configuration, addresses, seconds) {
  const clock = simulatedClock()
  const checked = []
  const attacker = {}
  const client = {}
  await withSimulatedDateNow(clock, async () => {
    const gateway = configuration.build === undefined ? null : await configuration.build(clock)
    const app = gateway?.app ?? await buildApp(configuration, clock, checked)
    const { id, secret } = gateway === null ? { id: CLIENT_ID, secret: CLIENT_SECRET } : GATEWAY_CLIENT
    const inject = (remoteAddress, payload) => app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload, remoteAddress })
    const send = async (remoteAddress, payload) => {
      const response = await inject(remoteAddress, payload)
      if (gateway !== null && response.statusCode === 401) checked.push(clock.ms)
      return response
    }
    const clientBody = tokenBody(id, secret)
    try {
      for (let guess = 0, call = 0; ;) {
        const guessAt = guess * ATTACK_MS
        const callAt = CLIENT_FROM_MS + call * CLIENT_MS
        clock.ms = Math.min(guessAt, callAt)
        if (clock.ms >= seconds * 1000) break
        if (callAt < guessAt) {
          count(client, (await send(CLIENT_ADDRESS, clientBody)).statusCode, [200, 429], 'real client')
          call++
        } else {
          count(attacker, (await send(addresses[guess % addresses.length], tokenBody(id, `guess-${guess}`))).statusCode, [401, 429], 'attacker')
          guess++
        }
      }
    } finally {
      await (gateway?.close() ?? app.close())
    }
  })
  const perMinute = new Array(Math.ceil(seconds / 60)).fill(0)
  for (const at of checked) perMinute[Math.floor(at / 60_000)]++
  return {
    addresses: addresses.length,
    attempts: Object.values(attacker).reduce((a, b) => a + b, 0),
    checked: checked.length,
    checkedInFirst60s: checked.filter(at => at < FIRST_SPAN_MS).length,
    checkedPerMinute: perMinute,
    attackerStatuses: attacker,
    client: { calls: Object.values(client).reduce((a, b) => a + b, 0), refused: client[429] ?? 0, statuses: client }
  }
}

const results = []
for (const configuration of CONFIGURATIONS) {
  const row = { name: configuration.name, library: configuration.library, setup: configuration.setup, scenarios: {} }
  for (const [scenario, addresses] of Object.entries(ATTACKERS)) {
    const started = performance.now()
    row.scenarios[scenario] = await run(configuration, addresses, settings.seconds)
    log(`guessing: ${configuration.name}, ${scenario}: ${row.scenarios[scenario].checked} guesses checked, real client refused ${row.scenarios[scenario].client.refused} (${((performance.now() - started) / 1000).toFixed(1)} s)`)
  }
  results.push(row)
}

/** The same through a gateway in front of oidc-provider, on Node 22 or later. */
const skipped = gatewaySkipped()
const throughGateway = { skipped, configurations: [] }
if (skipped !== null) log(`guessing: through a gateway in front of oidc-provider: skipped: ${skipped}`)
for (const configuration of skipped === null ? GATEWAY_CONFIGURATIONS : []) {
  const row = { name: configuration.name, library: configuration.library, setup: configuration.setup, scenarios: {} }
  for (const [scenario, addresses] of Object.entries(ATTACKERS)) {
    const started = performance.now()
    row.scenarios[scenario] = await run(configuration, addresses, settings.seconds)
    log(`guessing: ${configuration.name}, ${scenario}: ${row.scenarios[scenario].checked} guesses checked by oidc-provider, real client refused ${row.scenarios[scenario].client.refused} (${((performance.now() - started) / 1000).toFixed(1)} s)`)
  }
  throughGateway.configurations.push(row)
}

log(`\nguessing: one client's secret, a guess every ${ATTACK_MS} ms, the real client at ${1000 / CLIENT_MS}/s, ${settings.seconds} s simulated`)
log(table(['configuration', ...Object.keys(ATTACKERS).flatMap(s => [`checked, ${s}`, `first 60 s, ${s}`, `client refused, ${s}`])], results.map(r => [
  r.name, ...Object.values(r.scenarios).flatMap(s => [s.checked, s.checkedInFirst60s, `${s.client.refused} of ${s.client.calls}`])
])))

/** The goal: exchangepace's recommended paces check the fewest guesses of the three, and never refuse the real client. */
const [recommended] = results
const peers = results.filter(r => r.name === '@fastify/rate-limit, README login example' || r.name === 'rate-limiter-flexible, login recipe')
const fewest = Object.keys(ATTACKERS).every(s => peers.every(peer => recommended.scenarios[s].checked <= peer.scenarios[s].checked))
const neverRefused = Object.values(recommended.scenarios).every(s => s.client.refused === 0)
const file = writeResult(options, 'guessing', {
  description: "an attacker guessing one client's secret from 1 and from 100 addresses while the client calls at its rate, simulated time, guesses that reached the secret check",
  seconds: settings.seconds,
  attackMs: ATTACK_MS,
  clientPerSecond: 1000 / CLIENT_MS,
  target: {
    what: 'exchangepace with the recommended three paces checks the fewest guesses of the three (from 1 and from 100 addresses), and refuses the real client zero times',
    met: fewest && neverRefused,
    fewest,
    neverRefused
  },
  configurations: results,
  throughGateway
})
log(`\nguessing: wrote ${file}`)
