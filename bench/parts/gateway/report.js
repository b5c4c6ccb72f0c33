// Part 17 (gateway): its section of docs/benchmarks.md and its line in the summary (bench/report.js).

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

const ms = value => `${f(value, 3)} ms`
const spread = s => `${ms(s.median)} (${f(s.min, 3)} to ${f(s.max, 3)})`

/** The summary's line: what the pace adds to the proxy alone, at the median and p99. */
export function gatewaySummaryRow (gateway) {
  return ['A gateway in front of any OAuth server: latency the pace adds over the proxy alone (median / p99)', 'for reference', `${spread(gateway.added.medianMs)} / ${spread(gateway.added.p99Ms)}`, '']
}

export function gatewaySection (gateway) {
  const { rounds, requests } = gateway.settings
  return ['## 17. A gateway in front of any server', '',
    `What examples/gateway.js adds in latency over the proxy alone. An upstream token endpoint that answers at once (a stand-in for the authorization server, whose own time is not the gateway's), @fastify/reply-from in front of it with the body kept as bytes (the proxy alone), and examples/gateway.js (the same, with its four token paces in front: docs/endpoints.md's two failure budgets, the exchange pace and the source ceiling; the device code's pace takes nothing from these requests), all three in a process of their own (bench/parts/gateway/gateway-servers.js). Each of ${rounds} rounds times ${requests} POST /token of each server in turn, one at a time on one kept-alive connection, the order alternating, from rotating client ids and forwarded addresses so that every request is granted; the gateway's median and p99 less the proxy's, in the same round, are what the pace adds. Medians over rounds. bench/parts/gateway/gateway.js.`, '',
    mdTable(['server', 'median', 'p99'], gateway.configs.map(c => [c.name, ms(c.medianMs.median), ms(c.p99Ms.median)])), '',
    `The pace adds ${spread(gateway.added.medianMs)} at the median and ${spread(gateway.added.p99Ms)} at p99 (median over rounds, and their range).`, ''
  ].join('\n')
}
