// Part 14, latency: what a request waits for when its paces live in Redis across a network. The
// token route over loopback HTTP, one request at a time, with Redis behind a proxy that delays
// every chunk (bench/shared/fault-proxy.js, in a process of its own) by half of a round trip each way:
// 0.5, 1 and 2 ms, as between two hosts of one zone, or across zones. Five servers, each its own
// process with its own ioredis client (auto-pipelining on) through the proxy to a redis-server of
// the part's own: bare Fastify (no limiter, Redis unused), @fastify/rate-limit with one Redis limit
// (keyed by client id, in preHandler), exchangepace with one pace (RedisStore), exchangepace
// with the README's recommended token route: three paces, a source ceiling asked in onRequest and
// a failure budget and an exchange pace asked in preHandler, all awaited at once (the budget's
// refund, as the answer goes, is not waited for), and a floor for that route: @fastify/rate-limit's
// Redis store asked for the same three keys at once in one preHandler, its script and calls and
// nothing else (no headers, no refund), what any limiter keeping three keys in Redis waits for.
// Rates nobody reaches: every request is granted.
//
// Each round times `requests` requests of each server in turn (the order alternating between
// rounds), each from its write to the end of its answer; a round's median and p99 above bare's are
// what the limiter adds. The goal (issue 42): the three paces add at most 1.1x what
// @fastify/rate-limit's one limit adds, at the median, at each round trip: a request waits for
// Redis once, however many paces it has. The figures are medians over rounds of per-round values.
//
// Run alone: node bench/parts/latency/latency.js [--quick|--smoke] [--out DIR]. Needs redis-server; without it
// the part records that it was skipped, and why.

import { Agent, request as httpRequest } from 'node:http'
import { FORM, tokenBody } from '../../shared/apps.js'
import { forkFaultProxy } from '../../shared/fault-proxy.js'
import { startServer } from '../../shared/http-rounds.js'
import { byMode, fmt, log, parseOptions, summary, table, writeResult } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { roundTripsMs: [0.5, 1, 2], rounds: 7, requests: 1000, warmup: 1000 },
  quick: { roundTripsMs: [0.5, 1, 2], rounds: 3, requests: 300, warmup: 300 },
  smoke: { roundTripsMs: [1], rounds: 1, requests: 20, warmup: 20 }
})

const CONFIGS = [
  { name: 'bare Fastify', kind: 'bare' },
  { name: '@fastify/rate-limit, one Redis limit', kind: 'ratelimit-redis' },
  { name: 'exchangepace, one pace', kind: 'exchangepace-redis' },
  { name: 'exchangepace, the README\'s three paces', kind: 'exchangepace-redis-three' },
  { name: '@fastify/rate-limit\'s Redis store, the same three keys at once', kind: 'ratelimit-redis-three' }
]
const RATE_LIMIT = 'ratelimit-redis'
const THREE = 'exchangepace-redis-three'
const FLOOR = 'ratelimit-redis-three'
/** The goal: the three paces' added median at most this times @fastify/rate-limit's. */
const GOAL = 1.1

const BODY = tokenBody()
const agent = new Agent({ keepAlive: true, maxSockets: 1 })

/** One POST /token on the kept-alive connection: its time in ms, write to the answer's end, and status. */
function timed (port) {
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const req = httpRequest({ host: '127.0.0.1', port, path: '/token', method: 'POST', agent, headers: { 'content-type': FORM, 'content-length': Buffer.byteLength(BODY) } }, res => {
      res.resume()
      res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode }))
    })
    req.on('error', reject)
    req.end(BODY)
  })
}

/**
 * `count` requests to `server`, one at a time: their times, sorted. Any answer but 200 fails the
 * part, and so does an answer of a server that asks Redis in less than the round trip: it did not.
 */
async function series (server, count, roundTripMs) {
  const times = new Float64Array(count)
  for (let i = 0; i < count; i++) {
    const { ms, status } = await timed(server.port)
    if (status !== 200) throw new Error(`latency: ${server.kind} answered ${status}`)
    if (server.kind !== 'bare' && ms < roundTripMs) throw new Error(`latency: ${server.kind} answered in ${fmt(ms, 3)} ms, less than the ${roundTripMs} ms round trip to Redis`)
    times[i] = ms
  }
  return times.sort()
}

const at = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]

