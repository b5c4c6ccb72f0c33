// Part 16 (faults): its section of docs/benchmarks.md and its line in the summary (bench/report.js).

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

/** The summary's line: seeds whose invariants broke, and the worst figures. */
export function faultsSummaryRow (faults) {
  const w = faults.worst
  return ['Random faults between the replicas and Redis: invariants after each seed\'s schedule', 'every invariant on every seed',
    `${faults.runs.length} seeds, ${faults.broken.length} broken; latest end of a degradation ${w.endAfterFaultMs ?? '-'} ms after its fault's end (bound ${faults.settings.shape.retryMs + 1000}); admissions at most ${f(w.toBound * 100, 0)}% of the bound`,
    faults.target.met ? 'met' : '**missed**']
}

export function faultsSection (faults) {
  const out = ['## 16. Random faults between the replicas and Redis', '']
  if (faults.skipped) {
    out.push(`Skipped in the latest run: ${faults.skipped}.`, '')
    return out.join('\n')
  }
  const w = faults.worst
  out.push(`${faults.runs.length} seeded schedules (seeds ${faults.settings.firstSeed} to ${faults.settings.firstSeed + faults.runs.length - 1}) of the fault proxy's kinds (bench/shared/fault-proxy.js: ${Object.entries(faults.kinds).map(([kind, n]) => `${kind} ${n}`).join(', ')} faults in all), each of 100 ms to 1 s, between two app replicas and Redis (${faults.redisServer.split(' ').slice(0, 3).join(' ')}), under traffic of three times the rate per client, a block set before the first fault; the store with its defaults but \`retryMs\` ${faults.settings.shape.retryMs}. After each schedule, the invariants of bench/parts/faults/fault-schedule.js: no 5xx or unhandled error, no key without expiry, no client above the bound docs/stores.md gives for the time it was degraded, every degradation over within \`retryMs\` + 1 s of its fault's end, the block held, every "shared again" line true. bench/parts/faults/faults.js.`, '')
  out.push(mdTable(['seeds', 'broke an invariant', 'degradations', 'latest end after its fault\'s end', 'admissions against the bound, at most'],
    [[String(faults.runs.length), String(faults.broken.length), String(faults.runs.reduce((sum, r) => sum + r.degradations, 0)), w.endAfterFaultMs === null ? '-' : `${w.endAfterFaultMs} ms (seed ${w.endAfterFaultSeed})`, `${f(w.toBound * 100, 0)}% (seed ${w.toBoundSeed})`]]), '')
  for (const run of faults.broken) out.push(`- seed ${run.seed}: ${run.violations.join('; ')}`)
  if (faults.broken.length > 0) out.push('')
  return out.join('\n')
}
