// Part 3, HTTP cost: server CPU per request and requests/s, as ratios to a bare server.
//
// Five servers (bench/apps.js: bare, empty hooks, floor, exchangepace, @fastify/rate-limit), each in
// its own process, measured by bench/http-rounds.js in sequential and paired rounds.
//
// Two groups of configurations:
// - main: POST /token with the right secret (200) on bare, empty, floor, exchangepace, ratelimit;
// - paths: the refund path (wrong secret: 401, exchangepace refunds the unit) against bare's 401,
//   and the 429 path (POST /token-tight at 1/s: all but about one request a second refused) of
//   exchangepace and ratelimit against bare's 200 on the same route.
//
// Run alone: node bench/http.js [--quick|--smoke] [--out DIR]

import { tokenBody } from './apps.js'
import { measureHttp } from './http-rounds.js'
import { byMode, log, parseOptions, writeResult } from './common.js'

const options = parseOptions()
const settings = byMode(options, {
  // Server processes differ from one another by several percent however long they run (heap
  // layout, JIT decisions), so the full run spends its time on more repetitions of fewer rounds.
  full: {
    roundSeconds: 1,
    repetitions: 6,
    sequential: { main: { rounds: 8, repetitions: 6 }, paths: { rounds: 4, repetitions: 4 } },
    paired: { main: { rounds: 5, repetitions: 6 }, paths: { rounds: 4, repetitions: 4 } }
  },
  quick: {
    roundSeconds: 1,
    repetitions: 1,
    sequential: { main: { rounds: 6, repetitions: 1 }, paths: { rounds: 2, repetitions: 1 } },
    paired: { main: { rounds: 4, repetitions: 1 }, paths: { rounds: 2, repetitions: 1 } }
  },
  smoke: {
    roundSeconds: 0.2,
    repetitions: 1,
    sequential: { main: { rounds: 1, repetitions: 1 }, paths: { rounds: 1, repetitions: 1 } },
    paired: { main: { rounds: 1, repetitions: 1 }, paths: { rounds: 1, repetitions: 1 } }
  }
})

const GROUPS = {
  main: [
    { name: 'bare', kind: 'bare', url: '/token', body: tokenBody(), status: 200 },
    { name: 'empty hooks', kind: 'empty', url: '/token', body: tokenBody(), status: 200 },
    { name: 'floor (a no-op preHandler + the two headers in onSend)', kind: 'floor', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace', kind: 'exchangepace', url: '/token', body: tokenBody(), status: 200 },
    { name: '@fastify/rate-limit', kind: 'ratelimit', url: '/token', body: tokenBody(), status: 200 }
  ],
  paths: [
    { name: 'bare, wrong secret (401)', kind: 'bare', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, baselineOf: 'refund' },
    { name: 'exchangepace, wrong secret (401, refunded)', kind: 'exchangepace', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, path: 'refund' },
    { name: 'bare, /token-tight (200)', kind: 'bare', url: '/token-tight', body: tokenBody(), status: 200, baselineOf: '429' },
    { name: 'exchangepace, /token-tight (429)', kind: 'exchangepace', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
    { name: '@fastify/rate-limit, /token-tight (429)', kind: 'ratelimit', url: '/token-tight', body: tokenBody(), status: 429, path: '429' }
  ]
}

const { pinned, roundSeconds, sequential, paired } = await measureHttp({ label: 'http', groups: GROUPS, settings, smoke: options.mode === 'smoke' })

const paceSequential = sequential.main.configs.find(c => c.kind === 'exchangepace')
const pacePaired = paired.main.pairs.find(p => p.kind === 'exchangepace')
const file = writeResult(options, 'http', {
  description: 'server CPU µs per request and requests/s, ratios to bare, sequential and paired rounds',
  pinned,
  roundSeconds,
  target: {
    what: "exchangepace's CPU per request <= 1.05x bare",
    sequential: paceSequential.cpuRatio,
    paired: pacePaired.cpuRatio,
    met: paceSequential.cpuRatio.median <= 1.05 && pacePaired.cpuRatio.median <= 1.05
  },
  sequential,
  paired
})
log(`\nhttp: wrote ${file}`)
