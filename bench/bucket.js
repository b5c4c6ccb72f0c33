// Part 1, the bucket's cost: nanoseconds per call, in one process, interleaved rounds, medians.
//
//   exchangepace    Pace#reserve, and Reservation#refund on half the calls (a pseudo-random half)
//   LocalStore      @fastify/rate-limit's in-memory store: incr(key, cb, 1000, max)
//   RLF memory      rate-limiter-flexible's RateLimiterMemory#consume(key)
//   clock + lookup  (live keys) the floor: exchangepace's clock read and one Map.get of the key;
//                   "+ object" also allocates one small object per call, as a reservation is;
//                   "+ slot + object" also reads and writes the key's slot in a typed array, as
//                   any store that keeps per-key numbers beside the Map's entry must
//
// Two workloads, each under one key pattern shared by the three (the same key strings, visited in
// the same shuffled order):
//
// - "live keys": N keys that all hold state for the whole run, as N clients that spent within the
//   horizon. A key of exchangepace holds a row only while its bucket is not full, and with the real
//   clock a bucket that is never refused refills within microseconds, so this pace reads the real
//   clock on every call exactly as the default does (performance.now) but scales it by 1e-12: in the
//   bucket's own time nothing refills during the run, every call finds its key's row, no call is
//   refused and a refund never empties a row. The scaling costs a call and a multiply, which counts
//   against exchangepace. LocalStore's LRU is sized to hold every key (at its default of 5000 a
//   10k-key pattern would miss on every call, which would flatter exchangepace), and RLF's records
//   never expire (duration 0), so that they live through the run too.
// - "strangers": a flood of declared ids that hold nothing: every call names an id with no state,
//   exchangepace reserves and refunds it (the wrong-secret path: insert, then delete the row), with
//   its default clock and a rate of 10/s; LocalStore and RLF run at their defaults (an LRU of 5000).
//
// Run alone: node --expose-gc bench/bucket.js [--quick|--smoke] [--out DIR]

import { createRequire } from 'node:module'
import { Pace } from 'exchangepace'
import { breathe, byMode, fmt, log, parseOptions, permutation, random, ratioText, summary, table, writeResult } from './common.js'

const require = createRequire(import.meta.url)
const LocalStore = require('@fastify/rate-limit/store/LocalStore')
const { RateLimiterMemory } = require('rate-limiter-flexible')

const options = parseOptions()
const settings = byMode(options, {
  full: { sizes: [1, 10_000, 1_000_000], rounds: 21, roundMs: 40, strangers: 1_000_000, strangerRounds: 11 },
  quick: { sizes: [1, 10_000, 1_000_000], rounds: 7, roundMs: 20, strangers: 1_000_000, strangerRounds: 5 },
  smoke: { sizes: [1, 1000], rounds: 2, roundMs: 0, strangers: 5000, strangerRounds: 2 }
})

/** A ceiling nobody reaches: LocalStore and RLF never answer "exceeded". */
const NEVER = 1e9
/** performance.now, called the way exchangepace's default clock calls it. */
const realClock = performance.now.bind(performance)
const frozenClock = () => realClock() * 1e-12

const gc = globalThis.gc ?? (() => {})
const minorGc = () => {
  try {
    gc({ type: 'minor' })
  } catch {
    gc()
  }
}

/** Half the calls refund, chosen by a fixed pseudo-random bit pattern (65536 bits, half of them set). */
function refundBits (rand) {
  const bits = new Uint8Array(65536)
  for (let i = 0; i < bits.length / 2; i++) bits[i] = 1
  for (let i = bits.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1))
    const swap = bits[i]
    bits[i] = bits[j]
    bits[j] = swap
  }
  return bits
}

const ignore = () => {}

// One loop per contender, each its own function so that V8 compiles each for its own call site.
// `state.at` walks the key order and `state.count` the refund bits across rounds.

function loopPace (pace, keys, order, bits, ops, state) {
  const n = order.length
  let at = state.at
  let count = state.count
  let refused = 0
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    const reservation = pace.reserve(keys[order[at]])
    if (!reservation.granted) refused++
    if (bits[count++ & 0xffff] === 1) reservation.refund()
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  state.count = count
  state.refused += refused
  return ns / ops
}

