// Part 2, memory: heap bytes per live key, and what a flood of declared ids leaves behind.
//
// Needs --expose-gc (bench/run.js passes it). Figures are differences of
// `heapUsed + arrayBuffers` between two points that each follow full collections; arrayBuffers
// counts the typed arrays exchangepace keeps its numbers in, which live outside the V8 heap.
//
// - Per live key: the key strings are built (and kept) before the first reading, so what is
//   counted is the structure holding them, not the strings. The rate (7.3/s) and the clock (a fixed
//   non-integer millisecond) are chosen so that every stored number is a fractional double.
//   exchangepace's table and V8's Map both grow by doubling, so bytes per key depend on how full
//   the last doubling is: measured at 1M keys (95% of 2^20) and just past a power of two (2^19 + 1,
//   the worst point of the sawtooth).
// - Flood of strangers: 1M distinct ids, each reserved and refunded (a wrong secret): rows left
//   and heap growth once collected. The ids are made on the fly, as requests would bring them.
// - Spenders: 1M distinct ids reserved and kept, then one horizon (1 s) later one more reserve:
//   rows left and heap growth. The clock is injected so the horizon passes without waiting.
//
// Run alone: node --expose-gc bench/parts/memory/memory.js [--quick|--smoke] [--out DIR]

import { createRequire } from 'node:module'
import { Pace } from 'exchangepace'
import { byMode, fmt, log, parseOptions, table, writeResult } from '../../shared/common.js'

const require = createRequire(import.meta.url)
const LocalStore = require('@fastify/rate-limit/store/LocalStore')
const { RateLimiterMemory } = require('rate-limiter-flexible')

if (typeof globalThis.gc !== 'function') {
  console.error('memory: run with node --expose-gc')
  process.exit(2)
}

const options = parseOptions()
const settings = byMode(options, {
  full: { sizes: [1_000_000, 2 ** 19 + 1], flood: 1_000_000 },
  quick: { sizes: [1_000_000], flood: 1_000_000 },
  smoke: { sizes: [20_000], flood: 20_000 }
})
const RATE = 7.3
const FIXED_MS = 86_400_123.456789

/** Collects until the reading stops falling, then returns heapUsed + arrayBuffers. */
function settled () {
  let last = Infinity
  for (let i = 0; i < 6; i++) {
    globalThis.gc()
    const { heapUsed, arrayBuffers } = process.memoryUsage()
    const now = heapUsed + arrayBuffers
    if (now >= last - 4096) return now
    last = now
  }
  return last
}

function keysOf (n, prefix) {
  const keys = new Array(n)
  for (let i = 0; i < n; i++) keys[i] = `${prefix}-${String(i).padStart(7, '0')}`
  const hashed = new Set(keys) // flattens and hashes every key before the first reading
  if (hashed.size !== n) throw new Error('memory: duplicate keys')
  return keys
}

const ignore = () => {}

/** Bytes per key of the structure `fill(keys)` builds, the keys existing before and after. */
function perKey (keys, build) {
  const before = settled()
  const held = build(keys)
  const after = settled()
  const bytes = after - before
  const detail = held.detail()
  return { bytes, perKey: bytes / keys.length, ...detail }
}

const structures = {
  exchangepace: keys => {
    const pace = new Pace({ perSecond: RATE, now: () => FIXED_MS })
    for (const key of keys) pace.reserve(key)
    return { pace, detail: () => ({ rows: pace.size }) }
  },
  LocalStore: keys => {
    const store = new LocalStore(false, false, keys.length + 1)
    for (const key of keys) store.incr(key, ignore, 1000, 1e9)
    return { store, detail: () => ({ rows: store.lru.size }) }
  },
  'RLF memory': keys => {
    // A window long enough that no record expires while it is measured (each record holds a timer).
    const limiter = new RateLimiterMemory({ points: 1e9, duration: 600 })
    for (const key of keys) limiter.consume(key)
    return { limiter, detail: () => ({ rows: limiter._memoryStorage._storage.size }) }
  }
}

function liveKeys (n) {
  const keys = keysOf(n, 'client')
  const result = { keys: n }
  for (const [name, build] of Object.entries(structures)) {
    let held = null
    result[name] = perKey(keys, k => {
      held = build(k)
      return held
    })
    held = null
    log(`  ${n} live keys: ${name} ${fmt(result[name].perKey)} bytes per key`)
  }
  return result
}

