// The capacity part's share of the report (bench/report.js): its summary rows and its section of
// benchmarks.md.

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

const count = value => Math.round(value).toLocaleString('en-US')

const find = (capacity, name) => capacity.results.find(r => r.name === name)

/** The median of the per-round ratios of line `a`'s `metric` to line `b`'s, with their range. */
export function roundRatio (a, b, metric) {
  const ratios = a.rounds.map((round, i) => round[metric] / b.rounds[i][metric]).sort((x, y) => x - y)
  const middle = (ratios.length - 1) / 2
  return { median: (ratios[Math.floor(middle)] + ratios[Math.ceil(middle)]) / 2, min: ratios[0], max: ratios.at(-1) }
}
const ratioText = r => `${f(r.median, 2)}x (${f(r.min, 2)}-${f(r.max, 2)})`

/** The lines the summary and the README quote: the route with @fastify/rate-limit, one pace, three paces. */
export function capacityLines (capacity) {
  return {
    rateLimit: find(capacity, '@fastify/rate-limit, one limit (200)'),
    one: find(capacity, 'exchangepace, one pace (200)'),
    three: find(capacity, 'exchangepace, the recommended three paces (200)'),
    calls: capacity.results.find(r => r.three === 'calls'),
    oneCall: capacity.results.find(r => r.three === 'one call'),
    unpipelined: find(capacity, 'exchangepace, three paces, no auto-pipelining (200)')
  }
}

export function capacitySummaryRows (capacity) {
  const { rateLimit, one, three } = capacityLines(capacity)
  return [
    ['Redis: Redis\'s CPU per token request (INFO cpu, a Redis of the part\'s own), as a ratio to @fastify/rate-limit\'s with one limit', 'for reference',
      `@fastify/rate-limit ${f(rateLimit.redisCpuMicros, 1)} µs; exchangepace, one pace ${f(one.redisCpuMicros, 1)} µs, ${ratioText(roundRatio(one, rateLimit, 'redisCpuMicros'))}; the recommended three paces ${f(three.redisCpuMicros, 1)} µs, ${ratioText(roundRatio(three, rateLimit, 'redisCpuMicros'))}`, ''],
    ['Redis: token requests per second one Redis core carries (1e6 / CPU per request)', 'for reference',
      `@fastify/rate-limit ${count(rateLimit.capacity.perCoreWithIo)}; exchangepace, one pace ${count(one.capacity.perCoreWithIo)}, three paces ${count(three.capacity.perCoreWithIo)}`, '']
  ]
}

export function capacitySection (capacity) {
  const out = ['## 11. Capacity', '']
  if (capacity.skipped) {
    out.push(`Skipped in the latest run: ${capacity.skipped}.`, '')
    return out.join('\n')
  }
  const { rateLimit, three, calls, oneCall, unpipelined } = capacityLines(capacity)
  out.push(`What one request costs Redis (${capacity.redisServer.replace(/ sha=.*/, '')}, a server of the part's own on loopback, nothing else using it), so what one Redis core carries. Each line ran in each of ${capacity.rounds} rounds, the order alternating, its statistics reset before it (CONFIG RESETSTAT): **in scripts**, the microseconds INFO commandstats gives EVALSHA (and EVAL), which include the commands a script calls; **Redis CPU**, used_cpu_user + used_cpu_sys from INFO cpu, which also counts reading and writing the sockets and Redis's event loop: the figure capacity follows. Bytes are INFO stats' total_net_input_bytes and total_net_output_bytes; **Redis reads** its total_reads_processed (a socket read may carry many commands: this is round trips as batched), **client writes** the writes on the store's ioredis socket. Node CPU is this process's, which drives the load. Script lines: ${count(capacity.scriptOps)} operations each, 16 in flight through one ioredis client with auto-pipelining, over 1,000 keys; route lines: ${count(capacity.requests)} token requests each through the plugin (\`inject\`, 32 in flight, 1,000 client ids and addresses), each app with its own client. Rates nothing reaches, so every reservation is granted: the common case. Medians of the rounds; the ratios are medians of per-round ratios to @fastify/rate-limit's line of the same kind. The machine was shared with other work (the soak among it).`, '')
  out.push(mdTable(['line', 'Redis µs in scripts', 'script calls', 'Redis CPU µs', 'CPU / @fastify/rate-limit', 'bytes in / out', 'Redis reads', 'client writes', 'Node CPU µs', 'requests/s per Redis core'],
    capacity.results.map(r => [r.name, f(r.scriptMicros, 2), f(r.scriptCalls, 2), f(r.redisCpuMicros, 2), `${f(r.ratioToRateLimit.redisCpuMicros, 2)}x`, `${count(r.bytesIn)} / ${count(r.bytesOut)}`,
      f(r.redisReads, 3), r.clientWrites === null ? '-' : f(r.clientWrites, 3), f(r.nodeCpuMicros, 1), count(r.capacity.perCoreWithIo)])), '')
  out.push(`Requests per second per Redis core is 1e6 / Redis CPU per request: one core wholly given to this traffic, io-threads off, its commands batched as here. The times in scripts are wall-clock time inside Redis (commandstats times each call), so on a loaded machine they include the moments Redis waited for a core, and can exceed its CPU time. The recommended three paces cost ${ratioText(roundRatio(three, rateLimit, 'redisCpuMicros'))} @fastify/rate-limit's one limit in Redis CPU: four script calls (three reserves, and the failure budget's refund on an accepted exchange) against one. The prototype reserving the three keys in one call (bench/parts/capacity/capacity-scripts.js; on a Cluster they would share one slot), against a call each, both followed by the budget's refund: Redis CPU ${ratioText(roundRatio(oneCall, calls, 'redisCpuMicros'))}, time in scripts ${ratioText(roundRatio(oneCall, calls, 'scriptMicros'))}, Node CPU ${ratioText(roundRatio(oneCall, calls, 'nodeCpuMicros'))} (medians of per-round ratios, range). Without auto-pipelining the three paces cost Redis ${ratioText(roundRatio(unpipelined, three, 'redisCpuMicros'))} what they cost with it (${f(unpipelined.redisReads, 2)} socket reads per request against ${f(three.redisReads, 3)}, and 4 writes from the client against ${f(three.clientWrites, 3)}). docs/stores.md, "Capacity", draws the conclusions.`, '')
  return out.join('\n')
}
