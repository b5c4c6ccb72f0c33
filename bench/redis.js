// Part 6, Redis: the token route with its pace shared through Redis, exchangepace's RedisStore
// against @fastify/rate-limit's Redis store, on the same local Redis. Both do one script call per
// request (exchangepace's reserve script; @fastify/rate-limit's fixed-window INCR + PEXPIRE), each
// through its own ioredis client with auto-pipelining on (bench/apps.js).
//
// Measured by bench/http-rounds.js like the HTTP part: server CPU per request (the Node process
// only: Redis's own CPU is not counted, and Redis runs unpinned) and requests/s, as ratios to
// @fastify/rate-limit's in interleaved rounds, sequential and paired. A wrong secret on
// exchangepace adds its refund script call.
//
// Run alone: node bench/redis.js [--quick|--smoke] [--out DIR]. Needs a Redis at REDIS_URL
// (default redis://127.0.0.1:6379); without one the part records that it was skipped, and why.

import Redis from 'ioredis'
import { REDIS_URL, tokenBody } from './apps.js'
import { measureHttp } from './http-rounds.js'
import { byMode, log, parseOptions, writeResult } from './common.js'

const options = parseOptions()
const settings = byMode(options, {
  full: {
    roundSeconds: 1,
    repetitions: 4,
    sequential: { main: { rounds: 6, repetitions: 4 } },
    paired: { main: { rounds: 4, repetitions: 4 } }
  },
  quick: {
    roundSeconds: 1,
    repetitions: 1,
    sequential: { main: { rounds: 4, repetitions: 1 } },
    paired: { main: { rounds: 2, repetitions: 1 } }
  },
  smoke: {
    roundSeconds: 0.2,
    repetitions: 1,
    sequential: { main: { rounds: 1, repetitions: 1 } },
    paired: { main: { rounds: 1, repetitions: 1 } }
  }
})

const GROUPS = {
  main: [
    { name: '@fastify/rate-limit, Redis store', kind: 'ratelimit-redis', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace, RedisStore', kind: 'exchangepace-redis', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace, RedisStore, wrong secret (401, refunded)', kind: 'exchangepace-redis', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401 }
  ]
}

/** The Redis server's version, or why it cannot be reached. */
async function probeRedis () {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  try {
    await client.connect()
    const info = await client.info('server')
    return { version: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown' }
  } catch (err) {
    return { unreachable: err.message }
  } finally {
    client.disconnect()
  }
}

const redis = await probeRedis()
if (redis.unreachable !== undefined) {
  log(`redis: skipped: no Redis at ${REDIS_URL} (${redis.unreachable})`)
  writeResult(options, 'redis', { skipped: `no Redis at ${REDIS_URL}: ${redis.unreachable}` })
} else {
  const { pinned, roundSeconds, sequential, paired } = await measureHttp({ label: 'redis', groups: GROUPS, settings, smoke: options.mode === 'smoke' })
  const pace = (figures) => figures.find(c => c.kind === 'exchangepace-redis' && c.expectedStatus === 200)
  const sequentialPace = pace(sequential.main.configs)
  const pairedPace = pace(paired.main.pairs)
  const file = writeResult(options, 'redis', {
    description: 'server CPU µs per request and requests/s on Redis, ratios to @fastify/rate-limit\'s Redis store',
    redis: { url: REDIS_URL, version: redis.version },
    pinned,
    roundSeconds,
    target: {
      what: "exchangepace's RedisStore at least as fast as @fastify/rate-limit's Redis store: CPU per request ratio <= 1 and requests/s ratio >= 1",
      cpu: { sequential: sequentialPace.cpuRatio, paired: pairedPace.cpuRatio },
      requestsPerSecond: { sequential: sequentialPace.rpsRatio },
      met: sequentialPace.cpuRatio.median <= 1 && pairedPace.cpuRatio.median <= 1 && sequentialPace.rpsRatio.median >= 1
    },
    sequential,
    paired
  })
  log(`\nredis: wrote ${file}`)
}
