// Counting instructions with valgrind's callgrind, for part 7 (bench/parts/instructions/instructions.js) and for
// comparing two builds (bench/tools/compare-builds.js).
//
// A server (bench/shared/http-server.js <kind>, or another build's copy of it) runs under `valgrind
// --tool=callgrind`, which counts the instructions the process executes in user space. It first
// answers `warmup` requests twice (so that its code is optimized as it would be under load), then
// callgrind's counters are zeroed (`callgrind_control -z`), `requests` more are sent (autocannon, 4
// connections) and the counters are dumped. Callgrind instruments the server only once it listens
// (`--instr-atstart=no`, then `callgrind_control -i on`), and checks only code outside files for
// self-modification (`--smc-check=all-non-file`, what valgrind advises for a JIT: V8's code is in
// anonymous memory, node's own in its binary). Both change how valgrind runs the server, not what
// it executes (bare's count over 2,000 requests: 261,334 and 261,048 per request before, 260,953
// and 260,697 after, 2026-12-05).
//
// A major GC (mark-compact, about once in 289,000 requests under load) that fell in the window of
// some servers and not others added about 6,000 instructions per request to exchangepace and
// 13,000 to its Redis store (2026-12-04). So the server reports the major GCs of its window, and a
// count whose window held one is made again in a fresh server, up to ATTEMPTS times: the counts
// leave major GCs out and keep the scavenges. A retry's window starts right after a major GC (the
// server is sent requests ALIGN_STEP at a time until it reports one, twice a window's worth at
// most). Collecting in full before the window (global.gc) does not do: the counts that follow it
// are 35% to 2x higher, bare included, 5,000 requests later.
//
// One server runs at a time: how many requests a server takes from its sockets per turn of its
// event loop, and so what each request pays for the turn, depends on how fast the load generator
// keeps up, and with two servers under callgrind that depended on the scheduler.

import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { FORM } from './apps.js'
import { BENCH_DIR, fmt, log } from './common.js'

/** Servers counted per configuration at most: a count whose window held a major GC is made again. */
const ATTEMPTS = 3

/** Requests per step while a retry waits for a major GC before its window. */
const ALIGN_STEP = 1000

/** `valgrind --version`, or null when valgrind is not installed. */
export function valgrindVersion () {
  try {
    return execFileSync('valgrind', ['--version'], { encoding: 'utf8' }).trim()
  } catch {
    return null
  }
}

/**
 * The instruction count of the newest callgrind dump: the files in `dir` named `prefix`N that are
 * not in `before`. A dump taken after zeroing the counters holds only what ran in between.
 */
export function dumpedInstructions (dir, prefix, before = new Set()) {
  const dumps = readdirSync(dir).filter(file => file.startsWith(prefix) && !before.has(file))
  const totals = dumps.map(file => Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'))?.[1] ?? 0))
  return Math.max(...totals)
}

/** Resolves once something accepts connections on the port (valgrind takes seconds to start a server). */
export async function listening (port) {
  for (let attempt = 0; attempt < 300; attempt++) {
    const open = await new Promise(resolve => {
      const socket = connect(port, '127.0.0.1', () => { socket.end(); resolve(true) })
      socket.on('error', () => resolve(false))
    })
    if (open) return
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  throw new Error(`callgrind: nothing listened on ${port}`)
}

/** `amount` requests of `config` ({ url, body }) on `port`, 4 connections. */
function load (port, config, amount) {
  return autocannon({
    url: `http://127.0.0.1:${port}${config.url}`,
    method: 'POST',
    headers: { 'content-type': FORM },
    body: config.body,
    connections: 4,
    amount,
    timeout: 120
  })
}

/**
 * Instructions per request of one configuration ({ kind, url, body, name }), counted in a fresh
 * server until a window holds no major GC, or ATTEMPTS times (the last count is kept, with its
 * major GCs). `run` is { dir, warmup, requests, server }: where the dumps go, the requests, and the
 * server script (bench/shared/http-server.js unless another build's is given).
 */
export async function countServer (config, run) {
  let result
  for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
    result = { ...await countOnce(config, run, attempt), attempts: attempt }
    if (result.majorGcs === 0) break
    const next = attempt < ATTEMPTS ? 'counting again, after a major GC' : 'kept: the last attempt'
    log(`  callgrind: ${config.name}: ${result.majorGcs} major GC in the window (${fmt(result.instructionsPerRequest, 0)} per request), ${next}`)
  }
  return result
}

/** A server of `kind` under callgrind, once it listens: { child, port, ask(cmd, answer) }. */
async function startUnderCallgrind (kind, out, server) {
  const child = spawn('valgrind', ['--tool=callgrind', '--smc-check=all-non-file', '--instr-atstart=no', `--callgrind-out-file=${out}`,
    process.execPath, '--single-threaded', server, kind], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] })
  const ask = (cmd, answer) => new Promise(resolve => {
    const listener = message => {
      if (message.cmd !== answer) return
      child.off('message', listener)
      resolve(message)
    }
    child.on('message', listener)
    child.send({ cmd })
  })
  const ready = await new Promise((resolve, reject) => {
    child.on('message', message => { if (message.cmd === 'ready') resolve(message) })
    child.on('exit', code => reject(new Error(`callgrind: server ${kind} exited (${code})`)))
  })
  return { child, port: ready.port, ask }
}

