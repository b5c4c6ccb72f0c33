// Part 7, instructions per request: the HTTP part's servers under valgrind's callgrind, which
// counts the instructions the server process executes in user space. Unlike CPU time, the count
// depends little on what else the machine is doing, so it shows what a plugin adds to a request
// where the wall-clock rounds only show it through the noise. It is not fixed either: what the JIT
// compiles and when, and when the collector runs, move it by up to a few percent between runs of
// the same build, less the more requests are counted (10,000 in the full run). It leaves
// out the kernel (the socket reads and writes), so its ratios are larger than those of CPU time,
// of which the kernel is a good share.
//
// Each server (bench/http-server.js <kind>, started under `valgrind --tool=callgrind`) first
// answers `warmup` requests twice (so that its code is optimized as it would be under load), then
// callgrind's counters are zeroed (`callgrind_control -z`), `requests` more are sent (autocannon, 4
// connections, the token route with the right secret), and the counters are dumped. Callgrind
// instruments the server only once it listens (`--instr-atstart=no`, then `callgrind_control -i
// on`), and checks only code outside files for self-modification (`--smc-check=all-non-file`, what
// valgrind advises for a JIT: V8's code is in anonymous memory, node's own is in its binary). Both
// change how valgrind runs the server, not what it executes: Node's start-up (loading Fastify) took
// 41 s instrumented and 14 s without, and bare's count over 2,000 requests read 261,334 and 261,048
// per request before, 260,953 and 260,697 after (a busy machine, 2026-12-05).
//
// A major GC (mark-compact, about once in 289,000 requests under load) fell in the window of some
// servers and not others, adding about 6,000 instructions per request to exchangepace and 13,000
// to its Redis store, over 10,000 requests (2026-12-04). So the server reports the major GCs of its
// window (a PerformanceObserver), and a count whose window held one is made again in a fresh
// server, up to ATTEMPTS times: the counts leave major GCs out and keep the scavenges. A retry's
// window starts right after a major GC: the server is sent requests a thousand at a time, after its
// warm-up, until it reports one (or twice a window's worth has gone without one). The Redis stores,
// which allocate more per request, had one in every window of three servers each on 2026-12-04,
// started wherever the warm-up ended; started after a major GC, the second server's held none.
// Collecting in full before the window (global.gc) was tried and does not do: the counts that
// follow it are 35% to 2x higher, bare included, 5,000 requests later.
//
// One server runs at a time: how many requests a server takes from its sockets per turn of its
// event loop, and so what each request pays for the turn, depends on how fast the load generator
// keeps up, and with two servers under callgrind beside it on two cores that depended on the
// scheduler (on a busy day the Redis store counted 271,000 instructions per request two at a time,
// and 208,000 alone in two runs of 5,000 requests). The Redis stores (when a Redis answers) are
// counted too: only the Node process's instructions, not Redis's.
//
// Then Redis's side: a redis-server of its own (a spare loopback port, nothing kept on disk) under
// callgrind, and each script called `scriptCalls` times on one key, 16 calls in flight, through
// ioredis exactly as each store calls it (the script registered by the store's own constructor):
// an empty script (the floor of any script call), @fastify/rate-limit's fixed window, and
// exchangepace's reserve, and reserve + refund. Counted the same way (warm up, zero, count, dump).
// It includes Redis's event loop and its socket handling in user space.
//
// Run alone: node bench/instructions.js [--quick|--smoke] [--out DIR]. Needs valgrind (on every
// machine here); without it the part records that it was skipped.

import { execFileSync, spawn } from 'node:child_process'
import { readFileSync, readdirSync, rmSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createRequire } from 'node:module'
import { connect } from 'node:net'
import autocannon from 'autocannon'
import Redis from 'ioredis'
import { RedisStore } from 'exchangepace'
import { FORM, NEVER, REDIS_URL, probeRedis, tokenBody } from './apps.js'
import { BENCH_DIR, byMode, fmt, log, parseOptions, redisServerVersion, sparePort, table, writeResult } from './common.js'

const require = createRequire(import.meta.url)
const RateLimitRedisStore = require('@fastify/rate-limit/store/RedisStore')

