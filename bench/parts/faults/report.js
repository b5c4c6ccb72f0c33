// Parts 15 (timeouts) and 16 (faults): their sections of docs/benchmarks.md and their lines in the
// summary (bench/report.js).

import { fmt as f } from '../../shared/common.js'

function mdTable (header, rows) {
  const line = cells => `| ${cells.join(' | ')} |`
  return [line(header), line(header.map((_, i) => i === 0 ? ':--' : '--:')), ...rows.map(line)].join('\n')
}

const outagesAt = (phase, timeoutMs) => phase.byTimeout.find(b => b.timeoutMs === timeoutMs)

/** The summary's line: the false outages each timeout would begin, alone and at load. */
export function timeoutsSummaryRow (timeouts) {
  const text = timeouts.phases.map(p => `${p.name}: ${p.byTimeout.map(b => `${b.outages} at ${b.timeoutMs} ms`).join(', ')}`).join('; ')
  return ['False outages (a Redis that never failed answering later than timeoutMs), in the part\'s run', 'for choosing the default timeoutMs', text, '']
}

export function timeoutsSection (timeouts) {
  const out = ['## 15. How long Redis takes to answer, and what each timeout makes of it', '']
  if (timeouts.skipped) {
    out.push(`Skipped in the latest run: ${timeouts.skipped}.`, '')
    return out.join('\n')
  }
  const s = timeouts.settings
  out.push(`The reserve script's answer time, from the store's call to its answer (what \`timeoutMs\` counts, the event loop's turns in between included), under the soak's traffic (${s.requestsPerSecond} requests a second on two replicas of the README's token route, part 10's streams) on a redis-server of the part's own (${timeouts.redisServer.split(' ').slice(0, 3).join(' ')}), each replica's \`timeoutMs\` 10 s so that no answer is cut off: ${s.seconds} s alone, then ${s.seconds} s beside ${s.burners} processes spinning on the CPU (the machine has two cores and is shared: load average ${f(timeouts.loadavg1.before, 1)} before the second phase, ${f(timeouts.loadavg1.during, 1)} at its end). The outages are those a store with each \`timeoutMs\` (and \`retryMs\` ${s.retryMs}) would have begun on the same calls, though Redis never failed: each paces per replica for about \`retryMs\`, and warns. bench/parts/timeouts/timeouts.js.`, '')
  out.push(mdTable(['phase', 'reserve calls', 'p50', 'p99', 'p99.9', 'max', ...s.timeouts.map(ms => `at ${ms} ms: outages (per hour), replica-seconds paced in memory`)],
    timeouts.phases.map(p => [p.name, String(p.calls), `${f(p.answerMs.p50, 2)} ms`, `${f(p.answerMs.p99, 2)} ms`, `${f(p.answerMs.p999, 2)} ms`, `${f(p.answerMs.max, 1)} ms`,
      ...s.timeouts.map(ms => { const b = outagesAt(p, ms); return `${b.outages} (${f(b.outagesPerHour, 0)}), ${f(b.degradedMs / 1000, 1)} s` })])), '')
  return out.join('\n')
}

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
