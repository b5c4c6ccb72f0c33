// Part 15 (timeouts): its section of docs/benchmarks.md and its line in the summary (bench/report.js).

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

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
