// Part 5's made-up ids from many sources (issue 38): what a flood of wrong secrets under made-up
// client ids leaves in a replica's memory and in Redis.
//
// 1. Through each limiter as its documentation recommends for a login-like endpoint (the
//    configurations of bench/shared/login-limiters.js), in simulated time through inject: `sources`
//    sources (IPv4 addresses, then IPv6 /64s of one /48) send `idsPerSource` made-up ids each, in
//    turn, one request a millisecond, while the real client calls every 200 ms from its own
//    address. Reported: the records the limiter holds, the heap's growth over the flood (after a
//    full GC when node runs with --expose-gc), the process's RSS, the attacker's statuses and the
//    real client's 200s.
// 2. The row ceiling: the README's per-source failure budget (100 a day) in this process's memory,
//    one failure from each of N sources, with the plugin's default ceiling (100,000 rows) and
//    without one: rows and heap growth, and whether a pair spent beforehand (a locked-out guesser)
//    is still refused.
// 3. On Redis: the same failure from N sources through the plugin on a redis-server of the bench's
//    own (nothing else writes to it): keys and `INFO memory`'s used_memory growth.

import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import Redis from 'ioredis'
import exchangePace, { Pace, RedisStore } from 'exchangepace'
import { CLIENTS } from '../../../examples/client-auth.js'
import { TOKEN_PACES } from '../../../examples/server.js'
import { CLIENT_ID, CLIENT_SECRET, FORM, tokenBody } from '../../shared/apps.js'
import { log, table } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'
import { exchangepaceWith, fastifyRateLimitWith, rateLimiterFlexibleRecipe, TOKEN } from '../../shared/login-limiters.js'
import { simulatedClock, withSimulatedDateNow } from '../../shared/simulated.js'

const CLIENT_ADDRESS = '192.0.2.10'
/** A guesser at the real client's secret, its pair's budget spent before each flood on Redis. */
const GUESSER_ADDRESS = '198.51.100.66'
const CLIENT_MS = 200

/** The n-th source of each family: IPv4 addresses of 10/8, and /64s of the /48 2001:db8:1::/48. */
export const FAMILIES = {
  IPv4: n => `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`,
  'IPv6 /48': n => `2001:db8:1:${n.toString(16)}::1`
}

/** The registered clients of examples/server.js, and the real client among them. */
const isClient = id => CLIENTS.has(id)

const configurations = () => [
  exchangepaceWith('exchangepace, recommended', TOKEN_PACES, { isClient }),
  exchangepaceWith('exchangepace, recommended without isClient', TOKEN_PACES),
  fastifyRateLimitWith('@fastify/rate-limit, README login example'),
  rateLimiterFlexibleRecipe()
]

const gc = globalThis.gc ?? (() => {})
/** The heap in MB, after a full GC when node runs with --expose-gc. */
export const heapMB = () => {
  gc()
  return process.memoryUsage().heapUsed / 2 ** 20
}

/**
 * The heap in MB a second after now: a gateway just closed (and the HTTP to its upstream) holds
 * tens of MB for a moment after, which the next run's starting heap would otherwise count.
 */
export async function settledHeapMB () {
  await new Promise(resolve => setTimeout(resolve, 1000))
  return heapMB()
}

/** The token route of `configuration` on `clock`, with its rows and how to close it. */
async function localApp (configuration, clock) {
  const app = Fastify()
  await app.register(formbody)
  const routeOptions = await configuration.register(app, clock)
  app.post('/token', routeOptions, async (request, reply) => {
    if (request.body.client_id !== CLIENT_ID || request.body.client_secret !== CLIENT_SECRET) return configuration.failed(request, reply)
    await configuration.accepted?.(request)
    return reply.code(200).send(TOKEN)
  })
  await app.ready()
  return { app, rows: configuration.rows, close: () => app.close() }
}

