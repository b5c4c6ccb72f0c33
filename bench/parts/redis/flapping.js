// Part 6's last question: does the rate hold per replica while Redis flaps? A redis-server of the
// bench's own (a spare loopback port, nothing kept on disk) is stopped (SIGSTOP) for `stopMs` of
// every `everyMs` and continued (SIGCONT), while one replica (a Fastify instance on exchangepace's
// RedisStore, timeoutMs 20, retryMs 200) serves a client that keeps 8 token requests in flight for
// one client id at 10/s. Each stall past timeoutMs sends requests to the per-replica fallback, and
// each answer afterwards back to Redis. What is counted: the requests admitted (200) in total, and
// the most admitted in any window of one second, by the time each answer came, against what a
// bucket of the rate allows, 10 x (1 + seconds) and 20.
//
// Used by bench/parts/redis/redis.js; needs redis-server installed (otherwise the measurement records why it
// was skipped).

import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import Redis from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'
import { FORM, tokenBody } from '../../shared/apps.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const RATE = 10
const IN_FLIGHT = 8

/** The most of `times` (ascending, ms) in any window of `windowMs`. */
function mostInWindow (times, windowMs) {
  let most = 0
  for (let last = 0, first = 0; last < times.length; last++) {
    while (times[last] - times[first] >= windowMs) first++
    most = Math.max(most, last - first + 1)
  }
  return most
}

async function measureSchedule ({ stopMs, everyMs }, seconds) {
  // Under a watchdog: a stopped server does not outlive the bench, whatever ends it.
  const server = await startAlone()
  const { port } = server
  const client = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true, maxRetriesPerRequest: 1 })
  const app = Fastify()
  try {
    await app.register(formbody)
    await app.register(exchangePace, { store: new RedisStore({ client, timeoutMs: 20, retryMs: 200 }) })
    app.post('/token', { config: { pace: { perSecond: RATE, key: 'client', spend: 'accepted' } } }, async () => ({ access_token: 'token', token_type: 'Bearer' }))
    await app.ready()
    const admitted = []
    const statuses = {}
    let stalls = 0
    const stop = new AbortController()
    const started = performance.now()
    const request = async () => {
      while (!stop.signal.aborted) {
        const response = await app.inject({ method: 'POST', url: '/token', headers: { 'content-type': FORM }, payload: tokenBody() })
        statuses[response.statusCode] = (statuses[response.statusCode] ?? 0) + 1
        if (response.statusCode === 200) admitted.push(performance.now() - started)
        await sleep(2)
      }
    }
    const flap = async () => {
      while (!stop.signal.aborted) {
        await sleep(everyMs - stopMs)
        if (stop.signal.aborted) break
        server.pause()
        stalls++
        await sleep(stopMs)
        server.resume()
      }
    }
    // Settled as they end, so that a loop that fails early is not an unhandled rejection.
    const loops = Promise.allSettled([flap(), ...Array.from({ length: IN_FLIGHT }, request)])
    await sleep(seconds * 1000)
    stop.abort()
    const failed = (await loops).find(outcome => outcome.status === 'rejected')
    if (failed !== undefined) throw failed.reason
    return {
      stopMs,
      everyMs,
      seconds,
      stalls,
      statuses,
      admitted: admitted.length,
      admittedBound: RATE * (1 + seconds),
      mostInOneSecond: mostInWindow(admitted, 1000),
      oneSecondBound: 2 * RATE
    }
  } finally {
    await app.close()
    client.disconnect()
    await server.kill()
  }
}

/** Each schedule in turn, `seconds` long; `{ skipped }`, saying why, when redis-server is not installed. */
export async function measureFlapping (schedules, seconds) {
  if (redisServerVersion() === null) return { skipped: 'redis-server is not installed' }
  const results = []
  for (const schedule of schedules) results.push(await measureSchedule(schedule, seconds))
  return { rate: RATE, inFlight: IN_FLIGHT, timeoutMs: 20, retryMs: 200, schedules: results }
}