const options = parseOptions()
const settings = byMode(options, {
  full: { warmup: 5000, requests: 10_000, scriptCalls: 20_000, kinds: ['bare', 'onresponse', 'empty', 'floor', 'headers', 'exchangepace', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis'] },
  quick: { warmup: 1000, requests: 1000, scriptCalls: 5000, kinds: ['bare', 'onresponse', 'empty', 'floor', 'headers', 'exchangepace', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis'] },
  smoke: { warmup: 50, requests: 50, scriptCalls: 100, kinds: ['bare', 'exchangepace'] }
})

const NAMES = {
  bare: 'bare',
  onresponse: 'a no-op onResponse alone',
  empty: 'empty hooks',
  floor: 'floor (a no-op preHandler + the two headers in onSend)',
  headers: 'the two headers written by the handler, no hook',
  exchangepace: 'exchangepace',
  ratelimit: '@fastify/rate-limit',
  'exchangepace-redis': 'exchangepace, RedisStore',
  'ratelimit-redis': '@fastify/rate-limit, Redis store'
}

function valgrindVersion () {
  try {
    return execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()
  } catch {
    return null
  }
}

const load = (port, amount) => autocannon({
  url: `http://127.0.0.1:${port}/token`,
  method: 'POST',
  headers: { 'content-type': FORM },
  body: tokenBody(),
  connections: 4,
  amount,
  timeout: 120
})

/**
 * The instruction count of the newest callgrind dump: the files in `dir` named `prefix`N that are
 * not in `before`. A dump taken after zeroing the counters holds only what ran in between.
 */
function dumpedInstructions (dir, prefix, before) {
  const dumps = readdirSync(dir).filter(file => file.startsWith(prefix) && !before.has(file))
  const totals = dumps.map(file => Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'))?.[1] ?? 0))
  return Math.max(...totals)
}

/** Servers counted per kind at most: a count whose window held a major GC is made again. */
const ATTEMPTS = 3

/** Requests per step while a retry waits for a major GC before its window (fewer in a short run). */
const ALIGN_STEP = Math.min(1000, settings.requests)

/**
 * Instructions per request of one server kind, counted by callgrind in a fresh server until a
 * window holds no major GC, or ATTEMPTS times (the last count is kept, with its major GCs). A
 * retry's window starts after a major GC.
 */
async function count (kind, dir) {
  let result
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    result = { ...await countOnce(kind, dir, attempt, attempt > 1), attempts: attempt }
    if (result.majorGcs === 0) break
    const next = attempt < ATTEMPTS ? 'counting again, after a major GC' : 'kept: the last attempt'
    log(`  instructions: ${NAMES[kind]}: ${result.majorGcs} major GC in the window (${fmt(result.instructionsPerRequest, 0)} per request), ${next}`)
  }
  return result
}

/**
 * One server's count. With `afterMajorGc`, the window starts right after the server's next major GC
 * (requests are sent ALIGN_STEP at a time until it reports one, twice a window's worth at most):
 * `alignedAfter` is how many were sent, and `majorGcBeforeWindow` whether one came (both null
 * without it).
 */
async function countOnce (kind, dir, attempt, afterMajorGc) {
  const out = join(dir, `callgrind.${kind}.${attempt}.out`)
  const child = spawn('valgrind', ['--tool=callgrind', '--smc-check=all-non-file', '--instr-atstart=no', `--callgrind-out-file=${out}`,
    process.execPath, '--single-threaded', join(BENCH_DIR, 'http-server.js'), kind], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] })
  const reply = (cmd, answer) => new Promise(resolve => {
    const listener = message => {
      if (message.cmd !== answer) return
      child.off('message', listener)
      resolve(message)
    }
    child.on('message', listener)
    child.send({ cmd })
  })
  try {
    const ready = await new Promise((resolve, reject) => {
      child.on('message', message => { if (message.cmd === 'ready') resolve(message) })
      child.on('exit', code => reject(new Error(`instructions: server ${kind} exited (${code})`)))
    })
    execFileSync('callgrind_control', ['-i', 'on', String(child.pid)], { stdio: 'ignore' })
    await load(ready.port, settings.warmup)
    await load(ready.port, settings.warmup)
    let alignedAfter = null
    let majorGcBeforeWindow = null
    if (afterMajorGc) {
      await reply('watch', 'watching')
      alignedAfter = 0
      majorGcBeforeWindow = false
      while (!majorGcBeforeWindow && alignedAfter < 2 * settings.requests) {
        await load(ready.port, ALIGN_STEP)
        alignedAfter += ALIGN_STEP
        majorGcBeforeWindow = (await reply('collections', 'collections')).major > 0
      }
    }
    await reply('watch', 'watching')
    execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'ignore' })
    const result = await load(ready.port, settings.requests)
    execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' })
    const { major } = await reply('collections', 'collections')
    const instructions = dumpedInstructions(dir, `callgrind.${kind}.${attempt}.out.`, new Set())
    return { kind, name: NAMES[kind], requests: settings.requests, statuses: { 200: result['2xx'], other: result.non2xx }, instructionsPerRequest: instructions / settings.requests, majorGcs: major, alignedAfter, majorGcBeforeWindow }
  } finally {
    child.kill('SIGKILL')
  }
}

