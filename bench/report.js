// Builds benchmarks.md and fidelity.svg from the JSON the parts wrote. Used by bench/run.js; run
// alone (`node bench/report.js [RESULTS_DIR] [DOCS_DIR]`) to rebuild the report without measuring.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BENCH_DIR, PARTS, fmt as f } from './shared/common.js'
import { failoverSection, failoverSummaryRow } from './parts/failover/report.js'
import { soakSection, soakSummaryRow, soakSvg } from './parts/soak/report.js'
import { capacitySection, capacitySummaryRows } from './parts/capacity/report.js'
import { latencySection, latencySummaryRow } from './parts/latency/report.js'
import { timeoutsSection, timeoutsSummaryRow } from './parts/timeouts/report.js'
import { faultsSection, faultsSummaryRow } from './parts/faults/report.js'
import { floodGatewaySection } from './parts/flood/report.js'
import { gatewaySection, gatewaySummaryRow } from './parts/gateway/report.js'
import { wrapProse } from './shared/wrap-prose.js'
import { mdTable } from './shared/md-table.js'

const x = (value, digits = 2) => `${f(value, digits)}x`
/** `0.52x (0.48-0.55)` from a summary, with the quartiles or the extremes as the spread. */
const spread = (s, digits = 2, how = 'iqr') => how === 'iqr'
  ? `${x(s.median, digits)} (${f(s.p25, digits)}-${f(s.p75, digits)})`
  : `${x(s.median, digits)} (${f(s.min, digits)}-${f(s.max, digits)})`
const verdict = met => met ? 'met' : '**missed**'

function readResults (dir) {
  const results = {}
  for (const part of PARTS) {
    const file = join(dir, `${part}.json`)
    if (existsSync(file)) results[part] = JSON.parse(readFileSync(file, 'utf8'))
  }
  return results
}

function machineSection (results) {
  const parts = Object.values(results)
  const machines = [...new Set(parts.map(r => JSON.stringify(r.machine)))].map(m => JSON.parse(m))
  const out = ['## Machine and commands', '']
  for (const m of machines) {
    out.push(`- OS: ${m.os}`, `- CPU: ${m.cpu}, ${m.cores} cores, ${m.memoryGB} GB`, `- Node.js ${m.node} (V8 ${m.v8})`, '')
  }
  out.push('Each part ran in its own process; the date, the exact command and the load average (1, 5, 15 min) when it finished:', '')
  out.push(mdTable(['part', 'date (UTC)', 'command', 'mode', 'load average'], parts.map(r => [
    r.part, r.date.replace('T', ' ').replace(/\.\d+Z$/, ''), `\`${r.command}\``, r.mode, r.loadavg.map(l => f(l, 2)).join(' ')
  ]), ['l', 'l', 'l', 'l', 'l']))
  out.push('', 'The machine is shared (other work runs on it at the same time), so absolute figures drift from run to run; the ratios are what the parts are built to hold steady: every comparison is between alternatives measured in the same process or the same run, in interleaved rounds.', '')
  return out.join('\n')
}

/** A list: `a, b and c`. */
const list = items => items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`
const count = value => Math.round(value).toLocaleString('en-US')
/** `1,234 more` or `1,234 fewer`. */
const moreOrFewer = value => `${count(Math.abs(value))} ${value >= 0 ? 'more' : 'fewer'}`

/**
 * The HTTP rows of the summary: instructions per accepted request against the floor of the
 * contract (the target), server CPU per request against @fastify/rate-limit's (the target), the
 * refusal and refund paths, and what an onEvent hook costs.
 */
function httpSummaryRows (http, instructions) {
  const rows = []
  const target = instructions?.target
  if (target) {
    const of = kind => instructions.results.find(r => r.kind === kind)
    const hook = target.hookRatioToFloor === null ? '' : `; with an onEvent hook ${x(target.hookRatioToFloor, 3)}`
    rows.push(['HTTP: instructions per accepted request (callgrind), against the floor of the contract (a no-op preHandler + the two quota headers in onSend)', `<= ${target.limit}x the floor, and below @fastify/rate-limit`,
      `exchangepace ${x(target.ratioToFloor, 3)} of the floor (${count(target.beyondFloor)} beyond it)${hook}; @fastify/rate-limit ${x(target.ratelimit / target.floor, 3)}; the floor ${x(of('floor').ratioToBare, 3)} of bare`, verdict(target.met)])
  }
  if (http?.target?.rateLimit) {
    for (const how of ['sequential', 'paired']) {
      const pace = http.target[how]
      const rateLimit = http.target.rateLimit[how]
      rows.push([`HTTP: server CPU per accepted request, ${how} rounds, as a ratio to bare`, 'below @fastify/rate-limit\'s',
        `exchangepace ${spread(pace, 3, 'range')}, @fastify/rate-limit ${spread(rateLimit, 3, 'range')}`, verdict(pace.median < rateLimit.median)])
    }
  }
  const paths = pathsSummary(http, instructions)
  if (paths) rows.push(paths)
  const hook = hookSummary(http, instructions)
  if (hook) rows.push(hook)
  return rows
}

/** The 429 path against @fastify/rate-limit's, and the refund path, in instructions and CPU. */
function pathsSummary (http, instructions) {
  const counted = instructions?.paths ?? []
  const timed = http?.sequential?.paths?.configs ?? []
  const find = (entries, kind, status) => entries.find(r => r.kind === kind && r.expectedStatus === status)
  const paceRefusal = find(counted, 'exchangepace', 429)
  const rateLimitRefusal = find(counted, 'ratelimit', 429)
  const cpuPace = find(timed, 'exchangepace', 429)
  const cpuRateLimit = find(timed, 'ratelimit', 429)
  if (!paceRefusal && !cpuPace) return null
  const parts = []
  if (paceRefusal && rateLimitRefusal) parts.push(`429, instructions per request: exchangepace ${count(paceRefusal.instructionsPerRequest)}, @fastify/rate-limit ${count(rateLimitRefusal.instructionsPerRequest)} (${x(paceRefusal.instructionsPerRequest / rateLimitRefusal.instructionsPerRequest, 3)})`)
  if (cpuPace && cpuRateLimit) parts.push(`429, CPU per request as a ratio to bare's 200 (sequential): exchangepace ${x(cpuPace.cpuRatio.median, 3)}, @fastify/rate-limit ${x(cpuRateLimit.cpuRatio.median, 3)}`)
  const refund = find(counted, 'exchangepace', 401)
  const cpuRefund = find(timed, 'exchangepace', 401)
  const refundText = [refund && `${x(refund.ratioToBaseline, 3)} in instructions`, cpuRefund && `${x(cpuRefund.cpuRatio.median, 3)} in CPU (sequential)`].filter(Boolean)
  if (refundText.length > 0) parts.push(`refund (a wrong secret, 401) against bare's 401: ${refundText.join(', ')}`)
  const met = (!paceRefusal || !rateLimitRefusal || paceRefusal.instructionsPerRequest < rateLimitRefusal.instructionsPerRequest) &&
    (!cpuPace || !cpuRateLimit || cpuPace.cpuRatio.median < cpuRateLimit.cpuRatio.median)
  return ['HTTP: the refusal (429) and refund paths', '429 below @fastify/rate-limit\'s; the refund for reference', parts.join('; '), verdict(met)]
}

/** What an onEvent hook (a no-op counter) adds to each path, in instructions and CPU. */
function hookSummary (http, instructions) {
  const parts = []
  const added = (entries, status, metric) => {
    const hook = entries.find(r => r.kind === 'exchangepace-hook' && r.expectedStatus === status)
    const none = entries.find(r => r.kind === 'exchangepace' && r.expectedStatus === status)
    return hook && none ? metric(hook, none) : null
  }
  const counted = [...(instructions?.results ?? []), ...(instructions?.paths ?? [])]
  const timed = [...(http?.sequential?.main?.configs ?? []), ...(http?.sequential?.paths?.configs ?? [])]
  const label = { 200: 'accepted', 401: 'refunded', 429: 'refused' }
  const byPath = [200, 401, 429].map(status => {
    const instr = added(counted, status, (h, n) => `${h.instructionsPerRequest - n.instructionsPerRequest >= 0 ? '+' : ''}${count(h.instructionsPerRequest - n.instructionsPerRequest)} instructions`)
    const cpu = added(timed, status, (h, n) => `CPU ${x(h.cpuRatio.median / n.cpuRatio.median, 3)} of exchangepace's without it`)
    return instr || cpu ? `${label[status]}: ${[instr, cpu].filter(Boolean).join(', ')}` : null
  }).filter(Boolean)
  parts.push(...byPath)
  if (parts.length === 0) return null
  return ['HTTP: an onEvent hook set (a no-op counter), against none', 'for reference: without a hook the path is unchanged', `per request: ${list(parts)} (the hook is called on refusals and refunds only)`, '']
}