/**
 * One flood of `configuration` from `family`'s sources. A configuration with `build(clock)` is a
 * gateway in front of oidc-provider (bench/parts/flood/flood-gateway.js): it brings its app, `rows()` (and
 * exchangepace's `rowsByPace()`, reported when given) and `close()`, and the real client is
 * `client`; otherwise the token route of `configuration`.
 */
export async function madeUpFlood (configuration, family, { sources, idsPerSource }) {
  const clock = simulatedClock()
  const source = FAMILIES[family]
  const attacker = {}
  const client = { calls: 0, ok: 0 }
  const { id, secret } = configuration.client ?? { id: CLIENT_ID, secret: CLIENT_SECRET }
  let heapBefore, heapAfter, rows, rowsByPace, rss
  await withSimulatedDateNow(clock, async () => {
    const built = configuration.build === undefined ? await localApp(configuration, clock) : await configuration.build(clock)
    const send = (remoteAddress, payload) => built.app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload, remoteAddress })
    try {
      heapBefore = configuration.build === undefined ? heapMB() : await settledHeapMB()
      const requests = sources * idsPerSource
      for (let i = 0; i < requests; i++) {
        clock.ms = i
        if (i % CLIENT_MS === 5) {
          client.calls++
          if ((await send(CLIENT_ADDRESS, tokenBody(id, secret))).statusCode === 200) client.ok++
        }
        const { statusCode } = await send(source(i % sources), tokenBody(`made-up-${i.toString(36)}`, 'guess'))
        attacker[statusCode] = (attacker[statusCode] ?? 0) + 1
      }
      rows = built.rows()
      rowsByPace = built.rowsByPace?.()
      heapAfter = heapMB()
      rss = process.memoryUsage().rss / 2 ** 20
    } finally {
      await built.close()
    }
  })
  return { sources, requests: sources * idsPerSource, rows, ...(rowsByPace === undefined ? {} : { rowsByPace }), heapGrowthMB: heapAfter - heapBefore, rssMB: rss, attackerStatuses: attacker, client }
}

/** The per-source failure budget in memory, one failure from each of `n` sources, with `maxKeys`. */
function ceiling (n, maxKeys) {
  const budget = TOKEN_PACES.find(pace => pace.key === 'source' && pace.spend === 'rejected')
  const clock = { ms: 0 }
  const before = heapMB()
  const pace = new Pace({ limit: budget.limit, window: budget.window, now: () => clock.ms, maxKeys })
  // A guesser locked out before the flood: its 100 failures of the day spent.
  for (let i = 0; i < budget.limit; i++) pace.reserve('203.0.113.7')
  let refused = 0
  for (let i = 0; i < n; i++) {
    clock.ms = i / 100 // 100,000 sources a second
    if (!pace.reserve(FAMILIES.IPv4(i)).granted) refused++
  }
  const rows = pace.size
  const heapGrowthMB = heapMB() - before
  const lockedOutStillRefused = !pace.reserve('203.0.113.7').granted
  return { sources: n, maxKeys, rows, refused, heapGrowthMB, lockedOutStillRefused }
}

const usedMemory = async client => Number(/used_memory:(\d+)/.exec(await client.info('memory'))[1])

/**
 * One failure from each of `run.sources` sources through the plugin on Redis (`client`'s server),
 * after a guesser spent its pair's budget: the keys and memory the flood left, what Redis evicted
 * under `run.maxmemoryMB` and `run.policy` (none: Redis's defaults, no limit), and whether the
 * guesser is still refused.
 */
