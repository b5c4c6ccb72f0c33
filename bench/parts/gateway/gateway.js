// Part 17, gateway: what examples/gateway.js adds in latency over the proxy alone. An upstream
// token endpoint that answers at once, @fastify/reply-from in front of it with the body kept as
// bytes (the proxy alone), and the same with exchangepace's token paces (the README's three) in
// front (the gateway): bench/parts/gateway/gateway-servers.js, in a process of its own. Each round times
// `requests` POST /token of each server in turn (the order alternating between rounds), one at a
// time over a kept-alive connection, each from its write to the end of its answer, from rotating
// client ids and forwarded addresses so that every request is granted; the gateway's median and
// p99 less the proxy's, per round, are what the pace adds. The figures are medians over rounds.
//
// Run alone: node bench/parts/gateway/gateway.js [--quick|--smoke] [--out DIR].

import { fork } from 'node:child_process'
import { once } from 'node:events'
import { Agent, request as httpRequest } from 'node:http'
import { join } from 'node:path'
import { BENCH_DIR, byMode, fmt, log, parseOptions, summary, table, writeResult } from '../../shared/common.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { rounds: 7, requests: 2000, warmup: 1000 },
  quick: { rounds: 3, requests: 500, warmup: 300 },
  smoke: { rounds: 1, requests: 20, warmup: 10 }
})

const CONFIGS = [
  { name: 'the upstream, direct', kind: 'upstream' },
  { name: 'the proxy alone (@fastify/reply-from)', kind: 'proxy' },
  { name: 'the gateway (the proxy and examples/gateway.js\'s four token paces)', kind: 'gateway' }
]

const agent = new Agent({ keepAlive: true, maxSockets: 1 })
let sequence = 0

/** One POST /token: its time in ms, write to the answer's end, and status. */
function timed (port) {
  const n = sequence++
  const body = `grant_type=client_credentials&client_id=client-${n % 1000}&client_secret=secret`
  const headers = { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body), 'x-forwarded-for': `10.${(n >> 8) & 255}.${n & 255}.1` }
  return new Promise((resolve, reject) => {
    const started = performance.now()
    const req = httpRequest({ host: '127.0.0.1', port, path: '/token', method: 'POST', agent, headers }, res => {
      res.resume()
      res.on('end', () => resolve({ ms: performance.now() - started, status: res.statusCode }))
    })
    req.on('error', reject)
    req.end(body)
  })
}

/** `count` requests, one at a time: their times, sorted. Any answer but 200 fails the part. */
async function series (kind, port, count) {
  const times = new Float64Array(count)
  for (let i = 0; i < count; i++) {
    const { ms, status } = await timed(port)
    if (status !== 200) throw new Error(`gateway: ${kind} answered ${status}`)
    times[i] = ms
  }
  return times.sort()
}

const at = (sorted, q) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]

const servers = fork(join(BENCH_DIR, 'parts', 'gateway', 'gateway-servers.js'), [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
try {
  const [ports] = await once(servers, 'message')
  for (const { kind } of CONFIGS) await series(kind, ports[kind], settings.warmup)
  const rounds = []
  for (let round = 0; round < settings.rounds; round++) {
    const figures = {}
    for (const { kind } of round % 2 === 0 ? CONFIGS : [...CONFIGS].reverse()) {
      const times = await series(kind, ports[kind], settings.requests)
      figures[kind] = { median: at(times, 0.5), p99: at(times, 0.99) }
    }
    rounds.push(figures)
    log(`  round ${round + 1}/${settings.rounds}: ` + CONFIGS.map(c => `${c.kind} ${fmt(figures[c.kind].median, 3)}/${fmt(figures[c.kind].p99, 3)} ms`).join(' | '))
  }
  const configs = CONFIGS.map(({ name, kind }) => ({
    name,
    kind,
    medianMs: summary(rounds.map(r => r[kind].median)),
    p99Ms: summary(rounds.map(r => r[kind].p99))
  }))
  const added = {
    medianMs: summary(rounds.map(r => r.gateway.median - r.proxy.median)),
    p99Ms: summary(rounds.map(r => r.gateway.p99 - r.proxy.p99))
  }
  log(`\nlatency per request, ${settings.rounds} rounds of ${settings.requests} requests, one at a time`)
  log(table(['server', 'median ms', 'p99 ms'], configs.map(c => [c.name, fmt(c.medianMs.median, 3), fmt(c.p99Ms.median, 3)])))
  const file = writeResult(options, 'gateway', {
    description: 'latency per request of examples/gateway.js over the proxy alone (@fastify/reply-from), in front of an upstream that answers at once',
    settings,
    configs,
    added
  })
  log(`\ngateway: the pace adds ${fmt(added.medianMs.median, 3)} ms at the median, ${fmt(added.p99Ms.median, 3)} ms at p99, over the proxy alone; wrote ${file}`)
} finally {
  agent.destroy()
  servers.kill()
}