function loopPaceStrangers (pace, keys, order, ops, state) {
  const n = order.length
  let at = state.at
  let refused = 0
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    const reservation = pace.reserve(keys[order[at]])
    if (!reservation.granted) refused++
    reservation.refund()
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  state.refused += refused
  return ns / ops
}

// The floor of a per-key store, for live keys: the clock exchangepace reads and one Map lookup of
// the key, then the same with one small object allocated per call (kept a moment, as a caller keeps
// a reservation): what the target leaves room for beside the row's own arithmetic.
function loopFloor (slots, keys, order, ops, state) {
  const n = order.length
  let at = state.at
  let sum = 0
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    sum += frozenClock() + slots.get(keys[order[at]])
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  if (sum === -1) log('unreachable')
  return ns / ops
}

function loopFloorObject (slots, keys, order, kept, ops, state) {
  const n = order.length
  let at = state.at
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    kept[i & 0xff] = { slot: slots.get(keys[order[at]]), at: frozenClock() }
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  return ns / ops
}

// The floor with the key's state: the same, plus the bucket's read and write of the key's slot in a
// typed array (its time, moved one unit on), as exchangepace's rows are kept.
function loopFloorSlot (slots, buffer, keys, order, kept, ops, state) {
  const n = order.length
  let at = state.at
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    const now = frozenClock()
    const slot = slots.get(keys[order[at]])
    const record = slot << 2
    const stored = buffer[record]
    buffer[record] = (stored > now ? stored : now) + 1000
    buffer[record + 2] = now
    kept[i & 0xff] = { slot, at: now }
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  return ns / ops
}

function loopLocalStore (store, keys, order, ops, state) {
  const n = order.length
  let at = state.at
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    store.incr(keys[order[at]], ignore, 1000, NEVER)
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  return ns / ops
}

function loopRlf (limiter, keys, order, ops, state) {
  const n = order.length
  let at = state.at
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) {
    limiter.consume(keys[order[at]]) // never rejects at this ceiling; the promise is the API's cost
    if (++at === n) at = 0
  }
  const ns = Number(process.hrtime.bigint() - start)
  state.at = at
  return ns / ops
}

/**
 * Runs `contenders` ({ name, run(ops, state) }) in `rounds` interleaved rounds, rotating which goes
 * first. Each contender's round lasts about `settings.roundMs` (its call count is set from
 * unmeasured warm-up rounds), so a slow contender does not stretch the run. Returns ns/op per
 * contender per round, and the calls per round.
 */
async function interleave (label, contenders, rounds) {
  const states = contenders.map(() => ({ at: 0, count: 0, refused: 0 }))
  const samples = contenders.map(() => [])
  const ops = contenders.map((contender, c) => {
    let count = 2000
    contender.run(count, states[c])
    if (settings.roundMs === 0) return count
    // The first calls include compiling them, so a count set from them alone is far too small (a
    // round of a few milliseconds, most of it spent warming the caches the other contenders cooled):
    // the count is set again from each warm-up round until one lasts about roundMs.
    for (let pass = 0; pass < 3; pass++) count = Math.max(2000, Math.round(settings.roundMs * 1e6 / contender.run(count, states[c])))
    return count
  })
  for (let round = 0; round < rounds; round++) {
    for (let k = 0; k < contenders.length; k++) {
      const c = (round + k) % contenders.length
      minorGc()
      await breathe()
      samples[c].push(contenders[c].run(ops[c], states[c]))
    }
    if (rounds >= 10 && (round + 1) % 5 === 0) log(`  ${label}: round ${round + 1}/${rounds}`)
  }
  return { samples, states, ops: Object.fromEntries(contenders.map((contender, c) => [contender.name, ops[c]])) }
}

/** Ratios of contender `c` to contender `base`, round by round. */
const ratios = (samples, c, base) => samples[c].map((ns, i) => ns / samples[base][i])

