// Builds benchmarks.md and fidelity.svg from the JSON the parts wrote. Used by bench/run.js; run
// alone (`node bench/report.js [RESULTS_DIR] [DOCS_DIR]`) to rebuild the report without measuring.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { BENCH_DIR, PARTS, fmt as f } from './common.js'

const x = (value, digits = 2) => `${f(value, digits)}x`
/** `0.52x (0.48-0.55)` from a summary, with the quartiles or the extremes as the spread. */
const spread = (s, digits = 2, how = 'iqr') => how === 'iqr'
  ? `${x(s.median, digits)} (${f(s.p25, digits)}-${f(s.p75, digits)})`
  : `${x(s.median, digits)} (${f(s.min, digits)}-${f(s.max, digits)})`
const verdict = met => met ? 'met' : '**missed**'

function mdTable (header, rows, align) {
  const line = cells => `| ${cells.join(' | ')} |`
  const rule = header.map((_, i) => (align?.[i] ?? (i === 0 ? 'l' : 'r')) === 'l' ? ':--' : '--:')
  return [line(header), line(rule), ...rows.map(line)].join('\n')
}

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

function summarySection (results) {
  const rows = []
  const { bucket, memory, http, fidelity, flood, redis, instructions } = results
  if (bucket?.target?.worst) {
    const { worst, belowToAtLimit } = bucket.target
    rows.push(['Bucket cost, the worst workload at 10k and 1M keys, either visit order', '<= 1x LocalStore `incr`; below rate no slower than at the limit',
      `${spread(worst.ratio)} of LocalStore (${worst.workload}, ${worst.keys.toLocaleString('en-US')} keys, ${worst.order}); below rate / at the limit at most ${spread(belowToAtLimit.ratio)} (${belowToAtLimit.keys.toLocaleString('en-US')} keys, ${belowToAtLimit.order})`,
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
  if (http) {
    const seq = kind => http.sequential.main.configs.find(c => c.kind === kind).cpuRatio
    const par = kind => http.paired.main.pairs.find(p => p.kind === kind).cpuRatio
    for (const [how, ratioOf] of [['sequential', seq], ['paired', par]]) {
      // The median over repetitions (its range), then the median of every round's ratio in the run.
      const pace = ratioOf('exchangepace')
      rows.push([`HTTP server CPU per request, ${how} rounds`, '<= 1.05x bare', `exchangepace ${spread(pace, 3, 'range')}, all rounds ${x(pace.rounds.median, 3)}; empty hooks ${x(ratioOf('empty').median, 3)}, @fastify/rate-limit ${x(ratioOf('ratelimit').median, 3)}`, verdict(pace.median <= 1.05 && pace.rounds.median <= 1.05)])
    }
    const floor = http.sequential.main.configs.find(c => c.kind === 'floor')
    const pace = http.sequential.main.configs.find(c => c.kind === 'exchangepace')
    if (floor && pace) {
      rows.push(['HTTP: the floor of the contract (a no-op preHandler + the two quota headers in onSend)', 'for reference', `floor ${spread(floor.cpuRatio, 3, 'range')} of bare (sequential); exchangepace ${x(pace.cpuRatioToEmptyHooks.median, 3)} of the empty hooks (a no-op preHandler and onResponse)`, ''])
    }
  }
  if (instructions?.results) {
    const of = kind => instructions.results.find(r => r.kind === kind)
    const text = ['empty', 'floor', 'exchangepace', 'ratelimit'].filter(of).map(kind => `${of(kind).name} ${x(of(kind).ratioToBare, 3)}`).join(', ')
    rows.push(['Instructions per request (callgrind)', '<= 1.05x bare', text, verdict(of('exchangepace').ratioToBare <= 1.05)])
  }
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
  return ['## Summary', '', mdTable(['question', 'target', 'measured (median, spread)', ''], rows, ['l', 'l', 'l', 'l']), ''].join('\n')
}

function bucketSection (bucket) {
  const out = ['## 1. Bucket cost', '',
    'Nanoseconds per call, in one process: `Pace#reserve` (plus `Reservation#refund` where the workload refunds) against @fastify/rate-limit\'s `LocalStore#incr` (its LRU sized to hold every key) and rate-limiter-flexible\'s `RateLimiterMemory#consume` (plus `#reward` where the workload refunds), over the same key strings visited in the same order. At each size and visit order the contenders of the four workloads below and three floors run in interleaved rounds (the order rotates every round, a minor GC before each), each round about 40 ms of calls; the figure is the median round, the ratio the median of the per-round ratios to LocalStore, with the quartiles of those ratios in brackets. Keys are built, flattened and hashed before any contender sees them, and before the rounds every contender visits each key twice in a row, so that every key holds what the workload finds.',
    '',
    'Every pace reads its default clock (`performance.now`): no clock is simulated. What each visit finds is set by the pace\'s rate alone:',
    '',
    '- **below rate**: every visit finds the key\'s bucket refilled since its last one, nothing refunded: a client calling less often than its rate allows, the common path. The pace refills a unit every 10 ns over a window of 100 s (`{ limit: 1e10, window: 100 }`), so every bucket is full again at its key\'s next visit, and every key spent within the horizon (at 1M keys a key\'s visits are seconds apart). LocalStore\'s window is 0 ms, so every `incr` finds its key\'s window over and starts a new one; RLF\'s records last 1 ms, its shortest, so at 1 key (and some calls at 10k) they are still alive.',
    '- **below rate, refunds**: the same, with a refund (RLF: a reward) on a pseudo-random half of the calls. LocalStore has nothing to refund: it is the same contender as below rate.',
    '- **at the limit**: every visit finds its key\'s bucket still refilling, and none is refused: a bucket of 1e6 units (1e9 at 1 key) refilled over 3e7 s, so that a unit takes longer to come back than the spacing of a key\'s visits. LocalStore\'s window is an hour and RLF\'s records never expire (duration 0): both find the key\'s state alive.',
    '- **live keys**: at the limit, with a refund on a pseudo-random half of the calls (a refund there never empties a row). Until issue 23 this was the only workload beside strangers, on a clock scaled by 1e-12.',
    '- **strangers**: 1M ids that hold nothing, as in a flood of declared ids: exchangepace (10/s) reserves and refunds each one (the wrong-secret path: a row is inserted, then deleted); LocalStore and RLF run at their defaults (an LRU of 5000, a window of 1 s).',
    '',
    'Each workload runs in two visit orders: **round-robin** (the keys in the order they were first seen, as the tables hold them) and **shuffled** (one fixed pseudo-random permutation). The target, issue 23: every workload at 10k and 1M keys, in both orders, at most 1x LocalStore, and below rate no slower than at the limit (the median of the per-round ratios of exchangepace\'s two contenders, which run in the same rounds). At 1 key both are mostly a clock read: reported, not judged.',
    '']
  const keysText = r => r.keys.toLocaleString('en-US')
  out.push(mdTable(['workload', 'keys', 'order', 'exchangepace ns', 'LocalStore ns', 'RLF memory ns', 'exchangepace / LocalStore', 'RLF / LocalStore', 'rows after'], bucket.results.map(r => [
    r.workload, keysText(r), r.order, f(r.nsPerOp.exchangepace.median), f(r.nsPerOp.LocalStore.median), f(r.nsPerOp['RLF memory'].median),
    spread(r.ratioToLocalStore.exchangepace), spread(r.ratioToLocalStore['RLF memory']), r.rowsAfter.toLocaleString('en-US')
  ]), ['l', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r']))
  const below = bucket.results.filter(r => r.ratioToAtLimit)
  out.push('', `Below rate against at the limit, exchangepace's own calls in the same rounds (median of per-round ratios, quartiles): ${below.map(r => `${spread(r.ratioToAtLimit)} at ${keysText(r)} keys ${r.order}`).join('; ')}. Calls refused: ${bucket.results.reduce((n, r) => n + r.refused, 0)}.`)
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

/** What the common path cost before issue 23, and what dominated it. */
function bucketHistory () {
  return ['**Before issue 23** (the same harness, `--quick`, 2026-12-05, on the build before the change): below rate cost 1.84x LocalStore at 10k keys round-robin and 1.29x shuffled, with refunds 2.22x and 1.44x, while at the limit cost 0.81x and 0.79x: below rate was 2.5x and 2.1x exchangepace\'s own at-the-limit calls. The sweep deleted every row that refill had made full, so a key calling below its rate lost its row between visits and inserted it again (a Map delete and set per call, and a sweep every 16 inserts once a sweep had emptied the table): a CPU profile of below-rate reserves (`node --cpu-prof`, 10k keys round-robin) put 18.8% in `SlotTable#remove`, 18.1% in `#insert` and 8.6% in the sweep, and callgrind counted 1,933 instructions per call against 704 at the limit. At 1M keys the churn made below rate look cheap (0.40x round-robin): the table held a dozen rows, which stayed in the caches. Now a row stays while its key spent within the horizon (docs/design.md, "The memory bound"); below rate counts 673 instructions per call, and the profile is the clock (31%), the Map lookup (24%) and `reserve` itself (26%).', '',
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
    `The same token route (\`POST /token\`, @fastify/formbody, a \`client_credentials\` body with \`client_secret_post\`) served five ways, each by its own server process on loopback: **bare**; **empty hooks** (a no-op preHandler and onResponse on the route: the hooks the design card names, with nothing in them, and a gauge of each run's noise; exchangepace itself settles in onSend and adds no onResponse); **floor** (a no-op preHandler and an onSend that writes the two quota headers the RateLimit draft asks for, with fixed values: exchangepace's hooks with no pace in them, the least any plugin of this shape that sends those headers can cost; before 2026-12-03's last runs it also had a no-op onResponse); **exchangepace** (per declared client id, spend 'accepted', a rate never reached); **@fastify/rate-limit** (keyed by the body's client_id in preHandler, default LocalStore). ${http.pinned ? 'Servers are pinned to core 0 and the load generator (autocannon) to core 1 with `taskset`.' : 'taskset was not available: nothing was pinned.'} A server reads \`process.cpuUsage()\` (user + system) when told over IPC that a round starts and ends, outside the measured route, and counts the requests it received. Every repetition starts fresh server processes and warms each configuration up.`,
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
    out.push(`The bucket is a small part of the difference: one \`reserve\` (with a refund on half the calls) costs ${f(live.nsPerOp.exchangepace.median)} ns at 10k live keys in part 1, against the ${f(extraMicros, 1)} µs per request exchangepace adds to bare here (medians). What dominates is what Fastify and Node do for the contract: each response header costs its validation, its place in the header block and its bytes on the socket (the floor configuration sends the two quota headers and nothing else), and each hook its runner (for onResponse, response listeners attached and removed on every request). Part 7 (instructions per request, which the machine's noise moves far less) separates them.`, '')
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
  out.push(`The servers of part 3 under valgrind's callgrind (${instructions.valgrind}), which counts the instructions a process executes in user space: each server answered ${instructions.warmup.toLocaleString('en-US')} requests twice to warm up, then the counters were zeroed and ${instructions.results[0].requests.toLocaleString('en-US')} more counted (\`POST /token\`, the right secret). The count depends far less than CPU time on what else the machine runs, so it shows what each piece adds where the CPU-time rounds of part 3 only show it through noise; but it is not fixed: what the JIT compiles, inlines and collects, and when, changes from run to run. On 2026-12-03 three morning runs of one build, two servers counted at a time, agreed within about 1% (bare 95,457-95,713 instructions per request, exchangepace 110,728-111,885, @fastify/rate-limit 112,445-112,641, settlement then in onResponse); an afternoon run on a busier machine moved further, and since 13:00 each server is counted alone (two at a time, the count followed the scheduler). Even so, the two afternoon runs of the build that moved settlement to onSend (14:56 and 15:17) moved by up to 20% for one server (@fastify/rate-limit 135,375, then 112,733; exchangepace 113,024, then 121,064) and counted a no-op onResponse below bare once. The first run after them on a quiet machine (16:26) counted exchangepace at 107,224, 3,500-4,700 fewer than the morning's runs, about what a no-op onResponse alone adds (3,359 in that run); the next (17:16, the table below unless a later run replaced it), on a build whose in-memory path changed only where this route does not go, counted 113,031, while the other servers moved by less than 1%. So that is an indication of what leaving onResponse saved, not a measure of it, and exchangepace's own count moves by about 5% between quiet runs. A difference of a percent or two between two counts is at the edge of what the count shows. It leaves out the kernel (the socket reads and writes), a good share of the CPU time of a request, so its ratios are larger than those of part 3. Much of that movement was the collector's: a major GC (mark-compact), which comes about once in 289,000 requests under load, fell in the window of some servers and not others, and on 2026-12-04 one added about 13,000 instructions per request to exchangepace's Redis store (189,047 with one in its window, 176,170 without, 10,000 requests counted), and most likely about 6,000 to exchangepace in a full run that counted it at 111,877 (two counts whose windows held none: 106,017 and 106,203). Since then each server reports the major GCs of its window, and a count whose window held one is made again in a fresh server (up to three servers), so the counts leave major GCs out and keep the scavenges; since the run of 16:46 that day, a retry's window starts right after the server's next major GC (it is sent requests ${Math.min(1000, instructions.results[0].requests).toLocaleString('en-US')} at a time after its warm-up until it reports one, ${(2 * instructions.results[0].requests).toLocaleString('en-US')} at most: the "more requests" in the table); the table gives how many servers each count took and the major GCs in the window kept. The Redis stores allocate more per request: in the first run so counted (2026-12-04 15:07-15:30) each of three servers of each Redis store had one major GC in its window (exchangepace's 198,413, 192,385 and 189,073 instructions per request, @fastify/rate-limit's 211,753, 218,417 and 221,835), so their counts kept one each, and so did the next run's (16:19-16:44: exchangepace's 196,786, 195,351 and 223,097, @fastify/rate-limit's 205,484, 206,260 and 202,493), where the one kept made exchangepace's store 0.852x of @fastify/rate-limit's in the first and 1.102x in the second: a count with a major GC in it says little. Since the run of 16:46-17:06 a retry's window starts after a major GC, and both Redis stores were counted without one in their second server (the table's "more requests": how many it took for the major GC to come). (Collecting in full before the window, \`global.gc\`, was tried first: every count that followed it, bare's included, came out 35% to 2x higher, 5,000 requests later.)`, '')
  const gcs = instructions.results.every(r => r.majorGcs !== undefined)
  const aligned = instructions.results.every(r => r.alignedAfter !== undefined)
  const alignedText = r => r.alignedAfter === null
    ? ''
    : r.majorGcBeforeWindow === false
      ? ` (no major GC in ${r.alignedAfter.toLocaleString('en-US')} more requests)`
      : ` (window after ${r.alignedAfter.toLocaleString('en-US')} more requests)`
  out.push(mdTable(['configuration', 'instructions per request', 'added to bare', 'ratio to bare', ...(gcs ? ['servers counted', 'major GCs in the window'] : [])], instructions.results.map(r => [
    r.name, Math.round(r.instructionsPerRequest).toLocaleString('en-US'), Math.round(r.addedPerRequest).toLocaleString('en-US'), x(r.ratioToBare, 3), ...(gcs ? [`${r.attempts}${aligned ? alignedText(r) : ''}`, String(r.majorGcs)] : [])
  ])))
  const of = kind => instructions.results.find(r => r.kind === kind)
  if (of('floor') && of('exchangepace') && of('empty')) {
    const floorRatio = of('floor').ratioToBare
    const onResponseAdded = of('onresponse')?.addedPerRequest
    let onResponse = ''
    if (onResponseAdded !== undefined && onResponseAdded <= 0) {
      onResponse = ` The onResponse hook alone came out ${Math.round(-onResponseAdded).toLocaleString('en-US')} below bare in this run: within its noise (see above).`
    } else if (onResponseAdded !== undefined) {
      onResponse = ` Of those, the onResponse hook alone adds ${Math.round(onResponseAdded).toLocaleString('en-US')}: with one on the route, Fastify attaches its 'finish' and 'error' listeners to every response and removes them after, and reads the clock at both ends, which it does on every route anyway when the server has a logger (here it has none).`
    }
    out.push('', `Read from the table: the empty hooks (a no-op preHandler and onResponse, the hooks the design card names) add ${Math.round(of('empty').addedPerRequest).toLocaleString('en-US')} instructions (Fastify's hook runners, and for onResponse its response listeners).${onResponse} exchangepace settles in onSend and adds no onResponse (docs/design.md says why): the floor of its shape, a no-op preHandler and an onSend writing the two quota headers, adds ${Math.round(of('floor').addedPerRequest).toLocaleString('en-US')} to bare, and exchangepace's own work (the ticket, the declared client id, the reservation, the header values, and the 429 response in the route's schema, for which Fastify looks up a serializer by status on every response) ${Math.round(of('exchangepace').instructionsPerRequest - of('floor').instructionsPerRequest).toLocaleString('en-US')} beyond the floor. ` +
      (floorRatio > 1.05
        ? `The floor alone, ${x(floorRatio, 3)} of bare, is over the 1.05x target: no plugin that sends the draft's two headers on every accepted response through Fastify can meet it by this count.`
        : `The floor is ${x(floorRatio, 3)} of bare.`) +
      (of('headers') ? ` The two headers by themselves, written by the handler with no hook at all, add ${Math.round(of('headers').addedPerRequest).toLocaleString('en-US')} (${x(of('headers').ratioToBare, 3)} of bare): Fastify's \`reply.header\`, and Node's validation of each header and its place in the header block.` : ''))
  }
  if (of('headers')) {
    out.push('', 'Where the two headers\' instructions go, per response (a callgrind diff of the headers server against bare, 2026-12-04, 5,000 requests each, functions with names only): about 800 lowercasing the names (Fastify\'s `reply.header` lowercases each one, and Node lowercases it again to match it against the headers it treats specially), about 570 in the regular expressions Node checks each name and value with, about 800 building and flattening the longer header block, about 600 in malloc, about 600 in keyed loads and stores on Fastify\'s header object, and about 2,400 in compiled JavaScript. Until 2026-12-04 exchangepace built the RateLimit item anew for every response: a concatenated string, which Node\'s value check took through V8\'s runtime to flatten (`Runtime_RegExpExec`, once per request). A pace now reuses the item it last wrote while the units remaining repeat, as they do under steady traffic (each request finds its key\'s bucket refilled and leaves `floor(perSecond) - 1`); where the header lists one pace, as on this route, the item is the whole value and is flattened once, and a header that lists several reuses its list the same way (on a scratch server paced per source and per client, about 3,000-5,000 fewer instructions per request, in pairs of callgrind runs before and after). One server counted before and after the change (a scratch copy of this part, 5,000 requests each): 114,141 and 112,966 instructions per request. The full runs on either side of it (2026-12-04 00:48 and 04:10): 107,279 (4,558 beyond the floor) and 105,882 (3,232). Of what is left beyond the floor, a callgrind diff against it put about 1,600 in compiled JavaScript (the declared client id, the reservation, the ticket and its holding) and about 300 in Fastify\'s lookup of a serializer by status, which a response schema makes it do on every response: a 200 finds none under `200`, and Fastify then builds the string `2xx` and looks that up.')
  }
  if (of('exchangepace-redis') && of('ratelimit-redis')) {
    out.push('', `On Redis, the Node process only: exchangepace's RedisStore ${Math.round(of('exchangepace-redis').instructionsPerRequest).toLocaleString('en-US')} instructions per request, @fastify/rate-limit's Redis store ${Math.round(of('ratelimit-redis').instructionsPerRequest).toLocaleString('en-US')}: ${x(of('exchangepace-redis').instructionsPerRequest / of('ratelimit-redis').instructionsPerRequest, 3)}.`)
  }
  const scripts = instructions.redisScripts
  if (scripts) {
    out.push('', `Redis's side: a redis-server of the bench's own (${instructions.redisServer.split(' ').slice(0, 3).join(' ')}, nothing kept on disk) under callgrind, each script called ${scripts[0].operations.toLocaleString('en-US')} times on one key with 16 calls in flight, through ioredis as each store calls it. The count includes Redis's event loop and its reading and writing of the socket in user space, which every script call pays: the empty script is that floor.`, '')
    out.push(mdTable(['script calls', 'Redis instructions per operation', 'ratio to @fastify/rate-limit'], scripts.map(r => [
      r.name, Math.round(r.instructionsPerOperation).toLocaleString('en-US'), x(r.ratioToRateLimit, 3)
    ])))
    const [empty, rateLimit, reserve] = scripts
    out.push('', `Beyond the floor of a script call, exchangepace's reserve costs Redis ${Math.round(reserve.instructionsPerOperation - empty.instructionsPerOperation).toLocaleString('en-US')} instructions and @fastify/rate-limit's window ${Math.round(rateLimit.instructionsPerOperation - empty.instructionsPerOperation).toLocaleString('en-US')}. What the difference is made of (each piece counted under callgrind while the scripts were tuned, with redis-benchmark calling variants of the script that leave one piece out): the \`TIME\` call, about 9,700 instructions, which is the price of one clock for every replica; the expiry written with every reservation (\`PX\`), about 8,700, which is what keeps Redis holding only the keys that spent within the last second; and the script's work on the readings: its arithmetic, reading the row and packing it back (\`struct.unpack\` and \`struct.pack\`, about 4,000), and the reply, one binary string of four doubles (the units left, and the grant's run, number and time for its refund), where the fixed window answers a table of two numbers. A fixed window increments a counter in place and sets its expiry once per window. Tuning the scripts (straight-line code instead of local functions, numbers passed as formatted strings instead of Lua numbers, which Redis formats as 17-digit doubles) took the reserve from 61,222 to 55,433 instructions (both counted by this part's shortest form, \`--smoke\`, 100 calls). The exact refund rule then added about 10,000 back (65,284 in the same form): the key's row carries, beside its time, the run, the count of grants and the latest grant's time, which the reserve script matches out of the row and formats back in. Marking refunded grants in the row (a fifth field, which each reservation shifts) cost too little to tell from run-to-run differences (63,676 in the first full run with it, 65,040 in the last one without it; 64,688 in \`--smoke\`, against 63,758). Storing the row in binary (Lua's \`struct\` library: a format byte, four doubles and the marks) instead of as the text \`full:run:count:last:marks\` took the reserve from 63,871 to 58,019 instructions and the reserve-then-refund pair from 88,332 to 81,015 (this part's \`--quick\` form, 5,000 calls per line, on the build before the change and on the change, 2026-12-03). Shortening the reply from six elements to four (a refusal answers its wait alone, as text; a grant no longer repeats that it was granted) took about 1,300 more (57,397 to 56,054 in a scratch harness that counts the scripts the same way). Answering in binary (8 bytes for a refusal's wait, 32 for a grant), read through ioredis's \`Buffer\` form of the command, instead of a Lua table, which Redis converts element by element after looking for the fields of its special replies, took the reserve from 57,029 (the last full run with the table) to 52,123 (the first with the binary reply, 16:26). The row then took the rate it was written at (8 bytes more, so that replicas declaring different rates for one pace read each other's rows in their own microticks), 53,477 instructions against 52,123 before it (17:16 and 16:26). What remains is the bucket's contract.`)
  }
  out.push('')
  return out.join('\n')
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
  return out.join('\n')
}

/** How each configuration was set up, and where its setup comes from. */
function guessingConfigurations () {
  return ['How each configuration is set up:', '',
    '- **exchangepace, recommended three**: examples/server.js\'s `TOKEN_PACES`, the README\'s recommended token endpoint: `{ limit: 5, window: 3600, key: [\'client\', \'source\'], spend: \'rejected\' }`, `{ perSecond: 5, key: \'client\', spend: \'accepted\' }`, `{ perSecond: 50, key: \'source\', spend: \'every\' }`; the handler sets `request.pace.outcome = \'rejected\'` on a wrong secret. **three + per-source budget**: the same and the README\'s `{ limit: 100, window: 86400, key: \'source\', spend: \'rejected\' }`.',
    '- **@fastify/rate-limit, README login example** (11.2): its README\'s example for `{ increment: false }`, which it introduces as "useful when a limit should only be enforced on certain outcomes (e.g. failed login attempts) while still checking the status before processing": `const checkRateLimit = fastify.createRateLimit({ max: 5, timeWindow: \'1 minute\' })`, then in the route `const status = await checkRateLimit(request, { increment: false })`, `if (status.isExceeded) { return reply.code(429).send({ error: \'Too many attempts\' }) }`, and after the check `// Only consume a request when the login fails` `await checkRateLimit(request)`. Here the peek runs in a preHandler and the consumption in the handler after the comparison; the key is the plugin\'s default, `request.ip`. A peek reports `isExceeded` when the count is over `max` (`current > max`), so a fixed window of one minute lets 6 failures through, not 5. **the same keyed by client id**: that limiter with `keyGenerator: request => request.body.client_id`, the per-username limit the issue warns of.',
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
export function fidelitySvg (fidelity) {
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
  const md = [
    '# Benchmarks',
    '',
    '<!-- Generated by `npm run bench` (bench/run.js, bench/report.js) from bench/results/*.json: edit the generator, not this file. -->',
    '',
    'Five questions a user choosing a rate limiter for a token endpoint asks: what it costs per request, how much memory it holds, whether it admits more than the declared rate, whether an attacker can reset or exhaust it, and how many guesses at a client\'s secret it lets reach the check; and, for a pace shared through Redis, what that costs. Each part below answers one, with @fastify/rate-limit (and, for the bucket and the guessing, rate-limiter-flexible) measured in the same process or the same run on the same machine, so that the ratios hold even where the absolute figures drift.',
    '',
    'Run it: `npm run bench` (all parts, about 32 minutes before the guessing part, whose simulated hour adds about 5 minutes of CPU: 15 minutes on the shared machine at a load average of 12), `npm run bench -- --part http` (one part; the report is rebuilt from the latest results of every part), `npm run bench -- --quick` (a shortened run, written to bench/results/tmp-quick/). Raw results: bench/results/*.json.',
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
    results.guessing ? guessingSection(results.guessing) : null
  ].filter(section => section !== null).join('\n')
  writeFileSync(join(docsDir, 'benchmarks.md'), md.replace(/\n{3,}/g, '\n\n'))
  written.push(join(docsDir, 'benchmarks.md'))
  return written
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const resultsDir = process.argv[2] ?? join(BENCH_DIR, 'results')
  const docsDir = process.argv[3] ?? join(BENCH_DIR, '..', 'docs')
  console.log(writeReport({ resultsDir, docsDir }).join('\n'))
}
