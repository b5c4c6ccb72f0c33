// Part 14 (latency): its section of docs/benchmarks.md and its line in the summary (bench/report.js).

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

const ms = value => `${f(value, 3)} ms`
const ratio = s => s === null ? '' : `${f(s.median, 2)}x (${f(s.min, 2)}-${f(s.max, 2)})`
const three = roundTrip => roundTrip.configs.find(c => c.kind === 'exchangepace-redis-three')

/** The summary's line: what the README's three paces add, against @fastify/rate-limit's one limit, at each round trip. */
export function latencySummaryRow (latency) {
  const text = latency.roundTrips.map(r => `${r.roundTripMs} ms round trip: ${ratio(three(r).toRateLimit)}`).join('; ')
  return ['Latency on Redis across a network: the README\'s three paces, added above bare Fastify, against @fastify/rate-limit\'s one limit', `<= ${latency.goal}x at the median`, text, latency.target.met ? 'met' : '**missed**']
}

export function latencySection (latency) {
  const out = ['## 14. Latency on a shared store', '']
  if (latency.skipped) {
    out.push(`Skipped in the latest run: ${latency.skipped}.`, '')
    return out.join('\n')
  }
  const { rounds, requests } = latency.settings
  out.push(`What a request waits for when its paces live in Redis across a network. The token route over loopback HTTP, one request at a time on one kept-alive connection, with Redis (${latency.redisServer.split(' ').slice(0, 3).join(' ')}, a server of the part's own) behind a proxy that delays every chunk by half of a round trip each way (bench/shared/fault-proxy.js, in a process of its own). Five servers, each its own process with its own ioredis client (auto-pipelining on) through the proxy: bare Fastify (Redis unused), @fastify/rate-limit with one Redis limit (keyed by the body's client id, in preHandler), exchangepace with one pace, the README's recommended token route (a source ceiling asked in onRequest, a failure budget and an exchange pace asked in preHandler, all three awaited together there; the budget's refund as the answer goes is not waited for), and a floor for that route: @fastify/rate-limit's Redis store asked for the same three keys at once in one preHandler, its script and calls alone (no headers, no refund), which is what any limiter keeping three keys in Redis waits for. Rates nobody reaches: every request is granted. Each of ${rounds} rounds times ${requests} requests of each server in turn, the order alternating; a round's median and p99 less bare's are what the limiter adds, and the ratio is that of the same round's @fastify/rate-limit. Medians over rounds, with the range of the ratio. bench/parts/latency/latency.js.`, '')
  for (const roundTrip of latency.roundTrips) {
    out.push(`**Round trip to Redis ${roundTrip.roundTripMs} ms**`, '')
    out.push(mdTable(['server', 'median', 'p99', 'median added', 'p99 added', 'median added / @fastify/rate-limit\'s', 'p99 added / @fastify/rate-limit\'s'],
      roundTrip.configs.map(c => [c.name, ms(c.medianMs.median), ms(c.p99Ms.median), ms(c.addedMedianMs.median), ms(c.addedP99Ms.median), ratio(c.toRateLimit), ratio(c.toRateLimitP99)])), '')
  }
  out.push(`Against the floor, in the same rounds, the three paces add ${latency.roundTrips.map(r => `${ratio(r.toFloor)} at ${r.roundTripMs} ms`).join(', ')} what @fastify/rate-limit's store asked for the same three keys adds: the rest of the ratio to the one limit is the price of three keys in any limiter.`, '')
  out.push(`Goal: the three paces add at most ${latency.goal}x what @fastify/rate-limit's one limit adds, at the median, at each round trip: ${latency.target.met ? 'met' : '**missed**'} (${latency.roundTrips.map(r => `${r.roundTripMs} ms: ${f(three(r).toRateLimit.median, 2)}x`).join(', ')}).`, '')
  return out.join('\n')
}