/**
 * `n` distinct key strings of one length, flattened and hashed before any contender sees them (a
 * Set does both), so that no contender pays for the first use of a string another one then reuses.
 */
function keysOf (n, prefix) {
  const keys = new Array(n)
  for (let i = 0; i < n; i++) keys[i] = `${prefix}-${String(i).padStart(7, '0')}`
  const hashed = new Set(keys)
  if (hashed.size !== n) throw new Error('bench: duplicate keys')
  return keys
}

async function liveKeys (n) {
  const rand = random(0x5eed + n)
  const keys = keysOf(n, 'client')
  const order = permutation(n, rand)
  const bits = refundBits(rand)
  const pace = new Pace({ perSecond: NEVER, now: frozenClock })
  const store = new LocalStore(false, false, Math.max(5000, n + 1))
  // Records that never expire (duration 0: no expiry and no timer), so that RLF's live through the
  // run too: with its default window of 1 s, every record expired between a key's visits at 1M keys
  // (and some at 10k), and RLF was measured building a record and a timer where the others update
  // theirs. (A window of an hour kept a timer per key, and the memory of the 1M keys with it.)
  const limiter = new RateLimiterMemory({ points: NEVER, duration: 0 })
  // Every key holds state before the first measured call. Each is visited twice in a row, so that
  // the JIT has seen, from the first calls on, the path the measured calls take (a key that holds
  // state) as often as the first visit's: after inserts alone, V8 sometimes optimized Pace#reserve
  // with the table's accessors and the Reservation constructor as out-of-line calls (frames of
  // their own under `perf`) and kept that code for the whole run, about 30 ns more a call in about
  // a third of runs. Two passes over the keys still left it so in one run of eighteen.
  for (let i = 0; i < n; i++) {
    for (let visit = 0; visit < 2; visit++) {
      pace.reserve(keys[i])
      store.incr(keys[i], ignore, 1000, NEVER)
      limiter.consume(keys[i])
    }
  }
  const slots = new Map(keys.map((key, slot) => [key, slot]))
  const kept = new Array(256).fill(null)
  // Written through before the rounds, as exchangepace's table is, so that no round pays for a
  // page of it touched for the first time.
  const buffer = new Float64Array(4 * n).fill(frozenClock())
  const contenders = [
    { name: 'exchangepace', run: (count, state) => loopPace(pace, keys, order, bits, count, state) },
    { name: 'LocalStore', run: (count, state) => loopLocalStore(store, keys, order, count, state) },
    { name: 'RLF memory', run: (count, state) => loopRlf(limiter, keys, order, count, state) },
    { name: 'clock + lookup', run: (count, state) => loopFloor(slots, keys, order, count, state) },
    { name: 'clock + lookup + object', run: (count, state) => loopFloorObject(slots, keys, order, kept, count, state) },
    { name: 'clock + lookup + slot + object', run: (count, state) => loopFloorSlot(slots, buffer, keys, order, kept, count, state) }
  ]
  return measureWorkload('live keys', n, settings.rounds, pace, store, contenders)
}

async function strangers (n) {
  const rand = random(0xf100d)
  const keys = keysOf(n, 'stranger')
  const order = permutation(n, rand)
  const pace = new Pace({ perSecond: 10 })
  const store = new LocalStore(false, false) // the plugin's default: an LRU of 5000
  const limiter = new RateLimiterMemory({ points: NEVER, duration: 1 })
  const contenders = [
    { name: 'exchangepace', run: (count, state) => loopPaceStrangers(pace, keys, order, count, state) },
    { name: 'LocalStore', run: (count, state) => loopLocalStore(store, keys, order, count, state) },
    { name: 'RLF memory', run: (count, state) => loopRlf(limiter, keys, order, count, state) }
  ]
  return measureWorkload('strangers', n, settings.strangerRounds, pace, store, contenders)
}

/**
 * Runs `contenders` (exchangepace, LocalStore, then the others) in interleaved rounds and
 * gathers a workload's figures: ns per call, ratios to LocalStore, what the stores hold after.
 */
