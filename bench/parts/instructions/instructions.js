// Part 7, instructions per request: the HTTP part's servers under valgrind's callgrind
// (bench/shared/callgrind.js says how a server is counted). Unlike CPU time, the count depends little on
// what else the machine is doing, so it shows what a plugin adds to a request where the wall-clock
// rounds only show it through the noise. It is not fixed either: what the JIT compiles and when
// moves it by up to a few percent between runs of the same build, less the more requests are
// counted (10,000 in the full run). It leaves out the kernel (the socket reads and writes), so its
// ratios are larger than those of CPU time, of which the kernel is a good share.
//
// What it asks: what exchangepace adds to an accepted request against the floor of its contract
// (a no-op preHandler and an onSend writing the two quota headers: the `floor` server), and against
// @fastify/rate-limit; with and without an `onEvent` hook; and on the refund path (a wrong secret,
// 401) and the refusal path (429). The Redis stores (when a Redis answers) are counted too: only the
// Node process's instructions. Then Redis's side: a redis-server of its own under callgrind, each
// script called `scriptCalls` times on one key, 16 calls in flight, through ioredis exactly as each
// store calls it (the script registered by the store's own constructor): an empty script (the floor
// of any script call), @fastify/rate-limit's fixed window, exchangepace's reserve, and reserve +
// refund. It includes Redis's event loop and its socket handling in user space.
//
// Run alone: node bench/parts/instructions/instructions.js [--quick|--smoke] [--out DIR]. Needs valgrind; without it
// the part records that it was skipped.

import { execFileSync, spawn } from 'node:child_process'
import { readdirSync, rmSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRequire } from 'node:module'
import Redis from 'ioredis'
import { RedisStore } from 'exchangepace'
import { NEVER, REDIS_URL, probeRedis, tokenBody } from '../../shared/apps.js'
import { countServer, dumpedInstructions, listening, valgrindVersion } from '../../shared/callgrind.js'
import { byMode, fmt, log, parseOptions, sparePort, table, writeResult } from '../../shared/common.js'
import { redisServerVersion } from '../../shared/redis-servers.js'

const require = createRequire(import.meta.url)
const RateLimitRedisStore = require('@fastify/rate-limit/store/RedisStore')

/** The target: exchangepace's accepted request at most this multiple of the floor's. */
const FLOOR_TARGET = 1.03