async function onRedis (client, run) {
  await client.flushall()
  await client.config('SET', 'maxmemory', String((run.maxmemoryMB ?? 0) * 2 ** 20))
  await client.config('SET', 'maxmemory-policy', run.policy ?? 'noeviction')
  await client.config('RESETSTAT')
  const before = await usedMemory(client)
  const app = Fastify()
  await app.register(formbody)
  await app.register(exchangePace, { store: new RedisStore({ client, timeoutMs: 5000 }), isClient })
  app.post('/token', { config: { pace: TOKEN_PACES } }, async (request, reply) => {
    request.pace.outcome = 'rejected'
    return reply.code(401).send({ error: 'invalid_client' })
  })
  await app.ready()
  const send = (id, source) => app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload: tokenBody(id, 'guess'), remoteAddress: source })
  const statuses = {}
  let guesserRefused
  try {
    for (let i = 0; i < 6; i++) await send(CLIENT_ID, GUESSER_ADDRESS)
    for (let first = 0; first < run.sources; first += 500) {
      const answers = await Promise.all(Array.from({ length: Math.min(500, run.sources - first) }, (_, i) =>
        send(`made-up-${first + i}`, FAMILIES['IPv6 /48'](first + i))))
      for (const { statusCode } of answers) statuses[statusCode] = (statuses[statusCode] ?? 0) + 1
    }
    guesserRefused = (await send(CLIENT_ID, GUESSER_ADDRESS)).statusCode === 429
  } finally {
    await app.close()
  }
  const evicted = Number(/evicted_keys:(\d+)/.exec(await client.info('stats'))[1])
  return { ...run, keys: await client.dbsize(), usedMemoryGrowthMB: (await usedMemory(client) - before) / 2 ** 20, evicted, guesserRefused, statuses }
}

/** Runs the three measurements with `settings` and returns their figures. */
export async function madeUpIds (settings) {
  const recommended = []
  for (const family of Object.keys(FAMILIES)) {
    for (const configuration of configurations()) {
      log(`flood: made-up ids, ${configuration.name}, ${settings.sources} ${family} sources x ${settings.idsPerSource}`)
      recommended.push({ name: configuration.name, family, ...await madeUpFlood(configuration, family, settings) })
    }
  }
  log(`\nflood: made-up ids with wrong secrets, ${settings.sources} sources x ${settings.idsPerSource}, one a ms; the real client every ${CLIENT_MS} ms`)
  log(table(['configuration', 'sources', 'records', 'heap growth (MB)', 'RSS (MB)', "real client's 200s"], recommended.map(r => [
    r.name, r.family, r.rows, r.heapGrowthMB.toFixed(2), r.rssMB.toFixed(0), `${r.client.ok} of ${r.client.calls}`
  ])))

  const ceilings = []
  for (const n of settings.ceilingSources) {
    for (const maxKeys of [100_000, Infinity]) ceilings.push(ceiling(n, maxKeys))
  }
  log('\nflood: the per-source failure budget in memory, one failure from each source')
  log(table(['sources', 'maxKeys', 'rows', 'new sources refused', 'heap growth (MB)', 'locked-out guesser still refused'], ceilings.map(c => [
    c.sources, c.maxKeys, c.rows, c.refused, c.heapGrowthMB.toFixed(1), c.lockedOutStillRefused
  ])))

  let redis
  const version = redisServerVersion()
  if (version === null) {
    redis = { skipped: 'redis-server is not installed' }
  } else {
    const server = await startAlone()
    const { port } = server
    const client = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true })
    try {
      const runs = []
      for (const run of settings.redisRuns) {
        log(`flood: made-up ids on Redis, ${run.sources} IPv6 sources, maxmemory ${run.maxmemoryMB ?? 'none'}`)
        runs.push(await onRedis(client, run))
      }
      redis = { version, runs }
      log(table(['sources', 'maxmemory', 'keys', 'used_memory growth (MB)', 'evicted', 'guesser still refused'], runs.map(r => [
        r.sources, r.maxmemoryMB === undefined ? 'none' : `${r.maxmemoryMB} MB ${r.policy}`, r.keys, r.usedMemoryGrowthMB.toFixed(1), r.evicted, r.guesserRefused
      ])))
    } finally {
      await client.quit()
      await server.kill()
    }
  }

  return {
    description: 'made-up client ids with wrong secrets from many sources: each limiter as recommended, the row ceiling, and Redis',
    settings,
    clientEveryMs: CLIENT_MS,
    recommended,
    ceilings,
    redis
  }
}
