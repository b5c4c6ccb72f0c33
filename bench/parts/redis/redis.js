// Part 6, Redis: the token route with its pace shared through Redis, exchangepace's RedisStore
// against @fastify/rate-limit's Redis store, on the same local Redis. Both do one script call per
// request (exchangepace's reserve script; @fastify/rate-limit's fixed-window INCR + PEXPIRE), each
// through its own ioredis client with auto-pipelining on (bench/shared/apps.js).
//
// Measured by bench/shared/http-rounds.js like the HTTP part: server CPU per request (the Node process
// only; Redis runs unpinned) and requests/s, as ratios to @fastify/rate-limit's in interleaved
// rounds, sequential and paired. A wrong secret on exchangepace adds its refund script call.
// Then Redis's own CPU per request: for each store in turn (alternating, several rounds), a fixed
// number of requests between two readings of Redis's INFO cpu (used_cpu_user + used_cpu_sys).
//
// Last, the rate while Redis flaps (bench/parts/redis/flapping.js): a redis-server of the part's own, stopped
// and continued on a schedule, under one replica's flood of one client id.
//
// Run alone: node bench/parts/redis/redis.js [--quick|--smoke] [--out DIR]. Needs a Redis at REDIS_URL
// (default redis://127.0.0.1:6379); without one the part records that it was skipped, and why.

import autocannon from 'autocannon'
import Redis from 'ioredis'
import { FORM, REDIS_URL, probeRedis, tokenBody } from '../../shared/apps.js'
import { measureHttp, startServer } from '../../shared/http-rounds.js'
import { measureFlapping } from './flapping.js'
import { byMode, fmt, log, parseOptions, summary, table, writeResult } from '../../shared/common.js'

const options = parseOptions()
const settings = byMode(options, {
  full: {
    redisCpu: { rounds: 6, requests: 40_000 },
    roundSeconds: 1,
    repetitions: 4,
    sequential: { main: { rounds: 6, repetitions: 4 } },
    paired: { main: { rounds: 4, repetitions: 4 } },
    flapping: { seconds: 8, schedules: [{ stopMs: 100, everyMs: 1000 }, { stopMs: 300, everyMs: 700 }, { stopMs: 50, everyMs: 2000 }] }
  },
  quick: {
    redisCpu: { rounds: 2, requests: 20_000 },
    roundSeconds: 1,
    repetitions: 1,
    sequential: { main: { rounds: 4, repetitions: 1 } },
    paired: { main: { rounds: 2, repetitions: 1 } },
    flapping: { seconds: 4, schedules: [{ stopMs: 100, everyMs: 1000 }] }
  },
  smoke: {
    redisCpu: { rounds: 1, requests: 500 },
    roundSeconds: 0.2,
    repetitions: 1,
    sequential: { main: { rounds: 1, repetitions: 1 } },
    paired: { main: { rounds: 1, repetitions: 1 } },
    flapping: { seconds: 1, schedules: [{ stopMs: 100, everyMs: 400 }] }
  }
})

const GROUPS = {
  main: [
    { name: '@fastify/rate-limit, Redis store', kind: 'ratelimit-redis', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace, RedisStore', kind: 'exchangepace-redis', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace, RedisStore, wrong secret (401, refunded)', kind: 'exchangepace-redis', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401 }
  ]
}

/** Redis's own CPU time so far, in microseconds (INFO cpu: user + system). */
async function redisCpuMicros (client) {
  const info = await client.info('cpu')
  const read = field => Number(new RegExp(`${field}:([\\d.]+)`).exec(info)[1])
  return (read('used_cpu_user') + read('used_cpu_sys')) * 1e6
}

/**
 * Redis's CPU per request for each store: rounds of a fixed number of accepted token requests,
 * the stores alternating, Redis's CPU read before and after each. Nothing else uses this Redis
 * while it runs (other than what the machine's other tenants may do to it, which is nothing here).
 */
async function measureRedisCpu (kinds) {
  const { rounds, requests } = settings.redisCpu
  const client = new Redis(REDIS_URL)
  const servers = {}
  try {
    for (const kind of kinds) servers[kind] = await startServer(kind, false, 'redis')
    const samples = Object.fromEntries(kinds.map(kind => [kind, []]))
    const load = (kind, amount) => autocannon({ url: `http://127.0.0.1:${servers[kind].port}/token`, method: 'POST', headers: { 'content-type': FORM }, body: tokenBody(), connections: 10, amount })
    for (const kind of kinds) await load(kind, Math.min(requests, 10_000))
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? kinds : [...kinds].reverse()
      for (const kind of order) {
        const before = await redisCpuMicros(client)
        const result = await load(kind, requests)
        const after = await redisCpuMicros(client)
        samples[kind].push((after - before) / (result['2xx'] + result.non2xx))
      }
      log(`  redis CPU round ${round + 1}/${rounds}  ` + kinds.map(kind => `${kind} ${fmt(samples[kind][round], 2)}µs`).join(' | '))
    }
    return Object.fromEntries(kinds.map(kind => [kind, summary(samples[kind])]))
  } finally {
    await Promise.all(Object.values(servers).map(server => server.close()))
    client.disconnect()
  }
}

const redis = await probeRedis()
if (redis.unreachable !== undefined) {
  log(`redis: skipped: no Redis at ${REDIS_URL} (${redis.unreachable})`)
  writeResult(options, 'redis', { skipped: `no Redis at ${REDIS_URL}: ${redis.unreachable}` })
} else {
  const { pinned, roundSeconds, sequential, paired } = await measureHttp({ label: 'redis', groups: GROUPS, settings, smoke: options.mode === 'smoke' })
  const redisCpu = await measureRedisCpu(['ratelimit-redis', 'exchangepace-redis'])
  log(`\nRedis CPU per request (INFO cpu), ${settings.redisCpu.rounds} rounds of ${settings.redisCpu.requests.toLocaleString('en-US')} requests`)
  log(table(['store', 'Redis CPU µs/req (median)', 'range'], Object.entries(redisCpu).map(([kind, s]) => [kind, fmt(s.median, 2), `${fmt(s.min, 2)}-${fmt(s.max, 2)}`])))
  const flapping = await measureFlapping(settings.flapping.schedules, settings.flapping.seconds)
  if (flapping.skipped) log(`\nflapping: skipped: ${flapping.skipped}`)
  else {
    log(`\nRedis flapping (SIGSTOP), one replica, one client id at ${flapping.rate}/s with ${flapping.inFlight} requests in flight`)
    log(table(['schedule', 'stalls', 'admitted', 'bound', 'most in 1 s', 'bound'], flapping.schedules.map(s =>
      [`stopped ${s.stopMs} ms of every ${s.everyMs} ms, ${s.seconds} s`, String(s.stalls), String(s.admitted), String(s.admittedBound), String(s.mostInOneSecond), String(s.oneSecondBound)])))
  }
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
    paired,
    redisCpuPerRequestMicros: { ...redisCpu, requestsPerRound: settings.redisCpu.requests },
    flapping
  })
  log(`\nredis: wrote ${file}`)
}
