// Part 3, HTTP cost: server CPU per request and requests/s, as ratios to a bare server; the
// target is exchangepace's below @fastify/rate-limit's (part 7 counts the instructions against
// the floor of the contract, which CPU time is too noisy to judge).
//
// Six servers (bench/shared/apps.js: bare, empty hooks, floor, exchangepace with and without an onEvent
// hook, @fastify/rate-limit), each in its own process, measured by bench/shared/http-rounds.js in
// sequential and paired rounds.
//
// Two groups of configurations:
// - main: POST /token with the right secret (200) on every server;
// - paths: the refund path (wrong secret: 401, exchangepace refunds the unit) against bare's 401,
//   and the 429 path (POST /token-tight at 1/s: all but about one request a second refused) of
//   exchangepace and ratelimit against bare's 200 on the same route; exchangepace's with the hook
//   too, which both paths call.
//
// Run alone: node bench/parts/http/http.js [--quick|--smoke] [--out DIR]

import { tokenBody } from '../../shared/apps.js'
import { measureHttp } from '../../shared/http-rounds.js'
import { byMode, log, parseOptions, writeResult } from '../../shared/common.js'

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
    { name: 'exchangepace, onEvent hook set', kind: 'exchangepace-hook', url: '/token', body: tokenBody(), status: 200 },
    { name: '@fastify/rate-limit', kind: 'ratelimit', url: '/token', body: tokenBody(), status: 200 }
  ],
  paths: [
    { name: 'bare, wrong secret (401)', kind: 'bare', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, baselineOf: 'refund' },
    { name: 'exchangepace, wrong secret (401, refunded)', kind: 'exchangepace', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, path: 'refund' },
    { name: 'exchangepace, onEvent hook set, wrong secret (401, refunded)', kind: 'exchangepace-hook', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, path: 'refund' },
    { name: 'bare, /token-tight (200)', kind: 'bare', url: '/token-tight', body: tokenBody(), status: 200, baselineOf: '429' },
    { name: 'exchangepace, /token-tight (429)', kind: 'exchangepace', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
    { name: 'exchangepace, onEvent hook set, /token-tight (429)', kind: 'exchangepace-hook', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
    { name: '@fastify/rate-limit, /token-tight (429)', kind: 'ratelimit', url: '/token-tight', body: tokenBody(), status: 429, path: '429' }
  ]
}

const { pinned, roundSeconds, sequential, paired } = await measureHttp({ label: 'http', groups: GROUPS, settings, smoke: options.mode === 'smoke' })

/** exchangepace's CPU ratio to bare against @fastify/rate-limit's, in each way of running. */
const ratios = (list, kind) => list.find(c => c.kind === kind).cpuRatio
const pace = { sequential: ratios(sequential.main.configs, 'exchangepace'), paired: ratios(paired.main.pairs, 'exchangepace') }
const rateLimit = { sequential: ratios(sequential.main.configs, 'ratelimit'), paired: ratios(paired.main.pairs, 'ratelimit') }
const file = writeResult(options, 'http', {
  description: 'server CPU µs per request and requests/s, ratios to bare, sequential and paired rounds',
  pinned,
  roundSeconds,
  target: {
    what: "exchangepace's CPU per accepted request (its ratio to bare) below @fastify/rate-limit's, both ways of running",
    sequential: pace.sequential,
    paired: pace.paired,
    rateLimit,
    met: pace.sequential.median < rateLimit.sequential.median && pace.paired.median < rateLimit.paired.median
  },
  sequential,
  paired
})
log(`\nhttp: wrote ${file}`)
