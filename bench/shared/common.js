// Shared pieces of the benchmark parts: options, statistics, the machine, results on disk.
//
// Every part runs as its own process (`node bench/parts/<part>/<part>.js [options]`), started by
// bench/run.js, and writes `<out>/<part>.json`. Figures are only ever compared inside one such file: the
// alternatives ran in the same process (or the same run), on the same machine, minutes apart at most.

import { mkdirSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import os from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** bench/: parts/<part>/<part>.js are the parts, shared/ what several use, results/ their JSON. */
export const BENCH_DIR = dirname(dirname(fileURLToPath(import.meta.url)))
export const PARTS = ['bucket', 'memory', 'http', 'fidelity', 'flood', 'redis', 'instructions', 'guessing', 'failover', 'soak', 'capacity', 'latency', 'timeouts', 'faults', 'gateway']

/**
 * `--quick` shortens every part for a quick look; `--smoke` is the shortest form that still runs
 * every code path (what test/bench/bench.test.ts runs). `--out DIR` is where the raw JSON goes.
 */
export function parseOptions (argv = process.argv.slice(2)) {
  const options = { parts: [], mode: 'full', out: join(BENCH_DIR, 'results'), docs: null }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const value = () => {
      const next = argv[++i]
      if (next === undefined) throw new TypeError(`bench: ${arg} needs a value`)
      return next
    }
    if (arg === '--quick') options.mode = 'quick'
    else if (arg === '--smoke') options.mode = 'smoke'
    else if (arg === '--part') options.parts.push(...value().split(','))
    else if (arg.startsWith('--part=')) options.parts.push(...arg.slice(7).split(','))
    else if (arg === '--out') options.out = resolve(value())
    else if (arg.startsWith('--out=')) options.out = resolve(arg.slice(6))
    else if (arg === '--docs') options.docs = resolve(value())
    else if (arg.startsWith('--docs=')) options.docs = resolve(arg.slice(7))
    else if (arg === '--help' || arg === '-h') options.help = true
    else throw new TypeError(`bench: unknown option ${arg}`)
  }
  for (const part of options.parts) {
    if (part !== 'all' && !PARTS.includes(part)) throw new TypeError(`bench: --part must be one of ${PARTS.join(', ')} or all, got ${part}`)
  }
  if (options.parts.length === 0 || options.parts.includes('all')) options.parts = [...PARTS]
  return options
}

/** The options a part passes on to the processes it starts. */
export function optionArgs (options) {
  const args = ['--out', options.out]
  if (options.mode !== 'full') args.push(`--${options.mode}`)
  return args
}

/** Picks the value of the current mode from `{ full, quick, smoke }`. */
export function byMode (options, values) {
  return values[options.mode]
}

function quantile (values, q) {
  const sorted = [...values].sort((a, b) => a - b)
  if (sorted.length === 0) return NaN
  const at = (sorted.length - 1) * q
  const low = Math.floor(at)
  const high = Math.ceil(at)
  return sorted[low] + (sorted[high] - sorted[low]) * (at - low)
}

export const median = values => quantile(values, 0.5)

/** Median, quartiles and extremes of a sample. */
export function summary (values) {
  return {
    median: median(values),
    p25: quantile(values, 0.25),
    p75: quantile(values, 0.75),
    min: Math.min(...values),
    max: Math.max(...values),
    n: values.length
  }
}

/** A deterministic PRNG (mulberry32), so that every run uses the same key order. */
export function random (seed) {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** Fisher-Yates shuffle of 0..n-1 into an Int32Array. */
export function permutation (n, rand) {
  const order = new Int32Array(n)
  for (let i = 0; i < n; i++) order[i] = i
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1))
    const swap = order[i]
    order[i] = order[j]
    order[j] = swap
  }
  return order
}

export function machine () {
  const cpus = os.cpus()
  return {
    os: `${os.type()} ${os.release()} (${os.platform()}/${os.arch()})`,
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryGB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    v8: process.versions.v8
  }
}

/** The command that reproduces a run, as a user would type it. */
export function commandOf (options) {
  const args = []
  if (options.mode !== 'full') args.push(`--${options.mode}`)
  if (options.parts.length !== PARTS.length) args.push('--part', options.parts.join(','))
  return args.length === 0 ? 'npm run bench' : `npm run bench -- ${args.join(' ')}`
}

/** Writes `<out>/<part>.json` with what every result file carries beside the figures. */
export function writeResult (options, part, figures) {
  mkdirSync(options.out, { recursive: true })
  const file = join(options.out, `${part}.json`)
  const result = {
    part,
    mode: options.mode,
    command: commandOf({ ...options, parts: [part] }),
    date: new Date().toISOString(),
    machine: machine(),
    loadavg: os.loadavg(),
    ...figures
  }
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n')
  return file
}

/** A fixed-width text table for the console. */
export function table (header, rows) {
  const cells = [header, ...rows].map(row => row.map(cell => String(cell)))
  const widths = header.map((_, i) => Math.max(...cells.map(row => row[i].length)))
  const line = row => row.map((cell, i) => i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])).join('  ')
  return [line(cells[0]), widths.map(w => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n')
}

/** A number with `digits` decimals; one that rounds to zero is written without a sign. */
export function fmt (value, digits = 1) {
  if (!Number.isFinite(value)) return String(value)
  const text = value.toFixed(digits)
  return Number(text) === 0 ? (0).toFixed(digits) : text
}

/** `1.03x (0.98-1.07)`: a median ratio and the range it moved in. */
/** `0.52x (0.48-0.55)` from a summary, with the extremes or (`'iqr'`) the quartiles as the spread. */
export function ratioText (s, digits = 2, how = 'range') {
  return how === 'iqr'
    ? `${fmt(s.median, digits)}x (${fmt(s.p25, digits)}-${fmt(s.p75, digits)})`
    : `${fmt(s.median, digits)}x (${fmt(s.min, digits)}-${fmt(s.max, digits)})`
}

export function log (...args) {
  process.stdout.write(args.join(' ') + '\n')
}

/** Lets timers, I/O and idle GC run between rounds. */
export const breathe = () => new Promise(resolve => setImmediate(resolve))

/** A loopback port nothing listens on now, for a server of the bench's own. */
export async function sparePort () {
  const server = createServer()
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address()
  await new Promise(resolve => server.close(resolve))
  return port
}