/**
 * Sends requests ALIGN_STEP at a time until the server reports a major GC, or twice a window's
 * worth went without one: { alignedAfter, majorGcBeforeWindow }.
 */
async function alignAfterMajorGc (server, config, requests) {
  const step = Math.min(ALIGN_STEP, requests)
  await server.ask('watch', 'watching')
  let alignedAfter = 0
  let majorGcBeforeWindow = false
  while (!majorGcBeforeWindow && alignedAfter < 2 * requests) {
    await load(server.port, config, step)
    alignedAfter += step
    majorGcBeforeWindow = (await server.ask('collections', 'collections')).major > 0
  }
  return { alignedAfter, majorGcBeforeWindow }
}

/**
 * The counts of each of `configs` ({ kind, url, body, name, server? }), each counted `rounds` times
 * in fresh servers, in turn, the order reversed every other round so that no configuration always
 * follows the same one; in the order of `configs`. For the scripts that compare builds or set-ups
 * beside the parts (bench/tools/compare-builds.js, bench/tools/unpaced.js).
 */
export async function countInRounds (configs, rounds, { warmup, requests }) {
  const counts = configs.map(() => [])
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-counts-'))
  try {
    for (let round = 0; round < rounds; round++) {
      for (let turn = 0; turn < configs.length; turn++) {
        const i = round % 2 === 0 ? turn : configs.length - 1 - turn
        const result = await countServer(configs[i], { dir, warmup, requests, server: configs[i].server })
        counts[i].push(result.instructionsPerRequest)
        log(`  round ${round + 1}: ${configs[i].name}: ${fmt(result.instructionsPerRequest, 0)} (major GCs in the window: ${result.majorGcs})`)
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  return counts
}

/** Servers started so far: each dumps to files of its own. */
let started = 0

/** One server's count; a retry (attempt > 1) starts its window after a major GC. */
async function countOnce (config, { dir, warmup, requests, server: script = join(BENCH_DIR, 'shared', 'http-server.js') }, attempt) {
  const prefix = `callgrind.${config.kind}.${++started}.out`
  const out = join(dir, prefix)
  const server = await startUnderCallgrind(config.kind, out, script)
  try {
    execFileSync('callgrind_control', ['-i', 'on', String(server.child.pid)], { stdio: 'ignore' })
    await load(server.port, config, warmup)
    await load(server.port, config, warmup)
    const aligned = attempt > 1 ? await alignAfterMajorGc(server, config, requests) : { alignedAfter: null, majorGcBeforeWindow: null }
    await server.ask('watch', 'watching')
    execFileSync('callgrind_control', ['-z', String(server.child.pid)], { stdio: 'ignore' })
    const result = await load(server.port, config, requests)
    execFileSync('callgrind_control', ['-d', String(server.child.pid)], { stdio: 'ignore' })
    const { major } = await server.ask('collections', 'collections')
    const statuses = {}
    for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) statuses[code] = count
    const instructions = dumpedInstructions(dir, `${prefix}.`)
    return { requests, statuses, errors: result.errors + result.timeouts, instructionsPerRequest: instructions / requests, majorGcs: major, ...aligned }
  } finally {
    server.child.kill('SIGKILL')
  }
}