const MAIN_KINDS = ['bare', 'onresponse', 'empty', 'floor', 'floor-429', 'headers', 'exchangepace', 'exchangepace-hook', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis']

/**
 * The servers the target compares, counted `servers` times each in fresh processes (the order
 * alternating), their median kept: on 2026-12-05 one count each put the floor with its 429 schema
 * 3,231 instructions below the floor itself, and exchangepace with a hook 3,763 below it without,
 * as much as the target's whole margin (about 3,200).
 */
const TARGET_KINDS = ['floor', 'floor-429', 'exchangepace', 'exchangepace-hook', 'ratelimit']

const options = parseOptions()
// The shortest form counts one server, bare: valgrind takes about 10 s to start each server, and
// part 3's smoke already has every kind answer.
const settings = byMode(options, {
  full: { warmup: 5000, requests: 10_000, scriptCalls: 20_000, kinds: MAIN_KINDS, servers: 3, paths: true },
  quick: { warmup: 1000, requests: 1000, scriptCalls: 5000, kinds: MAIN_KINDS, servers: 1, paths: true },
  smoke: { warmup: 50, requests: 50, scriptCalls: 100, kinds: ['bare'], servers: 1, paths: false }
})

const NAMES = {
  bare: 'bare',
  onresponse: 'a no-op onResponse alone',
  empty: 'empty hooks',
  floor: 'floor (a no-op preHandler + the two headers in onSend)',
  'floor-429': 'floor + the 429 in the route\'s response schema',
  headers: 'the two headers written by the handler, no hook',
  exchangepace: 'exchangepace',
  'exchangepace-hook': 'exchangepace, onEvent hook set',
  ratelimit: '@fastify/rate-limit',
  'exchangepace-redis': 'exchangepace, RedisStore',
  'ratelimit-redis': '@fastify/rate-limit, Redis store'
}

/** Accepted exchanges: POST /token with the right secret. */
const main = kind => ({ kind, name: NAMES[kind], url: '/token', body: tokenBody(), status: 200 })

/**
 * The refund path (a wrong secret: 401, exchangepace refunds the unit) against bare's 401, and the
 * refusal path (POST /token-tight at 1/s: all but about one request a second refused) against
 * bare's 200 on the same route, as in part 3.
 */
const WRONG = tokenBody(undefined, 'wrong-secret')
const PATHS = [
  { kind: 'bare', name: 'bare, wrong secret (401)', url: '/token', body: WRONG, status: 401, baselineOf: 'refund' },
  { kind: 'exchangepace', name: 'exchangepace, wrong secret (401, refunded)', url: '/token', body: WRONG, status: 401, path: 'refund' },
  { kind: 'exchangepace-hook', name: 'exchangepace, onEvent hook set, wrong secret (401, refunded)', url: '/token', body: WRONG, status: 401, path: 'refund' },
  { kind: 'bare', name: 'bare, /token-tight (200)', url: '/token-tight', body: tokenBody(), status: 200, baselineOf: '429' },
  { kind: 'exchangepace', name: 'exchangepace, /token-tight (429)', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
  { kind: 'exchangepace-hook', name: 'exchangepace, onEvent hook set, /token-tight (429)', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
  { kind: 'ratelimit', name: '@fastify/rate-limit, /token-tight (429)', url: '/token-tight', body: tokenBody(), status: 429, path: '429' }
]

const PACE_KEY = 'exchangepace:token:reporting'

/** One operation per script line, each made as the store makes it (the script its constructor registers). */
const SCRIPT_CALLS = [
  { name: 'empty script (return {1, 2}): the floor of any script call', call: client => client.benchEmptyScript('bench:empty') },
  { name: '@fastify/rate-limit\'s Redis store: INCR, PTTL', call: client => client.rateLimit('fastify-rate-limit-reporting', 1000, NEVER, false, false) },
  { name: 'exchangepace\'s reserve: TIME, GET, SET PX', call: client => client.exchangepaceReserveBuffer(PACE_KEY, NEVER) },
  {
    name: 'exchangepace\'s reserve, then refund (a wrong secret): two script calls',
    call: async client => {
      const reply = await client.exchangepaceReserveBuffer(PACE_KEY, NEVER)
      await client.exchangepaceRefund(PACE_KEY, NEVER, reply.readDoubleLE(8), reply.readDoubleLE(16), reply.readDoubleLE(24))
    }
  }
]

/** `operations` calls of `call`, 16 in flight. */
async function callScripts (client, call, operations) {
  const inFlight = 16
  await Promise.all(Array.from({ length: inFlight }, async (_, lane) => {
    for (let i = lane; i < operations; i += inFlight) await call(client)
  }))
}

/** Redis's instructions per operation of each script line, in a redis-server of its own under callgrind. */
async function countRedisScripts (dir) {
  const port = await sparePort()
  const out = join(dir, 'callgrind.redis.out')
  const child = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`,
    'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  let client
  try {
    await listening(port)
    client = new Redis({ host: '127.0.0.1', port })
    // Registered as the stores register them, on this client.
    new RedisStore({ client }) // eslint-disable-line no-new
    new RateLimitRedisStore(false, false, client) // eslint-disable-line no-new
    client.defineCommand('benchEmptyScript', { numberOfKeys: 1, lua: 'return {1, 2}' })
    const results = []
    for (const { name, call } of SCRIPT_CALLS) {
      log(`  instructions: Redis, ${name} (${settings.scriptCalls} counted)`)
      await callScripts(client, call, Math.min(2000, settings.scriptCalls))
      const before = new Set(readdirSync(dir))
      execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'ignore' })
      await callScripts(client, call, settings.scriptCalls)
      execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' })
      results.push({ name, operations: settings.scriptCalls, instructionsPerOperation: dumpedInstructions(dir, 'callgrind.redis.out.', before) / settings.scriptCalls })
    }
    return results
  } finally {
    client?.disconnect()
    child.kill('SIGKILL')
  }
}

/**
 * Counts each configuration in turn, one server at a time; then, with `repeat`, those of
 * TARGET_KINDS again, in fresh servers, `settings.servers` times in all, the order alternating. A configuration's figures
 * are those of its median server, and `servers` lists every server's count.
 */
async function countAll (configs, dir, { repeat }) {
  const counts = configs.map(() => [])
  const again = configs.filter(config => TARGET_KINDS.includes(config.kind))
  for (let round = 0; round < (repeat ? settings.servers : 1); round++) {
    const order = round === 0 ? configs : round % 2 === 1 ? [...again].reverse() : again
    for (const config of order) {
      log(`  instructions: ${config.name} under callgrind (${settings.warmup} x 2 requests to warm up, ${settings.requests} counted)`)
      counts[configs.indexOf(config)].push(await countServer(config, { dir, warmup: settings.warmup, requests: settings.requests }))
    }
  }
  return configs.map((config, i) => {
    const { body, status, ...described } = config
    const sorted = [...counts[i]].sort((a, b) => a.instructionsPerRequest - b.instructionsPerRequest)
    const servers = counts[i].map(c => ({ instructionsPerRequest: c.instructionsPerRequest, attempts: c.attempts, majorGcs: c.majorGcs }))
    return { ...described, expectedStatus: status, ...sorted[Math.floor((sorted.length - 1) / 2)], servers }
  })
}

/** Ratios to bare (accepted requests) or to each path's baseline, in place. */
function addRatios (results, paths) {
  const bare = results.find(r => r.kind === 'bare').instructionsPerRequest
  for (const r of results) {
    r.ratioToBare = r.instructionsPerRequest / bare
    r.addedPerRequest = r.instructionsPerRequest - bare
  }
  for (const r of paths) {
    const baseline = paths.find(b => b.baselineOf !== undefined && b.baselineOf === (r.path ?? r.baselineOf))
    r.baseline = baseline.name
    r.ratioToBaseline = r.instructionsPerRequest / baseline.instructionsPerRequest
    r.addedToBaseline = r.instructionsPerRequest - baseline.instructionsPerRequest
  }
}

/** exchangepace against the floor of its contract and against @fastify/rate-limit, on accepted requests. */
function floorTarget (results) {
  const of = kind => results.find(r => r.kind === kind)?.instructionsPerRequest
  const [floor, pace, rateLimit] = [of('floor'), of('exchangepace'), of('ratelimit')]
  if (floor === undefined || pace === undefined || rateLimit === undefined) return null
  const hook = of('exchangepace-hook')
  return {
    limit: FLOOR_TARGET,
    what: `exchangepace's instructions per accepted request <= ${FLOOR_TARGET}x the floor's, and below @fastify/rate-limit's`,
    floor,
    exchangepace: pace,
    ratelimit: rateLimit,
    ratioToFloor: pace / floor,
    beyondFloor: pace - floor,
    ratioToRateLimit: pace / rateLimit,
    hookRatioToFloor: hook === undefined ? null : hook / floor,
    met: pace / floor <= FLOOR_TARGET && pace < rateLimit
  }
}

const statusText = statuses => Object.entries(statuses).map(([code, n]) => `${code}:${n}`).join(' ')

function print (results, paths, redisScripts, valgrind, redisServer) {
  log(`\ninstructions per request (callgrind, ${valgrind}), ${settings.requests} requests counted per server; the median server's`)
  log(table(['configuration', 'instructions/req', 'added to bare', 'ratio to bare', 'each server', 'major GCs in the window', 'statuses'],
    results.map(r => [r.name, fmt(r.instructionsPerRequest, 0), fmt(r.addedPerRequest, 0), `${fmt(r.ratioToBare, 3)}x`, r.servers.map(c => fmt(c.instructionsPerRequest, 0)).join(' '), String(r.majorGcs), statusText(r.statuses)])))
  if (paths.length > 0) {
    log('\nthe refund and refusal paths')
    log(table(['configuration', 'instructions/req', 'baseline', 'ratio to baseline', 'major GCs in the window', 'statuses'],
      paths.map(r => [r.name, fmt(r.instructionsPerRequest, 0), r.baseline, `${fmt(r.ratioToBaseline, 3)}x`, String(r.majorGcs), statusText(r.statuses)])))
  }
  if (redisScripts !== null) {
    log(`\nRedis's instructions per operation (callgrind, ${redisServer}), ${settings.scriptCalls} operations counted per line`)
    log(table(['script calls', 'instructions/op', 'ratio to @fastify/rate-limit'],
      redisScripts.map(r => [r.name, fmt(r.instructionsPerOperation, 0), `${fmt(r.ratioToRateLimit, 3)}x`])))
  }
}

async function measure (valgrind) {
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-callgrind-'))
  const redisServer = redisServerVersion()
  const redis = await probeRedis()
  const kinds = settings.kinds.filter(kind => !kind.endsWith('-redis') || redis.unreachable === undefined)
  if (kinds.length < settings.kinds.length) log(`instructions: no Redis at ${REDIS_URL} (${redis.unreachable}): the Redis stores are left out`)
  let results, paths
  let redisScripts = null
  try {
    results = await countAll(kinds.map(main), dir, { repeat: true })
    paths = settings.paths ? await countAll(PATHS, dir, { repeat: false }) : []
    if (redisServer === null) log('instructions: redis-server is not installed: Redis\'s side of the scripts is left out')
    else redisScripts = await countRedisScripts(dir)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  addRatios(results, paths)
  if (redisScripts !== null) {
    const rateLimit = redisScripts[1].instructionsPerOperation
    for (const r of redisScripts) r.ratioToRateLimit = r.instructionsPerOperation / rateLimit
  }
  print(results, paths, redisScripts, valgrind, redisServer)
  return { results, paths, redisServer, redisScripts }
}

const valgrind = valgrindVersion()
if (valgrind === null) {
  log('instructions: skipped: valgrind is not installed')
  writeResult(options, 'instructions', { skipped: 'valgrind is not installed' })
} else {
  const { results, paths, redisServer, redisScripts } = await measure(valgrind)
  const file = writeResult(options, 'instructions', {
    description: 'user-space instructions per request of each server, counted by callgrind; and Redis\'s per script call',
    valgrind,
    warmup: settings.warmup,
    target: floorTarget(results),
    results,
    paths,
    redisServer,
    redisScripts
  })
  log(`\ninstructions: wrote ${file}`)
}