function summarySection (results) {
  const rows = []
  const { bucket, memory, http, fidelity, flood, redis, instructions } = results
  if (bucket?.target?.worst) {
    const { worst, belowToAtLimit } = bucket.target
    rows.push(['Bucket cost, the worst workload at 10k and 1M keys, either visit order', '<= 1x LocalStore `incr`; below rate no slower than at the limit',
      `${spread(worst.ratio)} of LocalStore (${worst.workload}, ${worst.keys.toLocaleString('en-US')} keys, ${worst.order}); below rate / at the limit at most ${spread(belowToAtLimit.ratio)} (${belowToAtLimit.keys.toLocaleString('en-US')} keys, ${belowToAtLimit.order}), where two identical at-the-limit paces read ${spread(belowToAtLimit.atLimitAgain)}`,
      verdict(bucket.target.met)])
  }
  if (memory) {
    const live = memory.live
    const worst = live.reduce((a, b) => b.exchangepace.perKey > a.exchangepace.perKey ? b : a)
    rows.push(['Heap per live key', '<= 64 bytes', `${f(live[0].exchangepace.perKey)} B at ${live[0].keys.toLocaleString('en-US')} keys` +
      (worst !== live[0] ? `; ${f(worst.exchangepace.perKey)} B at ${worst.keys.toLocaleString('en-US')} (just past a doubling)` : ''),
    live[0].exchangepace.perKey <= 64 ? (worst.exchangepace.perKey <= 64 ? 'met' : 'met at 1M; **missed** past a doubling') : verdict(false)])
    const fl = memory.flood.exchangepace
    rows.push([`${fl.ids.toLocaleString('en-US')} refunded ids`, '0 rows, heap back within a few MB', `${fl.rows} rows, ${f(fl.heapGrowthMB, 2)} MB`, verdict(fl.rows === 0 && Math.abs(fl.heapGrowthMB) < 4)])
    const sp = memory.spenders
    rows.push([`${sp.ids.toLocaleString('en-US')} spenders, one horizon later`, '0 rows', `${sp.rowsAfterHorizon} rows, ${f(sp.heapGrowthAfterHorizonMB, 2)} MB`, verdict(sp.rowsAfterHorizon === 0)])
  }
  rows.push(...httpSummaryRows(http, instructions))
  if (redis?.target) {
    rows.push(['Redis: server CPU per request vs @fastify/rate-limit\'s Redis store', '<= 1x', `sequential ${spread(redis.target.cpu.sequential, 3, 'range')}, paired ${spread(redis.target.cpu.paired, 3, 'range')}`, verdict(redis.target.cpu.sequential.median <= 1 && redis.target.cpu.paired.median <= 1)])
    rows.push(['Redis: peak requests/s vs @fastify/rate-limit\'s Redis store', '>= 1x', `sequential ${spread(redis.target.requestsPerSecond.sequential, 3, 'range')}`, verdict(redis.target.requestsPerSecond.sequential.median >= 1)])
  }
  const ofKind = kind => instructions?.results?.find(r => r.kind === kind)
  if (ofKind('exchangepace-redis') && ofKind('ratelimit-redis')) {
    const ratio = ofKind('exchangepace-redis').instructionsPerRequest / ofKind('ratelimit-redis').instructionsPerRequest
    rows.push(['Redis: Node-side instructions per request vs @fastify/rate-limit\'s Redis store (callgrind)', '<= 1x', x(ratio, 3), verdict(ratio <= 1)])
  }
  if (redis?.redisCpuPerRequestMicros) {
    const cpu = redis.redisCpuPerRequestMicros
    rows.push(['Redis: Redis\'s own CPU per request', 'for reference', `exchangepace ${f(cpu['exchangepace-redis'].median, 2)} µs, @fastify/rate-limit ${f(cpu['ratelimit-redis'].median, 2)} µs`, ''])
  }
  if (results.capacity && !results.capacity.skipped) rows.push(...capacitySummaryRows(results.capacity))
  if (redis?.flapping?.schedules) {
    const schedules = redis.flapping.schedules
    const within = schedules.every(s => s.mostInOneSecond <= s.oneSecondBound && s.admitted <= s.admittedBound)
    rows.push([`Redis flapping: one replica at ${redis.flapping.rate}/s while Redis stalls`, `<= ${schedules[0].oneSecondBound} in any second (the rate holds per replica)`,
      schedules.map(s => `${s.mostInOneSecond} in a second, ${s.admitted} of ${s.admittedBound} in ${s.seconds} s (stopped ${s.stopMs} ms of every ${s.everyMs})`).join('; '), verdict(within)])
  }
  if (fidelity) {
    const edge = fidelity.schedules['window edge']
    rows.push(['Fidelity (10/s)', '<= rate x (1 + w) in any w-second window', `1 s window, window-edge schedule: exchangepace ${edge.exchangepace.maxInWindow[1]}, @fastify/rate-limit ${edge['@fastify/rate-limit'].maxInWindow[1]}; 10 ms window: ${edge.exchangepace.maxInWindow[0.01]} vs ${edge['@fastify/rate-limit'].maxInWindow[0.01]}`, verdict(fidelity.target.met)])
  }
  if (flood) {
    const e = flood.results.exchangepace
    const r = flood.results['@fastify/rate-limit']
    rows.push(['Key flood', "victim's pace untouched", `admitted over rate: exchangepace ${e.admittedOverRate}, @fastify/rate-limit ${r.admittedOverRate} (of ${r.victimAllowed} allowed)`, verdict(flood.target.met)])
    for (const row of flood.borrowedName?.cases ?? []) {
      const refused = name => `${row.results[name].victimRefused} of ${row.results[name].victim}`
      rows.push([`Borrowed name: victim at ${row.clientPerSecond}/s, ${row.strangersPerSecond} strangers/s naming it`, 'victim refused: for reference', `exchangepace ${refused('exchangepace')}, reference ${refused('reference')}, @fastify/rate-limit ${refused('@fastify/rate-limit')}`, ''])
    }
  }
  if (results.guessing) rows.push(guessingSummaryRow(results.guessing))
  if (results.failover && !results.failover.skipped) rows.push(failoverSummaryRow(results.failover))
  if (results.soak) rows.push(soakSummaryRow(results.soak))
  if (results.latency && !results.latency.skipped) rows.push(latencySummaryRow(results.latency))
  if (results.timeouts && !results.timeouts.skipped) rows.push(timeoutsSummaryRow(results.timeouts))
  if (results.faults && !results.faults.skipped) rows.push(faultsSummaryRow(results.faults))
  if (results.gateway) rows.push(gatewaySummaryRow(results.gateway))
  return ['## Summary', '', mdTable(['question', 'target', 'measured (median, spread)', ''], rows, ['l', 'l', 'l', 'l']), ''].join('\n')
}

