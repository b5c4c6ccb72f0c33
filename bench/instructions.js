// Part 7, instructions per request: the HTTP part's servers under valgrind's callgrind, which
// counts the instructions the server process executes in user space. Unlike CPU time, the count
// does not depend on what else the machine is doing: the same server build, requests and
// environment give the same figure to within a few hundredths of a percent, so it shows what a
// plugin adds to a request where the wall-clock rounds only show it through the noise. It leaves
// out the kernel (the socket reads and writes), so its ratios are larger than those of CPU time,
// of which the kernel is a good share.
//
// Each server (bench/http-server.js <kind>, started under `valgrind --tool=callgrind`) first
// answers `warmup` requests twice (so that its code is optimized as it would be under load), then
// callgrind's counters are zeroed (`callgrind_control -z`), `requests` more are sent (autocannon, 4
// connections, the token route with the right secret), and the counters are dumped. Two servers
// run at a time, one per core. The Redis stores (when a Redis answers) are counted too: only the
// Node process's instructions, not Redis's.
//
// Run alone: node bench/instructions.js [--quick|--smoke] [--out DIR]. Needs valgrind (on every
// machine here); without it the part records that it was skipped.

import { execFileSync, spawn } from 'node:child_process'
import { readFileSync, readdirSync, rmSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { FORM, REDIS_URL, probeRedis, tokenBody } from './apps.js'
import { BENCH_DIR, byMode, fmt, log, parseOptions, table, writeResult } from './common.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { warmup: 3000, requests: 3000, kinds: ['bare', 'empty', 'floor', 'exchangepace', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis'] },
  quick: { warmup: 1000, requests: 1000, kinds: ['bare', 'empty', 'floor', 'exchangepace', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis'] },
  smoke: { warmup: 50, requests: 50, kinds: ['bare', 'exchangepace'] }
})

const NAMES = {
  bare: 'bare',
  empty: 'empty hooks',
  floor: 'floor (empty hooks + the two headers)',
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

/** Instructions per request of one server kind, counted by callgrind. */
async function count (kind, dir) {
  const out = join(dir, `callgrind.${kind}.out`)
  const child = spawn('valgrind', ['--tool=callgrind', '--smc-check=all', `--callgrind-out-file=${out}`,
    process.execPath, '--single-threaded', join(BENCH_DIR, 'http-server.js'), kind], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] })
  try {
    const ready = await new Promise((resolve, reject) => {
      child.on('message', message => { if (message.cmd === 'ready') resolve(message) })
      child.on('exit', code => reject(new Error(`instructions: server ${kind} exited (${code})`)))
    })
    await load(ready.port, settings.warmup)
    await load(ready.port, settings.warmup)
    execFileSync('callgrind_control', ['-z', String(child.pid)], { stdio: 'ignore' })
    const result = await load(ready.port, settings.requests)
    execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' })
    // The dump after zeroing holds the measured requests only; callgrind names it out.N.
    const dumps = readdirSync(dir).filter(file => file.startsWith(`callgrind.${kind}.out.`))
    const totals = dumps.map(file => Number(/^(?:summary|totals): (\d+)/m.exec(readFileSync(join(dir, file), 'utf8'))?.[1] ?? 0))
    const instructions = Math.max(...totals)
    return { kind, name: NAMES[kind], requests: settings.requests, statuses: { 200: result['2xx'], other: result.non2xx }, instructionsPerRequest: instructions / settings.requests }
  } finally {
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
  const redis = await probeRedis()
  const kinds = settings.kinds.filter(kind => !kind.endsWith('-redis') || redis.unreachable === undefined)
  if (kinds.length < settings.kinds.length) log(`instructions: no Redis at ${REDIS_URL} (${redis.unreachable}): the Redis stores are left out`)
  try {
    const queue = [...kinds]
    const worker = async () => {
      for (let kind = queue.shift(); kind !== undefined; kind = queue.shift()) {
        log(`  instructions: ${NAMES[kind]} under callgrind (${settings.warmup} x 2 requests to warm up, ${settings.requests} counted)`)
        results.push(await count(kind, dir))
      }
    }
    await Promise.all([worker(), worker()])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
  results.sort((a, b) => settings.kinds.indexOf(a.kind) - settings.kinds.indexOf(b.kind))
  const bare = results.find(r => r.kind === 'bare').instructionsPerRequest
  for (const r of results) {
    r.ratioToBare = r.instructionsPerRequest / bare
    r.addedPerRequest = r.instructionsPerRequest - bare
  }
  log(`\ninstructions per request (callgrind, ${valgrind}), ${settings.requests} requests counted per server`)
  log(table(['configuration', 'instructions/req', 'added to bare', 'ratio to bare', 'statuses'],
    results.map(r => [r.name, fmt(r.instructionsPerRequest, 0), fmt(r.addedPerRequest, 0), `${fmt(r.ratioToBare, 3)}x`, `200:${r.statuses[200]} other:${r.statuses.other}`])))
  const file = writeResult(options, 'instructions', {
    description: 'user-space instructions per request of each server, counted by callgrind',
    valgrind,
    warmup: settings.warmup,
    results
  })
  log(`\ninstructions: wrote ${file}`)
}