/** The rounds at one round trip: each server's median and p99 per round, and what each adds to bare's. */
async function atRoundTrip (servers, roundTripMs) {
  const rounds = []
  for (const config of CONFIGS) await series(servers[config.kind], settings.warmup, roundTripMs)
  for (let round = 0; round < settings.rounds; round++) {
    const order = round % 2 === 0 ? CONFIGS : [...CONFIGS].reverse()
    const figures = {}
    for (const config of order) {
      const times = await series(servers[config.kind], settings.requests, roundTripMs)
      figures[config.kind] = { median: at(times, 0.5), p99: at(times, 0.99) }
    }
    rounds.push(figures)
    log(`  ${roundTripMs} ms, round ${round + 1}/${settings.rounds}: ` + CONFIGS.map(c => `${c.kind} ${fmt(figures[c.kind].median, 3)}/${fmt(figures[c.kind].p99, 3)} ms`).join(' | '))
  }
  const added = (kind, q) => rounds.map(r => r[kind][q] - r.bare[q])
  const configs = CONFIGS.map(config => ({
    name: config.name,
    kind: config.kind,
    medianMs: summary(rounds.map(r => r[config.kind].median)),
    p99Ms: summary(rounds.map(r => r[config.kind].p99)),
    addedMedianMs: summary(added(config.kind, 'median')),
    addedP99Ms: summary(added(config.kind, 'p99')),
    // Per round: what this server adds to bare over what @fastify/rate-limit's one limit adds.
    toRateLimit: config.kind === 'bare' ? null : summary(rounds.map(r => (r[config.kind].median - r.bare.median) / (r[RATE_LIMIT].median - r.bare.median))),
    toRateLimitP99: config.kind === 'bare' ? null : summary(rounds.map(r => (r[config.kind].p99 - r.bare.p99) / (r[RATE_LIMIT].p99 - r.bare.p99)))
  }))
  const three = configs.find(c => c.kind === THREE)
  // Per round: what the three paces add over what the floor's three keys add.
  const toFloor = summary(rounds.map(r => (r[THREE].median - r.bare.median) / (r[FLOOR].median - r.bare.median)))
  return { roundTripMs, configs, toFloor, met: three.toRateLimit.median <= GOAL }
}

const redisServer = redisServerVersion()
if (redisServer === null) {
  log('latency: skipped: redis-server is not installed')
  writeResult(options, 'latency', { skipped: 'redis-server is not installed' })
} else {
  const redis = await startAlone()
  const redisPort = redis.port
  const proxy = await forkFaultProxy({ target: { port: redisPort } })
  const servers = {}
  try {
    // The servers' ioredis clients reach Redis through the proxy (bench/shared/apps.js reads REDIS_URL), and
    // the RedisStore waits for every answer: an outage would answer from memory, without Redis.
    process.env.REDIS_URL = `redis://127.0.0.1:${proxy.port}`
    process.env.REDIS_TIMEOUT_MS = '60000'
    for (const config of CONFIGS) servers[config.kind] = await startServer(config.kind, false, 'latency')
    const roundTrips = []
    for (const roundTripMs of settings.roundTripsMs) {
      const fault = await proxy.add({ kind: 'latency', ms: roundTripMs / 2 })
      roundTrips.push(await atRoundTrip(servers, roundTripMs))
      await proxy.remove(fault)
    }
    for (const { roundTripMs, configs } of roundTrips) {
      log(`\nround trip to Redis ${roundTripMs} ms: latency per request, ${settings.rounds} rounds of ${settings.requests} requests, one at a time`)
      log(table(['server', 'median ms', 'p99 ms', 'median added', 'p99 added', 'added / @fastify/rate-limit\'s'], configs.map(c => [
        c.name, fmt(c.medianMs.median, 3), fmt(c.p99Ms.median, 3), fmt(c.addedMedianMs.median, 3), fmt(c.addedP99Ms.median, 3),
        c.toRateLimit === null ? '' : `${fmt(c.toRateLimit.median, 2)}x (${fmt(c.toRateLimit.min, 2)}-${fmt(c.toRateLimit.max, 2)})`
      ])))
    }
    const file = writeResult(options, 'latency', {
      description: 'latency per request above bare Fastify with Redis behind a delaying proxy: @fastify/rate-limit\'s one limit, one pace, the README\'s three',
      redisServer,
      settings,
      goal: GOAL,
      roundTrips,
      target: { met: roundTrips.every(r => r.met) }
    })
    log(`\nthe three paces against the floor (the same three keys in @fastify/rate-limit's store): ${roundTrips.map(r => `${r.roundTripMs} ms ${fmt(r.toFloor.median, 2)}x (${fmt(r.toFloor.min, 2)}-${fmt(r.toFloor.max, 2)})`).join(', ')}`)
    log(`\nlatency: the three paces add at most ${GOAL}x what @fastify/rate-limit's one limit adds: ${roundTrips.map(r => `${r.roundTripMs} ms ${fmt(r.configs.find(c => c.kind === THREE).toRateLimit.median, 2)}x`).join(', ')}: ${roundTrips.every(r => r.met) ? 'met' : 'missed'}; wrote ${file}`)
  } finally {
    agent.destroy()
    await Promise.all(Object.values(servers).map(server => server.close()))
    await proxy.close()
    await redis.kill()
  }
}