async function measureWorkload (workload, n, rounds, pace, store, contenders) {
  const { samples, states, ops } = await interleave(`${n} ${workload}`, contenders, rounds)
  return {
    workload,
    keys: n,
    callsPerRound: ops,
    rounds,
    rowsAfter: pace.size,
    refused: states[0].refused,
    localStoreEntries: store.lru.size,
    nsPerOp: Object.fromEntries(contenders.map((c, i) => [c.name, summary(samples[i])])),
    ratioToLocalStore: Object.fromEntries(contenders.map((c, i) => [c.name, summary(ratios(samples, i, 1))]).filter(([name]) => name !== 'LocalStore')),
    samples: Object.fromEntries(contenders.map((c, i) => [c.name, samples[i]]))
  }
}

// The clock reads every contender makes once per call: what is left of a call's cost beyond them.
function loopPerformanceNow (ops) {
  let sum = 0
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) sum += realClock()
  const ns = Number(process.hrtime.bigint() - start)
  if (sum === -1) log('unreachable')
  return ns / ops
}

function loopDateNow (ops) {
  let sum = 0
  const start = process.hrtime.bigint()
  for (let i = 0; i < ops; i++) sum += Date.now()
  const ns = Number(process.hrtime.bigint() - start)
  if (sum === -1) log('unreachable')
  return ns / ops
}

async function clockReads () {
  const contenders = [
    { name: 'performance.now', run: ops => loopPerformanceNow(ops) },
    { name: 'Date.now', run: ops => loopDateNow(ops) }
  ]
  const { samples } = await interleave('clock reads', contenders, settings.rounds)
  return Object.fromEntries(contenders.map((c, i) => [c.name, summary(samples[i])]))
}

function print (result) {
  const { nsPerOp, ratioToLocalStore } = result
  log(`\n${result.workload}, ${result.keys} keys (${result.rounds} interleaved rounds; exchangepace rows after: ${result.rowsAfter}, refused: ${result.refused})`)
  log(table(['', 'ns/op median', 'p25-p75', 'ratio to LocalStore (min-max)'], [
    ['exchangepace', fmt(nsPerOp.exchangepace.median), `${fmt(nsPerOp.exchangepace.p25)}-${fmt(nsPerOp.exchangepace.p75)}`, ratioText(ratioToLocalStore.exchangepace)],
    ['LocalStore', fmt(nsPerOp.LocalStore.median), `${fmt(nsPerOp.LocalStore.p25)}-${fmt(nsPerOp.LocalStore.p75)}`, '1'],
    ...Object.keys(nsPerOp).filter(name => name !== 'exchangepace' && name !== 'LocalStore').map(name =>
      [name, fmt(nsPerOp[name].median), `${fmt(nsPerOp[name].p25)}-${fmt(nsPerOp[name].p75)}`, ratioText(ratioToLocalStore[name])])
  ]))
}

log(`bucket: ns per call, ${settings.rounds} interleaved rounds per size${globalThis.gc ? '' : ' (run with --expose-gc for a minor GC between rounds)'}`)
const clocks = await clockReads()
log(`clock reads: performance.now ${fmt(clocks['performance.now'].median)} ns, Date.now ${fmt(clocks['Date.now'].median)} ns (median)`)
const results = []
for (const n of settings.sizes) {
  const result = await liveKeys(n)
  print(result)
  results.push(result)
  gc()
}
const flood = await strangers(settings.strangers)
print(flood)
results.push(flood)

const target = results.find(r => r.workload === 'live keys' && r.keys === 10_000)
const file = writeResult(options, 'bucket', {
  description: 'ns per call: exchangepace reserve (+ refund on half the calls) vs @fastify/rate-limit LocalStore incr vs rate-limiter-flexible RateLimiterMemory consume',
  target: target
    ? { what: 'exchangepace <= 0.7x LocalStore ns/op at 10k live keys', ratio: target.ratioToLocalStore.exchangepace, met: target.ratioToLocalStore.exchangepace.median <= 0.7 }
    : null,
  clockReads: clocks,
  results
})
log(`\nbucket: wrote ${file}`)
