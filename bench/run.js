#!/usr/bin/env node
// `npm run bench`: runs the benchmark parts, each in its own process, then regenerates the report.
//
//   npm run bench                         every part, full length (about an hour, and 5 to 15 more
//                                         for the guessing part's simulated hour, then the soak's
//                                         hour); raw JSON in
//                                         bench/results/, report in docs/benchmarks.md, docs/fidelity.svg
//                                         and docs/soak.svg
//   npm run bench -- --part http          one part (or several: --part bucket,memory); the report is
//                                         rebuilt from the latest JSON of every part
//   npm run bench -- --quick              every part, shortened, for a quick look (about 9 minutes,
//                                         4 of them the soak's)
//   npm run bench -- --smoke              the shortest form of every part (what test/bench/bench.test.ts runs)
//   npm run bench -- --out DIR            raw JSON and the report go to DIR instead
//   npm run bench -- --docs DIR           the report goes to DIR
//
// --quick and --smoke write to bench/results/tmp-quick/ and bench/results/tmp-smoke/ (report
// included) unless --out says otherwise, so a quick look never replaces the full figures.
//
// Parts: bucket (ns per call), memory (bytes per key, floods), http (CPU per request over
// loopback, servers pinned with taskset), fidelity (admitted per window), flood (key flood), redis
// (the same route on Redis stores), instructions (instructions per request under callgrind),
// guessing (guesses at one client's secret that reach the check, over a simulated hour), failover
// (a RedisStore through a Cluster failover and a restart of Redis, under traffic), soak (an hour
// of mixed traffic through two replicas per store: rows, heap, RSS, event-loop delay, losses),
// capacity (Redis's CPU, bytes and round trips per request: what one Redis core carries), latency
// (what a request waits for with Redis behind a delaying proxy: one limit, one pace, three paces),
// timeouts (Redis's answer time under the soak's traffic, alone and at load, and the false outages
// each timeoutMs would begin), faults (random fault schedules between two replicas and Redis, each
// seed's invariants checked), gateway (what examples/gateway.js adds in latency over
// @fastify/reply-from alone).
//
// Layout: bench/parts/<part>/ holds a part: <part>.js (what this file starts), its helpers, and
// report.js, its section of the report, when it has one of its own (bench/report.js writes the
// others' and puts them together). bench/shared/ holds what several parts use (options and results
// in common.js; the token apps; HTTP rounds; callgrind; the simulated clock; the fault proxy; the
// Redis servers, which the tests start through it too). bench/tools/ holds scripts run by hand,
// not parts. bench/results/ holds the latest full run's JSON.

import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { BENCH_DIR, PARTS, commandOf, log, optionArgs, parseOptions } from './shared/common.js'
import { writeReport } from './report.js'

const argv = process.argv.slice(2)
const options = parseOptions(argv)
if (options.help) {
  log(`usage: npm run bench -- [--part ${PARTS.join(',')}] [--quick|--smoke] [--out DIR] [--docs DIR]`)
  process.exit(0)
}
const outGiven = argv.some(arg => arg === '--out' || arg.startsWith('--out='))
if (!outGiven && options.mode !== 'full') options.out = join(BENCH_DIR, 'results', `tmp-${options.mode}`)
const docs = options.docs ?? (outGiven || options.mode !== 'full' ? options.out : join(BENCH_DIR, '..', 'docs'))

/** Node flags each part needs. */
const FLAGS = { bucket: ['--expose-gc'], memory: ['--expose-gc'], http: [], fidelity: [], flood: ['--expose-gc'], redis: [], instructions: [], guessing: [], failover: [], soak: [], capacity: [], latency: [], timeouts: [], faults: [], gateway: [] }

function runPart (part) {
  return new Promise(resolve => {
    const child = spawn(process.execPath, [...FLAGS[part], join(BENCH_DIR, 'parts', part, `${part}.js`), ...optionArgs(options)], { stdio: 'inherit' })
    child.on('exit', (code, signal) => resolve(code === 0 ? null : `${part} failed (${signal ?? `exit ${code}`})`))
  })
}

log(`bench: ${commandOf(options)}  (parts: ${options.parts.join(', ')}; results in ${options.out})`)
const failures = []
const started = Date.now()
for (const part of PARTS.filter(p => options.parts.includes(p))) {
  const partStart = Date.now()
  log(`\n=== ${part} ===`)
  const failure = await runPart(part)
  if (failure) failures.push(failure)
  log(`=== ${part}: ${failure ?? 'done'} in ${((Date.now() - partStart) / 1000).toFixed(0)} s ===`)
}
const written = writeReport({ resultsDir: options.out, docsDir: docs })
log(`\nbench: report ${written.join(', ')}; ${((Date.now() - started) / 1000).toFixed(0)} s in all`)
if (failures.length > 0) {
  log(`bench: ${failures.join('; ')}`)
  process.exit(1)
}
