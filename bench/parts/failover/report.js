// Part 9's section of docs/benchmarks.md, and its line in the summary (bench/report.js).

const SWITCHES = {
  restart: 'single Redis, SIGKILL and restarted empty',
  'sentinel failover': 'Sentinel: SENTINEL FAILOVER',
  'sentinel kill': 'Sentinel: SIGKILL of the master'
}

const switchName = run => SWITCHES[run.how] ??
  `${run.how === 'kill' ? 'SIGKILL of the master' : 'CLUSTER FAILOVER on the replica'}, full coverage ${run.fullCoverage ? 'yes' : 'no'}`

const seconds = value => value === null ? 'not within the run' : `${value} s`

function mdTable (header, rows) {
  return [`| ${header.join(' | ')} |`, `|${header.map(() => '---').join('|')}|`, ...rows.map(row => `| ${row.join(' | ')} |`)].join('\n')
}

/** The summary's line: did any request fail, did the healthy masters' keys stay shared, were keys left without expiry. */
export function failoverSummaryRow (failover) {
  const runs = failover.runs
  const failed = runs.reduce((sum, run) => sum + run.failed, 0)
  const noExpiry = runs.reduce((sum, run) => sum + run.keysLeft.withoutExpiry, 0)
  const isolated = runs.filter(run => run.how !== 'restart' && run.fullCoverage === false)
  const healthy = isolated.length === 0 ? '' : `; healthy masters' clients at most ${Math.max(...isolated.map(run => run.excessSharedHealthy))} beyond their shared bucket (full coverage no)`
  return ['Failover: a Cluster master or a Sentinel master fails over, a Redis restarts empty, under two replicas\' traffic', 'no request fails, no key without expiry; other masters\' keys stay shared',
    `${failed} failed, ${noExpiry} keys without expiry${healthy}`, failed === 0 && noExpiry === 0 ? 'met' : '**missed**']
}

function perSecondTable (run) {
  const { healthy, failing } = run.perSecond
  const seconds = failing.map(([k]) => k)
  const cells = counts => counts.map(([, n]) => String(n))
  const rows = [[`client on the failed ${run.fullCoverage === null ? 'server' : 'master'} (${run.watched.failing})`, ...cells(failing)]]
  if (healthy !== null) rows.unshift([`client on a healthy master (${run.watched.healthy})`, ...cells(healthy)])
  return mdTable([run.how === 'restart' ? 'second (0: the kill)' : 'second (0: the switch)', ...seconds.map(String)], rows)
}

const SHAPE_SWITCHES = { failover: 'CLUSTER FAILOVER', rebalance: 'rebalance onto a new master', kill: 'SIGKILL of a master' }

/** The lockstep runs: every variant through each switch, and the per-second admissions of the majors with their defaults. */
function shapeSection (failover) {
  const s = failover.shape
  const out = ["### Through a Cluster's switches, on each ioredis major (lockstep runs)", '']
  out.push(`A cluster of three masters with a replica each (\`cluster-node-timeout\` ${s.nodeTimeoutMs}, \`cluster-require-full-coverage no\`), two app replicas each with an ioredis \`Cluster\` client (\`enableAutoPipelining: true\`, otherwise its defaults) and \`RedisStore({ timeoutMs: ${s.timeoutMs} })\`, one route \`{ perSecond: ${s.rate}, key: 'client', spend: 'accepted' }\`, ${s.clients} clients each sending ${s.sendPerSecond} a second in lockstep through both replicas (each auto-pipelined batch carries several slots). ${s.beforeMs / 1000} s after the traffic starts: a \`CLUSTER FAILOVER\` on a master's replica; then a new empty master added and \`redis-cli --cluster rebalance --cluster-use-empty-masters\` run; then a SIGKILL of another master; each watched ${s.afterMs / 1000} s after the promotion (the rebalance's end). Two variants meet each switch at once, each with its own two app replicas and clients. "Moved clients" are those whose slot the switch moved. Excess (as above, over both replicas, each admission at the time Redis granted it, or the memory's time for one decided without Redis) is counted from 1 s after the promotion to the end of the run; "paced in memory" is how much of that time a replica said it paced those keys in memory (an outage: a stall of this machine past timeoutMs begins one too); "decided without Redis" is \`fastify.pace.counts\`'s \`grantedWithoutStore\`, per app replica, over the whole run.`, '')
  out.push(mdTable(['variant', 'switch', 'promoted after', 'moved clients', 'excess of moved clients from 1 s after, where said shared (all of it)', 'excess of the others (all of it)', 'said paced in memory, of that time', 'decided without Redis (grants per replica)', 'event loop late, p99 / max', 'shared again after promotion'],
    failover.shaped.map(run => [run.label, SHAPE_SWITCHES[run.how], `${run.promotionAfterTrigger} s`, String(run.clients.failing),
      `${run.excessSharedAfterFailing} (${run.excessSettledFailing})`, String(run.excessSettledHealthy), `${run.pacedAfterSeconds} of ${run.settledSeconds} s`, run.unanswered.map(counts => String(counts.granted)).join(' / '), `${run.loopDelayMs.p99} / ${run.loopDelayMs.max} ms`,
      run.outages.perReplica.map(outage => outage.warnings === 0 ? 'no outage' : seconds(outage.sharedAgainAfterPromotion)).join(' / ')])), '')
  for (const run of failover.shaped.filter(run => run.label === 'ioredis 5' || run.label === 'ioredis 6')) {
    const { failing, healthy } = run.mostPerSecond
    const cells = counts => counts.map(([, n]) => String(n))
    out.push(`Most admitted in a second by one client, both replicas, ${run.label}, ${SHAPE_SWITCHES[run.how]}:`, '',
      mdTable(['second (0: the switch)', ...failing.map(([k]) => String(k))], [['moved clients', ...cells(failing)], ['other clients', ...cells(healthy)]]), '')
  }
  return out.join('\n')
}