/** Resolves once something accepts connections on the port (valgrind takes seconds to start Redis). */
async function listening (port) {
  for (let attempt = 0; attempt < 300; attempt++) {
    const open = await new Promise(resolve => {
      const socket = connect(port, '127.0.0.1', () => { socket.end(); resolve(true) })
      socket.on('error', () => resolve(false))
    })
    if (open) return
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  throw new Error(`instructions: redis-server under callgrind did not listen on ${port}`)
}

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
    const run = async (call, operations) => {
      const inFlight = 16
      await Promise.all(Array.from({ length: inFlight }, async (_, lane) => {
        for (let i = lane; i < operations; i += inFlight) await call(client)
      }))
    }
    const results = []
    for (const { name, call } of SCRIPT_CALLS) {
      log(`  instructions: Redis, ${name} (${settings.scriptCalls} counted)`)
      await run(call, Math.min(2000, settings.scriptCalls))
      const before = new Set(readdirSync(dir))
      execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'ignore' })
      await run(call, settings.scriptCalls)
      execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' })
      results.push({ name, operations: settings.scriptCalls, instructionsPerOperation: dumpedInstructions(dir, 'callgrind.redis.out.', before) / settings.scriptCalls })
    }
    return results
  } finally {
    client?.disconnect()
    child.kill('SIGKILL')
  }
}

const valgrind = valgrindVersion()
if (valgrind === null) {
  log('instructions: skipped: valgrind is not installed')
  writeResult(options, 'instructions', { skipped: 'valgrind is not installed' })
} else {
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-callgrind-'))
  const results = []
  const redisServer = redisServerVersion()
  let redisScripts = null
  const redis = await probeRedis()
  const kinds = settings.kinds.filter(kind => !kind.endsWith('-redis') || redis.unreachable === undefined)
  if (kinds.length < settings.kinds.length) log(`instructions: no Redis at ${REDIS_URL} (${redis.unreachable}): the Redis stores are left out`)
  try {
    for (const kind of kinds) {
      log(`  instructions: ${NAMES[kind]} under callgrind (${settings.warmup} x 2 requests to warm up, ${settings.requests} counted)`)
      results.push(await count(kind, dir))
    }
    if (redisServer === null) log('instructions: redis-server is not installed: Redis\'s side of the scripts is left out')
    else redisScripts = await countRedisScripts(dir)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  const bare = results.find(r => r.kind === 'bare').instructionsPerRequest
  for (const r of results) {
    r.ratioToBare = r.instructionsPerRequest / bare
    r.addedPerRequest = r.instructionsPerRequest - bare
  }
  log(`\ninstructions per request (callgrind, ${valgrind}), ${settings.requests} requests counted per server`)
  log(table(['configuration', 'instructions/req', 'added to bare', 'ratio to bare', 'servers counted', 'major GCs in the window', 'statuses'],
    results.map(r => [r.name, fmt(r.instructionsPerRequest, 0), fmt(r.addedPerRequest, 0), `${fmt(r.ratioToBare, 3)}x`, String(r.attempts), String(r.majorGcs), `200:${r.statuses[200]} other:${r.statuses.other}`])))
  if (redisScripts !== null) {
    const rateLimit = redisScripts[1].instructionsPerOperation
    for (const r of redisScripts) r.ratioToRateLimit = r.instructionsPerOperation / rateLimit
    log(`\nRedis's instructions per operation (callgrind, ${redisServer}), ${settings.scriptCalls} operations counted per line`)
    log(table(['script calls', 'instructions/op', 'ratio to @fastify/rate-limit'],
      redisScripts.map(r => [r.name, fmt(r.instructionsPerOperation, 0), `${fmt(r.ratioToRateLimit, 3)}x`])))
  }
  const file = writeResult(options, 'instructions', {
    description: 'user-space instructions per request of each server, counted by callgrind; and Redis\'s per script call',
    valgrind,
    warmup: settings.warmup,
    results,
    redisServer,
    redisScripts
  })
  log(`\ninstructions: wrote ${file}`)
}