function bucketSection (bucket) {
  const out = ['## 1. Bucket cost', '',
    'Nanoseconds per call, in one process: `Pace#reserve` (plus `Reservation#refund` where the workload refunds) against @fastify/rate-limit\'s `LocalStore#incr` (its LRU sized to hold every key) and rate-limiter-flexible\'s `RateLimiterMemory#consume` (plus `#reward` where the workload refunds), over the same key strings visited in the same order. At each size and visit order the contenders of the four workloads below and three floors run in interleaved rounds (the order shuffled anew each round, a minor GC before each). In each round every contender makes the same number of calls on the same keys, from the same place in the visit order (a round of the median contender lasts about 40 ms): at 1M keys the cost of a call depends on where in the order it falls, about four times as much on the keys seen first as on the last (how their strings and Map entries lie in memory), so contenders that each walked the order at their own speed were compared on different keys in every round, which moved the 1M round-robin ratios by 0.3x from run to run (docs/benchmark-history.md). The figure is the median round, the ratio the median of the per-round ratios to LocalStore, with the quartiles of those ratios in brackets. Keys are built, flattened and hashed before any contender sees them, and before the rounds every contender visits each key twice in a row, so that every key holds what the workload finds.',
    '',
    'Every pace reads its default clock (`performance.now`): no clock is simulated. What each visit finds is set by the pace\'s rate alone:',
    '',
    '- **below rate**: every visit finds the key\'s bucket refilled since its last one, nothing refunded: a client calling less often than its rate allows, the common path. The pace refills a unit every 10 ns over a window of 100 s (`{ limit: 1e10, window: 100 }`), so every bucket is full again at its key\'s next visit, and every key spent within the horizon (at 1M keys a key\'s visits are seconds apart). LocalStore\'s window is 0 ms, so every `incr` finds its key\'s window over and starts a new one; RLF\'s records last 1 ms, its shortest, so at 1 key (and some calls at 10k) they are still alive.',
    '- **below rate, refunds**: the same, with a refund (RLF: a reward) on a pseudo-random half of the calls. LocalStore has nothing to refund: it is the same contender as below rate.',
    '- **at the limit**: every visit finds its key\'s bucket still refilling, and none is refused: a bucket of 1e6 units (1e9 at 1 key) refilled over 3e7 s, so that a unit takes longer to come back than the spacing of a key\'s visits. LocalStore\'s window is an hour and RLF\'s records never expire (duration 0): both find the key\'s state alive.',
    '- **live keys**: at the limit, with a refund on a pseudo-random half of the calls (a refund there never empties a row). Until the target covered every workload (2026-12-05) this was the only workload beside strangers, on a clock scaled by 1e-12.',
    '- **strangers**: 1M ids that hold nothing, as in a flood of declared ids: exchangepace (10/s) reserves and refunds each one (the wrong-secret path: a row is inserted, then deleted); LocalStore and RLF run at their defaults (an LRU of 5000, a window of 1 s).',
    '',
    'Each workload runs in two visit orders: **round-robin** (the keys in the order they were first seen, as the tables hold them) and **shuffled** (one fixed pseudo-random permutation). The target: every workload at 10k and 1M keys, in both orders, at most 1x LocalStore, and below rate no slower than at the limit (the median of the per-round ratios of exchangepace\'s two contenders, which run in the same rounds). At 1 key both are mostly a clock read: reported, not judged.',
    '']
  const keysText = r => r.keys.toLocaleString('en-US')
  out.push(mdTable(['workload', 'keys', 'order', 'exchangepace ns', 'LocalStore ns', 'RLF memory ns', 'exchangepace / LocalStore', 'RLF / LocalStore', 'rows after'], bucket.results.map(r => [
    r.workload, keysText(r), r.order, f(r.nsPerOp.exchangepace.median), f(r.nsPerOp.LocalStore.median), f(r.nsPerOp['RLF memory'].median),
    spread(r.ratioToLocalStore.exchangepace), spread(r.ratioToLocalStore['RLF memory']), r.rowsAfter.toLocaleString('en-US')
  ]), ['l', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r']))
  const below = bucket.results.filter(r => r.ratioToAtLimit)
  out.push('', `Below rate against at the limit, exchangepace's own calls in the same rounds (median of per-round ratios, quartiles), and beside it, as the gauge of the rounds' noise, a second at-the-limit pace identical to the first against it: ${below.map(r => `${spread(r.ratioToAtLimit)} (identical paces: ${spread(r.atLimitAgain)}) at ${keysText(r)} keys ${r.order}`).join('; ')}. Below rate is judged no slower when its median is at most 1 or at most the gauge's upper quartile: the two paths do the same work per call but one stamp written. Calls refused: ${bucket.results.reduce((n, r) => n + r.refused, 0)}.`)
  const clocks = bucket.clockReads
  const clockText = clocks ? `on this machine one read of \`performance.now\` costs ${f(clocks['performance.now'].median)} ns and one of \`Date.now\` ${f(clocks['Date.now'].median)} ns (medians of the same kind of rounds), a large part of every call at 1 key` : 'every call reads a clock once'
  out.push('', `What the figures are made of: ${clockText}. Beyond that, LocalStore does two Map lookups (an LRU \`get\` and \`set\`) and moves the entry to the tail of its list; exchangepace does one Map lookup (key to slot) and reads and writes the slot's 32 bytes in one buffer, and allocates the returned reservation. At 1M keys every structure misses the CPU caches on most calls and the figures are dominated by memory latency: there the Map lookup of the key alone costs about what LocalStore's whole call does (the floor below). RateLimiterMemory allocates a promise and a result object per call, and a timer per key per window.`, '')
  out.push(...bucketFloor(bucket), ...bucketHistory())
  return out.join('\n')
}

/** The floor table: what any per-key store must do, measured in the same rounds as the workloads. */
function bucketFloor (bucket) {
  const slotFloor = 'clock + lookup + slot + object'
  const floorRows = bucket.results.filter(r => r.workload === 'live keys' && r.nsPerOp[slotFloor])
  if (floorRows.length === 0) return []
  const out = ['**The floor.** Three more contenders run in the same rounds: the clock exchangepace reads (`performance.now`) plus one `Map#get` of the key, which every per-key store does; the same plus one small object allocated per call and kept a moment, as a caller keeps its reservation; and the same again plus a read and a write of the key\'s slot in a typed array (the bucket\'s time, moved one unit on, and the time of the call), which any store that keeps per-key numbers beside the Map\'s own entry pays, as exchangepace does. Ratios are to LocalStore at the limit (its live path); exchangepace\'s column is the worst of its four workloads at that size and order.', '']
  const worstAt = r => bucket.results.filter(w => w.keys === r.keys && w.order === r.order && w.workload !== 'strangers')
    .reduce((a, b) => b.ratioToLocalStore.exchangepace.median > a.ratioToLocalStore.exchangepace.median ? b : a)
  out.push(mdTable(['keys', 'order', 'clock + lookup / LocalStore', '+ object / LocalStore', '+ slot + object / LocalStore', 'exchangepace, worst workload / LocalStore'], floorRows.map(r => [
    r.keys.toLocaleString('en-US'), r.order, spread(r.ratioToLocalStore['clock + lookup']), spread(r.ratioToLocalStore['clock + lookup + object']), spread(r.ratioToLocalStore[slotFloor]),
    `${spread(worstAt(r).ratioToLocalStore.exchangepace)} (${worstAt(r).workload})`
  ]), ['r', 'l', 'r', 'r', 'r', 'l']), '')
  return out
}

/** What the common path cost before full rows were kept for a horizon, and what dominated it. */
function bucketHistory () {
  return ['**Before full rows were kept for a horizon** (the same harness, `--quick`, 2026-12-05, on the build before the change): below rate cost 1.84x LocalStore at 10k keys round-robin and 1.29x shuffled, with refunds 2.22x and 1.44x, while at the limit cost 0.81x and 0.79x: below rate was 2.5x and 2.1x exchangepace\'s own at-the-limit calls. The sweep deleted every row that refill had made full, so a key calling below its rate lost its row between visits and inserted it again (a Map delete and set per call, and a sweep every 16 inserts once a sweep had emptied the table): a CPU profile of below-rate reserves (`node --cpu-prof`, 10k keys round-robin) put 18.8% in `SlotTable#remove`, 18.1% in `#insert` and 8.6% in the sweep, and callgrind counted 1,933 instructions per call against 704 at the limit. At 1M keys the churn made below rate look cheap (0.40x round-robin): the table held a dozen rows, which stayed in the caches. Now a row stays while its key spent within the horizon (docs/design.md, "The memory bound"); below rate counts 673 instructions per call, and the profile is the clock (31%), the Map lookup (24%) and `reserve` itself (26%).', '',
    'The live-keys ratio moved with the machine and with the optimizer before: from 0.81x to 0.99x at 10k live keys over 2026-12-03, partly from V8 optimizing `Pace#reserve` on inserts alone and keeping out-of-line calls (fixed by visiting each key twice before the rounds); docs/benchmark-history.md keeps that account. The strangers workload moves with LocalStore, which runs in one of two modes from run to run (0.79-0.92 µs or 1.35-1.77 µs a call at 1M strangers over nine runs on 2026-12-03); what decides it was not found.', '']
}

function memorySection (memory) {
  const out = ['## 2. Memory', '',
    'Run with `--expose-gc`; each figure is the difference of `heapUsed + arrayBuffers` (exchangepace keeps its numbers in typed arrays, outside the V8 heap) between two readings that each follow full collections. For bytes per key the key strings exist before the first reading and after the last, so they are not counted. The rate is 7.3/s and the clock a fixed fractional millisecond, so every stored number is a real double.',
    '']
  out.push(mdTable(['live keys', 'exchangepace B/key', 'LocalStore B/key', 'RLF memory B/key'], memory.live.map(r => [
    r.keys.toLocaleString('en-US'), f(r.exchangepace.perKey), f(r.LocalStore.perKey), f(r['RLF memory'].perKey)
  ])))
  const slotBytes = keys => 32 * Math.max(16, 2 ** Math.ceil(Math.log2(keys))) / keys
  const worst = memory.live.reduce((a, b) => b.exchangepace.perKey > a.exchangepace.perKey ? b : a)
  out.push('', `exchangepace holds per key one Map entry (key to slot index, a small integer V8 keeps unboxed) and one slot of 32 bytes in one buffer: the time the bucket is full again, and for refunds a stamp for its run of spending, the time of its latest grant (8 bytes each), the count of its run's grants and which of the 32 latest were refunded (4 bytes each); a free slot holds the index of the next free one, so freeing costs nothing more. V8's Map stores an entry in 3 pointers (24 bytes) plus half a bucket pointer, and it grows by doubling, as the slot buffer does; so the cost per key is lowest just below a power of two (1M keys fill 95% of 2^20 slots) and highest just past one (2^19 + 1 keys leave the tables half empty). At ${worst.keys.toLocaleString('en-US')} keys the slot buffer accounts for ${f(slotBytes(worst.keys))} of the ${f(worst.exchangepace.perKey)} bytes and the Map for the other ${f(worst.exchangepace.perKey - slotBytes(worst.keys))}, which no JavaScript code controls.`, '')
  const fl = memory.flood
  const sp = memory.spenders
  out.push(mdTable(['flood', 'ids', 'rows left', 'heap growth'], [
    ['exchangepace, every id refunded', fl.exchangepace.ids.toLocaleString('en-US'), fl.exchangepace.rows, `${f(fl.exchangepace.heapGrowthMB, 2)} MB`],
    ['LocalStore (default LRU of 5000)', fl.exchangepace.ids.toLocaleString('en-US'), fl.LocalStore.rows.toLocaleString('en-US'), `${f(fl.LocalStore.heapGrowthMB, 2)} MB`],
    ['RateLimiterMemory (1 s window, records expire by timer)', fl.exchangepace.ids.toLocaleString('en-US'), fl['RLF memory'].rows.toLocaleString('en-US'), `${f(fl['RLF memory'].heapGrowthMB, 2)} MB`],
    ['exchangepace, every id spent', sp.ids.toLocaleString('en-US'), sp.rowsAfterSpending.toLocaleString('en-US'), `${f(sp.heapGrowthWhileLiveMB, 2)} MB (rows and the ids themselves)`],
    ['... one horizon (1 s) later, after the next reserve', sp.ids.toLocaleString('en-US'), sp.rowsAfterHorizon, `${f(sp.heapGrowthAfterHorizonMB, 2)} MB`]
  ], ['l', 'r', 'r', 'r']))
  out.push('', 'The ids of the floods are made one by one, as requests would bring them. A refunded stranger leaves a full bucket, which is no row; spenders leave rows for at most one horizon, and the sweep inside the next `reserve` removes them. LocalStore stays bounded by evicting, which is what the key flood below exploits.', '')
  return out.join('\n')
}

function httpSection (http, bucketNs) {
  const seq = http.sequential
  const par = http.paired
  const out = ['## 3. HTTP cost', '',
    `The same token route (\`POST /token\`, @fastify/formbody, a \`client_credentials\` body with \`client_secret_post\`) served six ways, each by its own server process on loopback: **bare**; **empty hooks** (a no-op preHandler and onResponse on the route: the hooks the design card names, with nothing in them, and a gauge of each run's noise; exchangepace itself settles in onSend and adds no onResponse); **floor** (a no-op preHandler and an onSend that writes the two quota headers the RateLimit draft asks for, with fixed values: exchangepace's hooks with no pace in them, the least any plugin of this shape that sends those headers can cost); **exchangepace** (per declared client id, spend 'accepted', a rate never reached); **exchangepace, onEvent hook set** (the same with an \`onEvent\` hook that counts events, called on refusals and refunds); **@fastify/rate-limit** (keyed by the body's client_id in preHandler, default LocalStore). ${http.pinned ? 'Servers are pinned to core 0 and the load generator (autocannon) to core 1 with `taskset`.' : 'taskset was not available: nothing was pinned.'} A server reads \`process.cpuUsage()\` (user + system) when told over IPC that a round starts and ends, outside the measured route, and counts the requests it received. Every repetition starts fresh server processes and warms each configuration up.`,
    '',
    `- **sequential**: each configuration in turn has the core for ${http.roundSeconds} s under autocannon (${seq.main.load.connections} connections, ${seq.main.load.pipelining} request at a time on each), the order alternating between rounds; a round's ratio is against bare's figure in the same round.`,
    `- **paired**: a configuration and its baseline are loaded at the same time for ${http.roundSeconds} s, both on core 0, one autocannon each (${par.main.load.connections} connections, ${par.main.load.pipelining} requests pipelined on each, so that both stay busy); whatever else the machine runs in that second weighs on both alike. Pipelining makes a request cheaper (fewer reads and writes), so a plugin's share of it, and the ratio, is if anything larger than with one request at a time.`,
    '',
    'Per repetition, the median of the per-round ratios; the tables give the median over repetitions with their range in brackets, and the median and quartiles of every per-round ratio of the run (all repetitions together).',
    '']
  const sequentialTable = (g, title) => {
    out.push(`**${title}**, sequential (${g.repetitions} repetitions x ${g.rounds} rounds):`, '')
    out.push(mdTable(['configuration', 'CPU µs/req', 'CPU / baseline', 'all rounds: median (quartiles)', 'req/s', 'req/s / baseline', 'server CPU use', 'responses'], g.configs.map(c => {
      const isBase = c.name === c.baseline
      return [
        c.name, f(c.cpuPerRequestMicros.median), isBase ? '1 (baseline)' : spread(c.cpuRatio, 3, 'range'),
        isBase ? '' : spread(c.cpuRatio.rounds, 3),
        f(c.requestsPerSecond.median, 0), isBase ? '1' : spread(c.rpsRatio, 3, 'range'),
        `${f(100 * c.utilization.median, 0)}%`,
        Object.entries(c.statuses).map(([code, n]) => `${code}: ${n.toLocaleString('en-US')}`).join(', ')
      ]
    }), ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'l']))
    out.push('')
  }
  const pairedTable = (g, title) => {
    out.push(`**${title}**, paired (${g.repetitions} repetitions x ${g.rounds} rounds):`, '')
    out.push(mdTable(['configuration', 'baseline', 'CPU µs/req (baseline)', 'CPU / baseline', 'all rounds: median (quartiles)', 'responses'], g.pairs.map(p => [
      p.name, p.baseline, `${f(p.cpuPerRequestMicros.median)} (${f(p.baselineCpuPerRequestMicros.median)})`, spread(p.cpuRatio, 3, 'range'),
      spread(p.cpuRatio.rounds, 3),
      Object.entries(p.statuses).map(([code, n]) => `${code}: ${n.toLocaleString('en-US')}`).join(', ')
    ]), ['l', 'l', 'r', 'r', 'r', 'l']))
    out.push('')
  }
  sequentialTable(seq.main, 'Accepted exchanges (200)')
  const beyond = seq.main.configs.filter(c => c.cpuRatioToEmptyHooks)
  if (beyond.length > 0) {
    out.push(`Against the empty hooks instead of bare (the same sequential rounds): ${beyond.map(c => `${c.name} ${spread(c.cpuRatioToEmptyHooks, 3, 'range')}`).join(', ')}.`, '')
  }
  pairedTable(par.main, 'Accepted exchanges (200)')
  sequentialTable(seq.paths, 'The refund path and the 429 path')
  pairedTable(par.paths, 'The refund path and the 429 path')
  const pace = seq.main.configs.find(c => c.kind === 'exchangepace')
  const bare = seq.main.configs.find(c => c.kind === 'bare')
  const live = bucketNs?.results.find(r => r.workload === 'live keys' && r.keys === 10_000 && r.order === 'shuffled')
  if (pace && bare && live) {
    const extraMicros = pace.cpuPerRequestMicros.median - bare.cpuPerRequestMicros.median
    out.push(`The bucket is a small part of the difference: one \`reserve\` (with a refund on half the calls) costs ${f(live.nsPerOp.exchangepace.median)} ns at 10k live keys in part 1, against the ${f(extraMicros, 1)} µs per request exchangepace adds to bare here (medians). What dominates is what Fastify and Node do for the contract: each response header costs its validation, its place in the header block and its bytes on the socket (the floor configuration sends the two quota headers and nothing else), and each hook its runner (for onResponse, response listeners attached and removed on every request). Part 7 (instructions per request, which the machine's noise moves far less) separates them, and judges exchangepace against the floor: CPU time, whose empty-hooks gauge moves by several percent from run to run, is no judge of a step of 3%, and its target is only to stay below @fastify/rate-limit.`, '')
  }
  out.push('The refund path (wrong secret: the handler sets `request.pace.outcome = \'rejected\'` and the unit is refunded) is compared with bare answering the same 401; each 429 path (`POST /token-tight` at 1/s: all but about one request a second refused) with bare answering 200 on that route. "server CPU use" is the share of the round the server spent on the CPU: well below 100% means the load generator, or other work on the machine, held it back, and the sequential figures then also carry the cost of waking up for fewer requests at a time.', '')
  return out.join('\n')
}

function fidelitySection (fidelity, svgName) {
  const out = ['## 4. Fidelity', '',
    `One client at ${fidelity.rate}/s, in simulated time through the real plugins and routes (\`inject\`; exchangepace gets the clock as its \`now\` option, @fastify/rate-limit's Date.now is replaced), so the worst moments are hit exactly and every run gives the same figures. **window edge**: one request opens @fastify/rate-limit's window (t = 50 ms), a burst fires 1 ms before it ends (t = 1049 ms) and another as it rolls over (t = 1050 ms), and again every 2 s; **greedy**: the client fires until refused every 10 ms. The most requests admitted in any half-open window of w seconds, against exchangepace's bound of rate x (1 + w) (a full bucket of one second, then the refill):`,
    '']
  for (const [schedule, byLibrary] of Object.entries(fidelity.schedules)) {
    out.push(`**${schedule}** (${fidelity.seconds} s):`, '')
    out.push(mdTable(['window w', 'bound rate x (1 + w)', 'exchangepace', '@fastify/rate-limit'], fidelity.widths.map(w => [
      `${w} s`, f(fidelity.rate * (1 + w), 1), byLibrary.exchangepace.maxInWindow[w], byLibrary['@fastify/rate-limit'].maxInWindow[w]
    ])))
    out.push('', `Admitted in all: exchangepace ${byLibrary.exchangepace.admitted}, @fastify/rate-limit ${byLibrary['@fastify/rate-limit'].admitted}.`, '')
  }
  out.push(`![Requests admitted per 100 ms for one client at 10/s, exchangepace against @fastify/rate-limit](${svgName})`, '')
  out.push('At a window edge a fixed window admits nearly twice its limit within a millisecond, and does it again at every edge the client sets up. exchangepace admits a full bucket (one second of the rate) after a silence and the rate after that; its bound is reached only by the greedy client, whose first second is the bucket plus its refill, never more.', '')
  return out.join('\n')
}

function redisSection (redis) {
  const out = ['## 6. Redis', '']
  if (redis.skipped) {
    out.push(`Skipped in the latest run: ${redis.skipped}.`, '')
    return out.join('\n')
  }
  const seq = redis.sequential.main
  const par = redis.paired.main
  out.push(`The token route with its pace shared through Redis ${redis.redis.version} at ${redis.redis.url}: exchangepace's \`RedisStore\` (one Lua script per reservation, on Redis TIME) against @fastify/rate-limit's Redis store (one script per request for its fixed window), each through its own ioredis client with auto-pipelining on, in the same rounds as part 3 (sequential and paired; the baseline is @fastify/rate-limit). The CPU is the Node server's only: Redis's own is not counted, and Redis runs unpinned, beside the server or the load generator. A wrong secret on exchangepace adds the refund script, sent without waiting for it.`, '')
  out.push(`Sequential (${seq.repetitions} repetitions x ${seq.rounds} rounds of ${redis.roundSeconds} s):`, '')
  out.push(mdTable(['configuration', 'CPU µs/req', 'CPU / baseline', 'req/s', 'req/s / baseline', 'responses'], seq.configs.map(c => {
    const isBase = c.name === c.baseline
    return [c.name, f(c.cpuPerRequestMicros.median), isBase ? '1 (baseline)' : spread(c.cpuRatio, 3, 'range'), f(c.requestsPerSecond.median, 0),
      isBase ? '1' : spread(c.rpsRatio, 3, 'range'), Object.entries(c.statuses).map(([code, n]) => `${code}: ${n.toLocaleString('en-US')}`).join(', ')]
  }), ['l', 'r', 'r', 'r', 'r', 'l']))
  out.push('', `Paired (${par.repetitions} repetitions x ${par.rounds} rounds):`, '')
  out.push(mdTable(['configuration', 'CPU µs/req (baseline)', 'CPU / baseline', 'all rounds: median (quartiles)'], par.pairs.map(p => [
    p.name, `${f(p.cpuPerRequestMicros.median)} (${f(p.baselineCpuPerRequestMicros.median)})`, spread(p.cpuRatio, 3, 'range'), spread(p.cpuRatio.rounds, 3)
  ]), ['l', 'r', 'r', 'r']))
  const cpu = redis.redisCpuPerRequestMicros
  if (cpu) {
    const rl = cpu['ratelimit-redis']
    const ep = cpu['exchangepace-redis']
    out.push('', `Redis's own CPU per accepted request (INFO cpu before and after ${cpu.requestsPerRound.toLocaleString('en-US')} requests, the stores alternating; median and range): @fastify/rate-limit ${f(rl.median, 2)} µs (${f(rl.min, 2)}-${f(rl.max, 2)}), exchangepace ${f(ep.median, 2)} µs (${f(ep.min, 2)}-${f(ep.max, 2)}). exchangepace's script does more on the server: it reads Redis TIME (one clock for every replica), reads the key, and writes it back with a new expiry on every reservation, while a fixed window increments a counter and reads its TTL. With a rate no client reaches, as here (one unit refills in a microsecond), each reservation finds its bucket full again and writes the key with a new expiry, and the key expires after each pause of a millisecond: the most a reservation can cost Redis. Part 7 counts Redis's instructions per script call and says what they are made of.`)
  }
  out.push('', 'On the Node side both stores spend most of a request in ioredis and in the socket writes to Redis; the plugins\' own work is a small share, so the two land close together, and the run-to-run spread is of the same size as the difference.', '')
  const flapping = redis.flapping
  if (flapping?.skipped) out.push(`The flapping measurement was skipped: ${flapping.skipped}.`, '')
  else if (flapping) {
    out.push(`**While Redis flaps.** A redis-server of the part's own is stopped (SIGSTOP) for part of every period and continued, while one replica (exchangepace's RedisStore, timeoutMs ${flapping.timeoutMs}, retryMs ${flapping.retryMs}) serves ${flapping.inFlight} requests in flight for one client id at ${flapping.rate}/s. Every stall past timeoutMs sends requests to the per-replica fallback, and Redis's next answer brings them back; the store paces every request in the replica's memory before Redis (docs/stores.md, "The fallback is always warm"), so neither switch finds a full bucket. A bucket of the rate admits at most rate x (1 + seconds) in all and 2 x rate in any second; admissions are timed as their answers came.`, '')
    out.push(mdTable(['Redis stopped', 'stalls', 'admitted', 'at most', 'most in any second', 'at most'], flapping.schedules.map(s => [
      `${s.stopMs} ms of every ${s.everyMs} ms, for ${s.seconds} s`, String(s.stalls), String(s.admitted), String(s.admittedBound), String(s.mostInOneSecond), String(s.oneSecondBound)
    ]), ['l', 'r', 'r', 'r', 'r', 'r']))
    out.push('', 'The build before the in-memory pace went in front of Redis (e2ea3f0), measured by this code on 2026-12-03: 168, 173 and 134 admitted of 90 under these three schedules, and 29, 33 and 23 in a second: each switch found the other side\'s bucket full.', '')
  }
  return out.join('\n')
}

function instructionsSection (instructions) {
  const out = ['## 7. Instructions per request', '']
  if (instructions.skipped) {
    out.push(`Skipped in the latest run: ${instructions.skipped}.`, '')
    return out.join('\n')
  }
  const requests = instructions.results[0].requests.toLocaleString('en-US')
  out.push(`The servers of part 3 under valgrind's callgrind (${instructions.valgrind}), which counts the instructions a process executes in user space, one server at a time: each answered ${instructions.warmup.toLocaleString('en-US')} requests twice to warm up, then the counters were zeroed and ${requests} more counted (bench/shared/callgrind.js). The count depends far less than CPU time on what else the machine runs, so it judges a step of a few percent that the CPU-time rounds of part 3 cannot; but it is not fixed: what the JIT compiles, inlines and collects moves it by about 1% between runs of one build, and the same server has counted up to a few percent apart in separate runs. A major GC (about once in 289,000 requests) adds thousands of instructions per request to the window it falls in, so a count whose window held one is made again in a fresh server, its window starting after a major GC ("servers counted"; the last count is kept). It leaves out the kernel (the socket reads and writes), a good share of a request's CPU time, so its ratios are larger than those of part 3. How the method came to be, and the counts of earlier runs: [benchmark-history.md](benchmark-history.md).`, '')
  out.push('**Accepted exchanges** (`POST /token`, the right secret, 200):', '')
  out.push(instructionsTable(instructions.results))
  out.push('', ...floorReading(instructions), '')
  if (instructions.paths?.length > 0) {
    out.push('**The refund path and the 429 path**: a wrong secret (401; exchangepace refunds the unit) against bare\'s 401, and `POST /token-tight` at 1/s (all but about one request a second refused) against bare\'s 200 on that route. An `onEvent` hook is called on each refund and each refusal. Each path is counted in one server: single counts of one build have moved by up to 3.5% between servers on a busy machine (2026-12-05), so a difference of a thousand or two between two of these lines is within what one count shows.', '')
    out.push(mdTable(['configuration', 'instructions per request', 'baseline', 'added to it', 'ratio to it', 'servers counted', 'major GCs in the window', 'responses'], instructions.paths.map(r => [
      r.name, count(r.instructionsPerRequest), r.baseline, count(r.addedToBaseline), x(r.ratioToBaseline, 3), String(r.attempts), String(r.majorGcs),
      Object.entries(r.statuses).map(([code, n]) => `${code}: ${n.toLocaleString('en-US')}`).join(', ')
    ]), ['l', 'r', 'l', 'r', 'r', 'r', 'r', 'l']), '')
  }
  const of = kind => instructions.results.find(r => r.kind === kind)
  if (of('exchangepace-redis') && of('ratelimit-redis')) {
    out.push(`On Redis, the Node process only: exchangepace's RedisStore ${count(of('exchangepace-redis').instructionsPerRequest)} instructions per request, @fastify/rate-limit's Redis store ${count(of('ratelimit-redis').instructionsPerRequest)}: ${x(of('exchangepace-redis').instructionsPerRequest / of('ratelimit-redis').instructionsPerRequest, 3)}.`, '')
  }
  if (instructions.redisScripts) out.push(redisScriptsReading(instructions), '')
  return out.join('\n')
}

/** The table of accepted exchanges, with how many servers each count took. */
function instructionsTable (results) {
  const alignedText = r => r.alignedAfter === null
    ? ''
    : r.majorGcBeforeWindow === false
      ? ` (no major GC in ${r.alignedAfter.toLocaleString('en-US')} more requests)`
      : ` (window after ${r.alignedAfter.toLocaleString('en-US')} more requests)`
  const each = results.some(r => r.servers?.length > 1)
  return mdTable(['configuration', 'instructions per request', 'added to bare', 'ratio to bare', ...(each ? ['each server counted (the median kept)'] : []), 'servers counted', 'major GCs in the window'], results.map(r => [
    r.name, count(r.instructionsPerRequest), count(r.addedPerRequest), x(r.ratioToBare, 3), ...(each ? [r.servers.map(c => count(c.instructionsPerRequest)).join(', ')] : []), `${r.attempts}${alignedText(r)}`, String(r.majorGcs)
  ]))
}

/** What the accepted exchanges' table says about the floor, the 429 schema and the hook. */
function floorReading (instructions) {
  const of = kind => instructions.results.find(r => r.kind === kind)
  const target = instructions.target
  if (!target) return []
  const out = [`Against the floor of the contract (a no-op preHandler and an onSend writing the two quota headers with fixed values: what any plugin of exchangepace's shape that sends the draft's headers pays), exchangepace counts ${count(target.beyondFloor)} instructions more per request, ${x(target.ratioToFloor, 3)}: the target of at most ${target.limit}x, and below @fastify/rate-limit (${x(target.ratioToRateLimit, 3)} of it), is ${verdict(target.met)}.`]
  const schema = of('floor-429')
  if (schema) {
    out.push(`Part of that difference is the 429 that exchangepace documents in a paced route's response schema (for @fastify/swagger): with a response schema, Fastify looks up a serializer by status code on every response, and for a 200 that has none it builds the string \`2xx\` and looks that up too (about 600 instructions in a callgrind diff of the two floors, 2026-12-05). The floor with the same 429 in its schema counts ${moreOrFewer(schema.instructionsPerRequest - target.floor)} than the floor (${x(schema.instructionsPerRequest / target.floor, 3)}); exchangepace counts ${moreOrFewer(target.exchangepace - schema.instructionsPerRequest)} than it (${x(target.exchangepace / schema.instructionsPerRequest, 3)}): the declared client id read from the body and checked, the reservation, the ticket and the RateLimit header's value.`)
  }
  out.push('Where exchangepace\'s instructions beyond the floor go, in a callgrind diff of the two servers (2026-12-05, 5,000 requests each, 2,498 apart): about 1,550 in compiled JavaScript, which callgrind cannot name by function (exchangepace\'s code and the parts of Fastify that a paced route runs differently); about 290 in V8\'s string table, looking up strings made at run time as property keys (among them Fastify\'s `2xx`); about 125 in Map and Set lookups (the pace\'s table of keys among them); about 120 concatenating strings; 106 in the regular expression that checks the declared id for control characters; about 90 growing arrays; and the rest in smaller builtins.')
  const hook = of('exchangepace-hook')
  if (hook) {
    out.push(`With an \`onEvent\` hook set (a counter of events), an accepted request counts ${moreOrFewer(hook.instructionsPerRequest - target.exchangepace)}: the hook is called on refusals and refunds only (the table below), and on this path the difference is the servers' own.`)
  }
  const repeated = instructions.results.filter(r => r.servers?.length > 1)
  if (repeated.length > 0) {
    const spreads = repeated.map(r => {
      const values = r.servers.map(c => c.instructionsPerRequest)
      return { name: r.name, spread: Math.max(...values) / Math.min(...values) - 1 }
    })
    const widest = spreads.reduce((a, b) => b.spread > a.spread ? b : a)
    out.push(`How far one count is from the next: the servers the target compares were each counted in ${repeated[0].servers.length} fresh processes, and the widest spread, ${f(100 * widest.spread, 1)}% (${widest.name}), ${widest.spread > target.limit - 1 ? 'is larger than the target\'s margin: one count per server cannot judge it, the median of several can' : 'is within the target\'s margin'}. Two processes of one build differ in what V8 compiled, inlined and collected, and when.`)
  }
  const headers = of('headers')
  if (headers) out.push(`For reference: the two headers written by the handler itself, with no hook, count ${x(headers.ratioToBare, 3)} of bare, and the empty hooks (a no-op preHandler and onResponse) ${x(of('empty')?.ratioToBare ?? NaN, 3)}.`)
  return [out.join(' ')]
}

/** Redis's side: the table of script calls and what the difference is made of. */
function redisScriptsReading (instructions) {
  const scripts = instructions.redisScripts
  const [empty, rateLimit, reserve] = scripts
  return [`Redis's side: a redis-server of the bench's own (${instructions.redisServer.split(' ').slice(0, 3).join(' ')}, nothing kept on disk) under callgrind, each script called ${scripts[0].operations.toLocaleString('en-US')} times on one key with 16 calls in flight, through ioredis as each store calls it. The count includes Redis's event loop and its reading and writing of the socket in user space, which every script call pays: the empty script is that floor.`, '',
    mdTable(['script calls', 'Redis instructions per operation', 'ratio to @fastify/rate-limit'], scripts.map(r => [r.name, count(r.instructionsPerOperation), x(r.ratioToRateLimit, 3)])), '',
    `Beyond the floor of a script call, exchangepace's reserve costs Redis ${count(reserve.instructionsPerOperation - empty.instructionsPerOperation)} instructions and @fastify/rate-limit's window ${count(rateLimit.instructionsPerOperation - empty.instructionsPerOperation)}. What the difference is made of (each piece counted while the scripts were tuned; the steps are in [benchmark-history.md](benchmark-history.md)): the \`TIME\` call, about 9,700 instructions, the price of one clock for every replica; the expiry written with every reservation (\`PX\`), about 8,700, which keeps Redis holding only the keys that spent within the last second; and the script's work on the row (its arithmetic, \`struct.unpack\` and \`struct.pack\`, about 4,000) and its binary reply. A fixed window increments a counter in place and sets its expiry once per window. What remains is the bucket's contract.`].join('\n')
}

function floodSection (flood) {
  const e = flood.results.exchangepace
  const r = flood.results['@fastify/rate-limit']
  const out = ['## 5. Key flood', '',
    `Simulated time again, both limiters at ${flood.rate}/s per client id. Every ${flood.tickMs} ms an attacker sends ${flood.strangersPerTick} requests naming fresh random client ids with wrong secrets (more than @fastify/rate-limit's default LRU of 5000 holds), then requests with the victim's id and secret fire until one is refused (the victim over its rate, or anyone holding its credentials). Over ${e.seconds} s of simulated time the victim's requests span ${e.span} s (from the first tick to the last), so a limiter that keeps the rate admits at most rate x (1 + ${e.span}) = ${e.victimAllowed} for that id.`,
    '']
  out.push(mdTable(['', "victim's id admitted", 'allowed', 'admitted over rate', 'rows at the end'], [
    ['exchangepace', e.victimAdmitted, e.victimAllowed, e.admittedOverRate, `${e.rows} (the victim)`],
    ['@fastify/rate-limit', r.victimAdmitted, r.victimAllowed, r.admittedOverRate, `${r.rows} (its LRU, full of strangers)`]
  ]))
  out.push('', `Each flood of strangers evicts the victim's counter from @fastify/rate-limit's LRU, so every ${flood.tickMs} ms the id starts a fresh window: ${r.victimPerTick.join(', ')} admitted per tick. exchangepace refunds every stranger (wrong secret), which leaves no row, and never evicts a bucket that is not full: ${e.victimPerTick.join(', ')} per tick, the bucket and then the rate.`, '')
  const borrowed = flood.borrowedName
  if (borrowed !== undefined) {
    out.push('### The borrowed name', '',
      `Can strangers who name the victim's client id exhaust its pace? Simulated time, through the real plugins and routes at ${flood.rate}/s per client id, for ${borrowed.seconds} s per line: the victim sends at a steady rate below or at its pace, while strangers send its client id with wrong secrets (a seeded Poisson stream). Checking a secret takes ${borrowed.checkMs[0]} to ${borrowed.checkMs[1]} ms (the handler awaits it), and all that time the stranger's unit is held; exchangepace then refunds it, @fastify/rate-limit has nothing to refund. The **reference** runs the same arrivals through a replay of every grant still kept (the victim's, and the strangers' still under check): it grants exactly when those grants and this one fit the bucket, the most any limiter can admit while it keeps the rate whatever the pending checks conclude.`,
      '')
    out.push(mdTable(['victim', 'strangers naming it', 'exchangepace: victim refused', 'reference: victim refused', '@fastify/rate-limit: victim refused'], borrowed.cases.map(row => [
      `${row.clientPerSecond}/s`, `${row.strangersPerSecond}/s`,
      ...['exchangepace', 'reference', '@fastify/rate-limit'].map(name => `${row.results[name].victimRefused} of ${row.results[name].victim}`)
    ])))
    out.push('', "A stranger under check holds a unit, so enough strangers in flight crowd out the victim under any limiter that keeps the rate (the reference's refusals). exchangepace's refund reads only the key's row, which keeps the run's latest grant time, its count and which of its 32 latest grants were refunded: where the reference would give a unit back in full, exchangepace sometimes gives back part of it (the refunds section of docs/design.md), and the victim at exactly its rate feels that most. @fastify/rate-limit counts every stranger against the victim's window.", '')
  }
  if (flood.madeUp !== undefined) out.push(madeUpSection(flood.madeUp))
  if (flood.throughGateway !== undefined) out.push(floodGatewaySection(flood.throughGateway))
  return out.join('\n')
}

/** Part 5's made-up ids from many sources (bench/parts/flood/made-up-ids.js). */
function madeUpSection (madeUp) {
  const { sources, idsPerSource } = madeUp.settings
  const out = ['### Made-up ids from many sources', '',
    `Wrong secrets under made-up client ids, simulated time through inject: ${sources} sources (IPv4 addresses; then IPv6 /64s of one /48) send ${idsPerSource} made-up ids each, in turn, one request a millisecond, while the real client calls every ${madeUp.clientEveryMs} ms from its own address. Each limiter as recommended for a login-like endpoint (part 8's configurations): exchangepace with examples/server.js's token paces (the per-source failure budget among them) and \`isClient\`, and without \`isClient\`; @fastify/rate-limit's README login example; rate-limiter-flexible's login recipe. Records: what the limiter holds at the end (exchangepace: rows over all its paces). Heap growth over the flood after a full GC; RSS of the process (one replica).`, '',
    mdTable(['configuration', 'sources', 'records', 'heap growth', 'RSS', "real client's 200s"], madeUp.recommended.map(r => [
      r.name, r.family, r.rows.toLocaleString('en-US'), `${f(r.heapGrowthMB, 2)} MB`, `${f(r.rssMB, 0)} MB`, `${r.client.ok} of ${r.client.calls}`
    ])), '',
    "With `isClient` a made-up id is no key of the client pace or the pair's budget: exchangepace holds a row per source in the per-source failure budget and the source ceiling, whatever the number of ids. Without it, each made-up id that failed keeps a pair row for the budget's refill (12 minutes for 5 an hour); the recipe keeps a record per made-up id and address, for 90 days. @fastify/rate-limit's login example keys by address alone (and its LRU holds 5,000 at most).", '',
    '**The row ceiling.** The per-source failure budget (100 a day) in one replica\'s memory, one failure from each of N sources (100,000 a second of simulated time), after a guesser whose 100 failures were spent before:', '',
    mdTable(['sources', 'maxKeys', 'rows', 'new sources refused', 'heap growth', 'the locked-out guesser still refused'], madeUp.ceilings.map(c => [
      c.sources.toLocaleString('en-US'), c.maxKeys === null || c.maxKeys === Infinity ? 'none' : c.maxKeys.toLocaleString('en-US'), c.rows.toLocaleString('en-US'), c.refused.toLocaleString('en-US'), `${f(c.heapGrowthMB, 1)} MB`, c.lockedOutStillRefused ? 'yes' : 'no'
    ])), '',
    'At the ceiling the rows with the most units left (a source that failed once) are forgotten first, an eighth of the ceiling at a time, and no new source is refused while such rows remain; the spent row of the locked-out guesser is never forgotten.', '']
  const redis = madeUp.redis
  if (redis.skipped !== undefined) {
    out.push(`On Redis: not measured (${redis.skipped}).`, '')
  } else {
    out.push(`**On Redis** (${redis.version.split(' ').slice(0, 3).join(' ')}, a server of the bench's own): one made-up id with a wrong secret from each of N IPv6 /64s, through the plugin with the recommended paces and \`isClient\`, after a guesser spent its pair's budget (5 failures an hour); with Redis's defaults (no \`maxmemory\`), then with the \`maxmemory\` and policy docs/stores.md recommends:`, '',
      mdTable(['sources', 'maxmemory', 'keys', 'used_memory growth', 'keys evicted', 'the locked-out guesser still refused'], redis.runs.map(r => [
        r.sources.toLocaleString('en-US'), r.maxmemoryMB === undefined ? 'none' : `${r.maxmemoryMB} MB, ${r.policy}`, r.keys.toLocaleString('en-US'), `${f(r.usedMemoryGrowthMB, 1)} MB`, r.evicted.toLocaleString('en-US'), r.guesserRefused ? 'yes' : 'no'
      ])), '',
      'A key per source in the per-source failure budget (until its unit is back: 864 s after one failure at 100 a day), and the ceiling\'s keys of the last second: no key per made-up id. Under `volatile-ttl` Redis forgets the keys whose bucket is full soonest, which the locked-out pair\'s is not.', '')
  }
  return out.join('\n')
}

const GUESSING_PEERS = ['exchangepace, recommended three', '@fastify/rate-limit, README login example', 'rate-limiter-flexible, login recipe']
const n = value => value.toLocaleString('en-US')
/** "per hour" for a run of an hour, "in 60 s" for a shortened one. */
const guessingSpan = guessing => guessing.seconds === 3600 ? 'per hour' : `in ${guessing.seconds} s`

function guessingSummaryRow (guessing) {
  const [one, hundred] = Object.keys(guessing.configurations[0].scenarios)
  const rows = GUESSING_PEERS.map(name => guessing.configurations.find(c => c.name === name))
  const checked = rows.map(c => `${c.library} ${n(c.scenarios[one].checked)} / ${n(c.scenarios[hundred].checked)}`).join(', ')
  const refused = rows.map(c => c.scenarios[one].client.refused + c.scenarios[hundred].client.refused).join(', ')
  return [`Guessing one client's secret: guesses checked ${guessingSpan(guessing)} from ${one} / ${hundred}, the client at its rate`, 'exchangepace the fewest of the three, the client refused 0 times',
    `${checked}; the client refused ${refused} times`, verdict(guessing.target.met)]
}

function guessingSection (guessing) {
  const scenarios = Object.keys(guessing.configurations[0].scenarios)
  const span = guessingSpan(guessing)
  const out = ['## 8. Guessing a client\'s secret', '',
    `Simulated time, each configuration behind a real Fastify token route (\`inject\`, with \`remoteAddress\` set per request). An attacker names the client \`reporting\` with a new wrong secret every ${guessing.attackMs} ms (${1000 / guessing.attackMs} a second, twice the per-source ceiling of the recommended paces), from one address, then in a second run rotating over 100 addresses (each then sends once a second); all the while the real client calls at its exchange rate, ${guessing.clientPerSecond}/s, with its secret, from an address of its own. A guess is **checked** when it reaches the handler's comparison of the secret, that is, when nothing refused it before; checking takes no simulated time here (part 5's borrowed name measures what a slow check holds). ${guessing.seconds === 3600 ? 'Each run simulates a full hour: the figures per hour are counted, not extrapolated, and the first 60 s of the same run are shown apart.' : `This run simulated ${guessing.seconds} s only (a shortened run): no figure below is per hour.`}`,
    '']
  out.push(mdTable(['configuration', ...scenarios.flatMap(s => [`checked ${span}, ${s}`, `in the first 60 s, ${s}`]), ...scenarios.map(s => `client refused, ${s}`)], guessing.configurations.map(c => [
    c.name, ...scenarios.flatMap(s => [n(c.scenarios[s].checked), n(c.scenarios[s].checkedInFirst60s)]), ...scenarios.map(s => `${n(c.scenarios[s].client.refused)} of ${n(c.scenarios[s].client.calls)}`)
  ])))
  out.push('', `Target, exchangepace with the recommended paces checking the fewest guesses of the three (@fastify/rate-limit's README example, rate-limiter-flexible's recipe) from one and from 100 addresses, with the client refused 0 times: ${verdict(guessing.target.met)} (fewest: ${guessing.target.fewest ? 'yes' : 'no'}; the client never refused: ${guessing.target.neverRefused ? 'yes' : 'no'}).`, '')
  out.push(...guessingConfigurations(), '')
  out.push(...guessingReading(guessing), '')
  if (guessing.throughGateway) out.push(...guessingThroughGateway(guessing, scenarios, span), '')
  return out.join('\n')
}

/** The same attack through a gateway in front of oidc-provider (bench/parts/guessing/guessing-gateway.js). */
function guessingThroughGateway (guessing, scenarios, span) {
  const out = ['### Through a gateway in front of oidc-provider', '']
  const { skipped, configurations } = guessing.throughGateway
  if (skipped !== null) return [...out, `Skipped in the latest run: ${skipped}.`]
  out.push('The same attacker and real client (here `billing`, with `client_secret_post`), sent to a Fastify gateway with @fastify/reply-from in front of oidc-provider started unpaced, over real HTTP from the gateway to it, the clocks simulated as above. A guess is **checked** when it reaches oidc-provider, which answers it 401 `invalid_client`. **exchangepace, the gateway** is examples/gateway.js, its token paces the README\'s four, given the upstream\'s client ids (`isClient`), the outcome read from oidc-provider\'s answer. **@fastify/rate-limit, the gateway** limits the token route as its README shows a route\'s limit, `config: { rateLimit: { max: 5, timeWindow: \'1 minute\' } }`, keyed by `request.ip`: a proxy\'s limiter cannot tell a failure from a success, so it counts every request, the real client\'s too.', '')
  out.push(mdTable(['configuration', ...scenarios.flatMap(s => [`checked ${span}, ${s}`, `in the first 60 s, ${s}`]), ...scenarios.map(s => `client refused, ${s}`)], configurations.map(c => [
    c.name, ...scenarios.flatMap(s => [n(c.scenarios[s].checked), n(c.scenarios[s].checkedInFirst60s)]), ...scenarios.map(s => `${n(c.scenarios[s].client.refused)} of ${n(c.scenarios[s].client.calls)}`)
  ])))
  return out
}

/** How each configuration was set up, and where its setup comes from. */
function guessingConfigurations () {
  return ['How each configuration is set up:', '',
    '- **exchangepace, recommended three**: examples/server.js\'s `TOKEN_PACES`, the README\'s recommended token endpoint: `{ limit: 5, window: 3600, key: [\'client\', \'source\'], spend: \'rejected\' }`, `{ perSecond: 5, key: \'client\', spend: \'accepted\' }`, `{ perSecond: 50, key: \'source\', spend: \'every\' }`; the handler sets `request.pace.outcome = \'rejected\'` on a wrong secret. **three + per-source budget**: the same and the README\'s `{ limit: 100, window: 86400, key: \'source\', spend: \'rejected\' }`.',
    '- **@fastify/rate-limit, README login example** (11.2): its README\'s example for `{ increment: false }`, which it introduces as "useful when a limit should only be enforced on certain outcomes (e.g. failed login attempts) while still checking the status before processing": `const checkRateLimit = fastify.createRateLimit({ max: 5, timeWindow: \'1 minute\' })`, then in the route `const status = await checkRateLimit(request, { increment: false })`, `if (status.isExceeded) { return reply.code(429).send({ error: \'Too many attempts\' }) }`, and after the check `// Only consume a request when the login fails` `await checkRateLimit(request)`. Here the peek runs in a preHandler and the consumption in the handler after the comparison; the key is the plugin\'s default, `request.ip`. A peek reports `isExceeded` when the count is over `max` (`current > max`), so a fixed window of one minute lets 6 failures through, not 5. **the same keyed by client id**: that limiter with `keyGenerator: request => request.body.client_id`, a per-username limit, which lets the guesser lock the real client out.',
    '- **rate-limiter-flexible, login recipe** (11.4): the "Login endpoint protection" example its README links to on its wiki. The limiters as the library\'s own reference gives them (skills/rate-limiter-flexible/references/full-reference.md in its repository: "Two limiters: one for consecutive fails by username, one for fails per IP per day"): `limiterSlowBruteByIP` with `points: 100, duration: 60 * 60 * 24, blockDuration: 60 * 60 * 24` and `limiterConsecutiveFailsByUsernameAndIP` with `points: 10, duration: 60 * 60 * 24 * 90, blockDuration: 60 * 60`; "Key pattern: `get()` first (cheap read), then `consume()` only on failure. Reset on successful login: `await limiter.delete(key)`." The route as the wiki\'s `loginRoute` does it (the wiki itself was not at hand; its code as copied into many projects): both records read before the check, refused with 429 when `resSlowByIP.consumedPoints > maxWrongAttemptsByIPperDay` or `resUsernameAndIP.consumedPoints > maxConsecutiveFailsByUsernameAndIP`; on a wrong password both consumed (the pair "only for registered users", as the named client is), a rejection answered 429; on a success the pair\'s record deleted when it held points. The username is the declared client id (the recipe\'s `getUsernameIPkey` joins it to the address with an underscore). One copy of the recipe (goldbergyoni/nodebestpractices) refuses at `remainingPoints <= 0` instead, which checks 10 guesses per block rather than 11. The recipe is written for Redis; it runs here on `RateLimiterMemory` whose records expire by the simulated clock at their `expiresAt`, as a Redis key with an expiry would (its own timers cannot hold 90 days: the library\'s reference gives RateLimiterMemory about 24 days at most, as `setTimeout` does).']
}

/** What the figures say, with the arithmetic each configuration implies. */
function guessingReading (guessing) {
  const [one, hundred] = Object.keys(guessing.configurations[0].scenarios)
  const of = name => guessing.configurations.find(c => c.name === name).scenarios
  const recommended = of('exchangepace, recommended three')
  const recipe = of('rate-limiter-flexible, login recipe')
  const keyed = of('@fastify/rate-limit, the same keyed by client id')
  const refusing = guessing.configurations.filter(c => c.name !== '@fastify/rate-limit, the same keyed by client id' && Object.values(c.scenarios).some(s => s.client.refused > 0))
  const others = refusing.length === 0 ? 'No other configuration refused the real client.' : `Also refusing the real client: ${refusing.map(c => c.name).join(', ')}.`
  return [`Reading the table. exchangepace's failure budget is a bucket of 5 refilled at 5 per 3600 s: a pair gets at most 5 x (1 + t / 3600) guesses in any t seconds, 5 at once and then one every 12 minutes (${n(recommended[one].checked)} ${guessingSpan(guessing)} from ${one}; each of the ${hundred} is a pair of its own, ${n(recommended[hundred].checked)} in all). rate-limiter-flexible's recipe checks the 11th consecutive failure of a pair before blocking it for an hour (${n(recipe[one].checked)} from ${one}, ${n(recipe[hundred].checked)} from ${hundred}); its per-IP limit (100 a day, then a day's block) binds only in the tenth such hour. @fastify/rate-limit's README example opens a fixed window of a minute per address: 6 a minute, each minute. The per-source budget changes nothing within an hour of guessing one client: from one address it allows 100 + 100 x t / 86400 failures, more than the pair budget's 5 + t / 720 for nearly five days (it is there for a guesser that spreads over many client ids, which this part does not measure). Keyed by client id, @fastify/rate-limit's example holds every address together to 6 a minute, and for that the real client is refused ${n(keyed[one].client.refused)} of ${n(keyed[one].client.calls)} times: the attacker's failures lock it out. ${others}`]
}

const SCHEDULE_NOTES = {
  'window edge': "a burst 1 ms before @fastify/rate-limit's window rolls over and another as it does, every 2 s",
  greedy: 'fire until refused, every 10 ms'
}

/** The fidelity chart: admitted per 100 ms, one panel per schedule. */
function fidelitySvg (fidelity) {
  const width = 860
  const panelHeight = 230
  const margin = { left: 56, right: 20, top: 78, bottom: 54 }
  const schedules = Object.entries(fidelity.schedules)
  const height = margin.top + schedules.length * (panelHeight + margin.bottom) + 10
  const colors = { exchangepace: '#1f6fb2', '@fastify/rate-limit': '#e07b00' }
  const bins = schedules[0][1].exchangepace.per100ms.length
  const yMax = Math.max(5, ...schedules.flatMap(([, byLibrary]) => Object.values(byLibrary).flatMap(r => r.per100ms)))
  const yTop = Math.ceil(yMax / 5) * 5
  const plotWidth = width - margin.left - margin.right
  const binWidth = plotWidth / bins
  const esc = text => String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;')
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${margin.left}" y="22" font-size="15" font-weight="bold">Requests admitted per 100 ms, one client at ${fidelity.rate}/s (simulated time)</text>`
  ]
  let legendX = margin.left
  for (const [name, color] of Object.entries(colors)) {
    parts.push(`<rect x="${legendX}" y="33" width="12" height="12" fill="${color}"/>`, `<text x="${legendX + 17}" y="43">${esc(name)}</text>`)
    legendX += 40 + name.length * 7
  }
  parts.push(`<line x1="${legendX}" y1="39" x2="${legendX + 24}" y2="39" stroke="#444" stroke-dasharray="4 3"/>`, `<text x="${legendX + 29}" y="43">declared rate (${fidelity.rate / 10} per 100 ms)</text>`)
  schedules.forEach(([schedule, byLibrary], index) => {
    const top = margin.top + index * (panelHeight + margin.bottom)
    const y = value => top + panelHeight - (value / yTop) * panelHeight
    parts.push(`<text x="${margin.left}" y="${top - 12}"><tspan font-weight="bold">${esc(schedule)}</tspan>: ${esc(SCHEDULE_NOTES[schedule] ?? '')}</text>`)
    for (let tick = 0; tick <= yTop; tick += 5) {
      parts.push(`<line x1="${margin.left}" y1="${y(tick)}" x2="${width - margin.right}" y2="${y(tick)}" stroke="#e4e4e4"/>`,
        `<text x="${margin.left - 8}" y="${y(tick) + 4}" text-anchor="end">${tick}</text>`)
    }
    const names = Object.keys(colors)
    names.forEach((name, k) => {
      const series = byLibrary[name].per100ms
      const barWidth = (binWidth - 2) / names.length
      series.forEach((count, bin) => {
        if (count === 0) return
        const bx = margin.left + bin * binWidth + 1 + k * barWidth
        parts.push(`<rect x="${bx.toFixed(1)}" y="${y(count).toFixed(1)}" width="${barWidth.toFixed(1)}" height="${(top + panelHeight - y(count)).toFixed(1)}" fill="${colors[name]}"><title>${esc(name)}: ${count} admitted in ${bin * 100}-${bin * 100 + 100} ms</title></rect>`)
      })
    })
    parts.push(`<line x1="${margin.left}" y1="${y(fidelity.rate / 10)}" x2="${width - margin.right}" y2="${y(fidelity.rate / 10)}" stroke="#444" stroke-dasharray="4 3"/>`)
    parts.push(`<line x1="${margin.left}" y1="${top + panelHeight}" x2="${width - margin.right}" y2="${top + panelHeight}" stroke="#444"/>`)
    for (let second = 0; second <= bins / 10; second++) {
      const sx = margin.left + second * 10 * binWidth
      parts.push(`<line x1="${sx}" y1="${top + panelHeight}" x2="${sx}" y2="${top + panelHeight + 5}" stroke="#444"/>`, `<text x="${sx}" y="${top + panelHeight + 18}" text-anchor="middle">${second} s</text>`)
    }
    parts.push(`<text x="16" y="${top + panelHeight / 2}" transform="rotate(-90 16 ${top + panelHeight / 2})" text-anchor="middle">admitted per 100 ms</text>`)
  })
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}

/** Writes benchmarks.md (and fidelity.svg when the fidelity part has run) into `docsDir`. */
export function writeReport ({ resultsDir, docsDir }) {
  const results = readResults(resultsDir)
  const written = []
  if (Object.keys(results).length === 0) return written
  mkdirSync(docsDir, { recursive: true })
  const svgName = 'fidelity.svg'
  if (results.fidelity) {
    writeFileSync(join(docsDir, svgName), fidelitySvg(results.fidelity))
    written.push(join(docsDir, svgName))
  }
  if (results.soak) {
    writeFileSync(join(docsDir, 'soak.svg'), soakSvg(results.soak))
    written.push(join(docsDir, 'soak.svg'))
  }
  const md = [
    '# Benchmarks',
    '',
    '<!-- Generated by `npm run bench` (bench/run.js, bench/report.js) from bench/results/*.json: edit the generator, not this file. -->',
    '',
    'Five questions a user choosing a rate limiter for a token endpoint asks: what it costs per request, how much memory it holds, whether it admits more than the declared rate, whether an attacker can reset or exhaust it, and how many guesses at a client\'s secret it lets reach the check; and, for a pace shared through Redis, what that costs. Each part below answers one, with @fastify/rate-limit (and, for the bucket and the guessing, rate-limiter-flexible) measured in the same process or the same run on the same machine, so that the ratios hold even where the absolute figures drift.',
    '',
    'Run it: `npm run bench` runs every part, in more than two hours on this machine: about an hour for parts 1 to 7 (part 7 counts under callgrind for about 40 minutes); the guessing part, 8, whose simulated hour adds about 5 minutes of CPU (15 minutes on the shared machine at a load average of 12); the failover runs, part 9, about 2 minutes; the soak, part 10, an hour; the capacity rounds, part 11; the latency rounds, part 14, about 5 minutes; the answer times, part 15, about 3 minutes; the random faults, part 16, about 7 minutes; and the gateway rounds, part 17, about a minute. `npm run bench -- --part http` runs one part (the report is rebuilt from the latest results of every part), and `npm run bench -- --quick` a shortened run, written to bench/results/tmp-quick/. Raw results: bench/results/*.json.',
    '',
    summarySection(results),
    machineSection(results),
    results.bucket ? bucketSection(results.bucket) : null,
    results.memory ? memorySection(results.memory) : null,
    results.http ? httpSection(results.http, results.bucket) : null,
    results.fidelity ? fidelitySection(results.fidelity, svgName) : null,
    results.flood ? floodSection(results.flood) : null,
    results.redis ? redisSection(results.redis) : null,
    results.instructions ? instructionsSection(results.instructions) : null,
    results.guessing ? guessingSection(results.guessing) : null,
    results.failover ? failoverSection(results.failover) : null,
    results.soak ? soakSection(results.soak, 'soak.svg') : null,
    results.capacity ? capacitySection(results.capacity) : null,
    results.latency ? latencySection(results.latency) : null,
    results.timeouts ? timeoutsSection(results.timeouts) : null,
    results.faults ? faultsSection(results.faults) : null,
    results.gateway ? gatewaySection(results.gateway) : null
  ].filter(section => section !== null).join('\n')
  writeFileSync(join(docsDir, 'benchmarks.md'), wrapProse(md.replace(/\n{3,}/g, '\n\n')))
  written.push(join(docsDir, 'benchmarks.md'))
  return written
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const resultsDir = process.argv[2] ?? join(BENCH_DIR, 'results')
  const docsDir = process.argv[3] ?? join(BENCH_DIR, '..', 'docs')
  console.log(writeReport({ resultsDir, docsDir }).join('\n'))
}