export function failoverSection (failover) {
  const out = ['## 9. Failover', '']
  if (failover.skipped) {
    out.push(`Skipped in the latest run: ${failover.skipped}.`, '')
    return out.join('\n')
  }
  const t = failover.traffic
  out.push(`Does a \`RedisStore\` keep its pace while Redis fails over? A Redis Cluster of three masters, each with a replica (${failover.redisServer.split(' ').slice(0, 3).join(' ')}, loopback, \`cluster-node-timeout\` ${failover.nodeTimeoutMs} ms), carries the traffic of two app replicas (Fastify instances, each with its own ioredis \`Cluster\` client and \`RedisStore\`, timeoutMs ${t.timeoutMs}, retryMs ${t.retryMs}) on the README's token route: ${t.clients} clients at ${t.rate}/s each sending ${t.sendPerSecond}/s, strangers naming unknown client ids at ${t.strangersPerSecond}/s, and a guesser at one client's secret at ${t.guessesPerSecond}/s (failure budget 5 per hour per (client id, address)), each request through a replica chosen at random. ${t.beforeMs / 1000} s after the traffic starts one master fails over: first by \`CLUSTER FAILOVER\` on its replica, then another by SIGKILL; on a cluster with \`cluster-require-full-coverage yes\` (Redis's default: no slot is served while one is not) and on one with \`no\`. The traffic goes on ${t.afterMs / 1000} s after the promotion. Then a single Redis is killed and restarted empty on the same port. Last, a master with one replica and three sentinels (quorum 2, \`down-after-milliseconds\` ${failover.nodeTimeoutMs}), each replica's client an ioredis Sentinel client: \`SENTINEL FAILOVER\`, then, on another such deployment, a SIGKILL of the master. bench/parts/failover/failover.js; test/redis/switches/failover.test.ts runs the restart and the Sentinel kill shorter, and test/redis/switches/failover-cluster.test.ts the Cluster's switches in the shape below, on both ioredis majors.`, '')
  out.push('Excess is the most a client got beyond its bucket in any window, rate x (1 + w) in a window of w seconds (0 or less: the bucket held): per replica, on the units its memory kept (granted there and not refunded, at its own clock\'s time: every admitted request holds one), and over both replicas, by when the handler ran, for the clients on the masters that stayed up and for those on the failed one (with the design\'s bound: one bucket for a row lost, plus each replica\'s own while it paced in memory, `rate + N x rate + (N - 1) x rate x seconds paced`). "Shared again" is when each replica\'s outage of the failed master ended, after the promotion; "other outages" counts warnings about masters that did not fail (or, for the restart, none are possible). Guesses are those that reached the secret check, in all and during the switch (from the trigger to the last outage\'s end). With `cluster-require-full-coverage yes`, every master answers CLUSTERDOWN from the moment the cluster marks the killed master failed until its replica is promoted (ioredis retries until `timeoutMs`): the other masters\' outages in that row, and the 20 or more a second of the healthy master\'s client in those seconds.', '')
  out.push(mdTable(['switch', 'failed requests', 'excess per replica', 'excess, healthy masters', 'excess, failed master (bound)', 'promoted (restarted) after', 'shared again after promotion (replica 1 / 2)', 'other outages', 'guesses checked (switch)', 'keys without expiry'],
    failover.runs.map(run => [switchName(run), String(run.failed), String(run.excessPerReplica), run.excessSharedHealthy === null ? '-' : String(run.excessSharedHealthy),
      `${run.excessSharedFailing} (${run.boundFailing})`, `${run.promotionAfterTrigger} s`, run.outages.perReplica.map(outage => outage.warnings === 0 ? 'no outage' : seconds(outage.sharedAgainAfterPromotion)).join(' / '),
      String(run.outages.warningsForOtherMasters), `${run.guesses.checked} (${run.guesses.checkedDuringSwitch})`, `${run.keysLeft.withoutExpiry} of ${run.keysLeft.keys}`])), '')
  for (const run of failover.runs) {
    out.push(`Admitted per second, both replicas, ${switchName(run)}:`, '', perSecondTable(run), '')
    const others = run.outages.otherMasters
    if (others.length > 0) out.push(`Warnings about other masters: ${others.map(other => `${other.master} on replica ${other.replica + 1}, ${other.afterTrigger} s after the switch (${other.error})`).join('; ')}. The process's event loop ran up to ${run.loopDelayMs.max} ms late (99th percentile ${run.loopDelayMs.p99} ms).`, '')
  }
  if (failover.shaped !== undefined && failover.shaped.length > 0) out.push(shapeSection(failover))
  return out.join('\n')
}