/** 1M distinct declared ids, each reserved then refunded. */
function strangerFlood (n) {
  const pace = new Pace({ perSecond: RATE })
  const before = settled()
  const start = process.hrtime.bigint()
  for (let i = 0; i < n; i++) pace.reserve(`stranger-${i}-${i * 7919}`).refund()
  const seconds = Number(process.hrtime.bigint() - start) / 1e9
  const rows = pace.size
  const after = settled()
  return { ids: n, rows, heapGrowthMB: (after - before) / 2 ** 20, seconds }
}

/** The same flood against LocalStore (default LRU of 5000) and RLF: what each keeps. */
function strangerFloodOthers (n) {
  const store = new LocalStore(false, false)
  const limiter = new RateLimiterMemory({ points: 1e9, duration: 1 })
  let before = settled()
  for (let i = 0; i < n; i++) store.incr(`stranger-${i}-${i * 7919}`, ignore, 1000, 1e9)
  let after = settled()
  const local = { rows: store.lru.size, heapGrowthMB: (after - before) / 2 ** 20 }
  before = settled()
  for (let i = 0; i < n; i++) limiter.consume(`stranger-${i}-${i * 7919}`)
  after = settled()
  const rlf = { rows: limiter._memoryStorage._storage.size, heapGrowthMB: (after - before) / 2 ** 20, note: 'records expire by timer one window (1 s) later' }
  return { LocalStore: local, 'RLF memory': rlf }
}

/** 1M distinct ids reserved and kept; one horizon later, one more reserve sweeps them. */
function spenders (n) {
  let clock = FIXED_MS
  const pace = new Pace({ perSecond: RATE, now: () => clock })
  const before = settled()
  for (let i = 0; i < n; i++) pace.reserve(`spender-${i}-${i * 7919}`)
  const rowsAfterSpending = pace.size
  const peakMB = (settled() - before) / 2 ** 20
  clock += 1000 // one horizon: every bucket is full again
  pace.reserve('next-caller').refund()
  const rowsAfterHorizon = pace.size
  const after = settled()
  return { ids: n, rowsAfterSpending, heapGrowthWhileLiveMB: peakMB, rowsAfterHorizon, heapGrowthAfterHorizonMB: (after - before) / 2 ** 20 }
}

log('memory: bytes per live key (heapUsed + arrayBuffers, after full collections)')
const live = settings.sizes.map(liveKeys)
log('memory: flood of strangers')
const flood = strangerFlood(settings.flood)
const floodOthers = strangerFloodOthers(settings.flood)
log('memory: spenders, then one horizon')
const spent = spenders(settings.flood)

log('')
log(table(['live keys', 'exchangepace B/key', 'LocalStore B/key', 'RLF memory B/key'], live.map(r => [
  r.keys, fmt(r.exchangepace.perKey), fmt(r.LocalStore.perKey), fmt(r['RLF memory'].perKey)
])))
log('')
log(table(['flood', 'ids', 'rows left', 'heap growth MB'], [
  ['exchangepace, refunded', flood.ids, flood.rows, fmt(flood.heapGrowthMB, 2)],
  ['LocalStore (LRU 5000)', flood.ids, floodOthers.LocalStore.rows, fmt(floodOthers.LocalStore.heapGrowthMB, 2)],
  ['RLF memory (1 s window)', flood.ids, floodOthers['RLF memory'].rows, fmt(floodOthers['RLF memory'].heapGrowthMB, 2)],
  ['exchangepace, spent', spent.ids, spent.rowsAfterSpending, fmt(spent.heapGrowthWhileLiveMB, 2)],
  ['  ... one horizon later', spent.ids, spent.rowsAfterHorizon, fmt(spent.heapGrowthAfterHorizonMB, 2)]
]))

const headline = live[0]
const file = writeResult(options, 'memory', {
  description: 'heap bytes per live key (key strings excluded) and what floods of declared ids leave',
  rate: RATE,
  target: {
    what: '<= 64 heap bytes per live key; 1M refunded ids leave 0 rows and the heap within a few MB',
    perKey: headline.exchangepace.perKey,
    perKeyWorst: Math.max(...live.map(r => r.exchangepace.perKey)),
    floodRows: flood.rows,
    floodHeapGrowthMB: flood.heapGrowthMB,
    met: headline.exchangepace.perKey <= 64 && flood.rows === 0 && Math.abs(flood.heapGrowthMB) < 4
  },
  live,
  flood: { exchangepace: flood, ...floodOthers },
  spenders: spent
})
log(`\nmemory: wrote ${file}`)
