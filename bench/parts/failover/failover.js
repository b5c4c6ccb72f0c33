// Part 9, failover: does a RedisStore keep its pace while Redis fails over or restarts empty?
//
// A Redis Cluster of three masters, each with a replica, on loopback (bench/shared/redis-servers.js), carries
// the traffic of two app replicas (bench/parts/failover/failover-run.js): clients at three times their rate,
// strangers naming unknown client ids, a guesser at one client's secret. One master fails over
// while the traffic flows, first by CLUSTER FAILOVER on its replica, then (another master) by a
// SIGKILL, on a cluster that serves every slot only while every master is up
// (`cluster-require-full-coverage yes`, Redis's default) and on one that serves each master's
// slots on their own (`no`). Then a single Redis killed and restarted empty on the same port. Last,
// a master with a replica and three sentinels (down after the same timeout), through SENTINEL
// FAILOVER and a SIGKILL, the replicas' clients asking the sentinels (bench/shared/redis-servers.js).
// The store runs with retryMs 1000 (its default) and timeoutMs 250 (below). What is reported
// (bench/parts/failover/failover-figures.js): requests failed, how far any client went beyond its bucket per
// replica and over both, the per-second admissions of a client on a healthy master and of one on
// the failed master, when the failed master's keys were shared again after the promotion, the
// guesses checked, and the keys left without an expiry.
//
// Run alone: node bench/parts/failover/failover.js [--quick|--smoke] [--out DIR]. Needs redis-server; without
// it the part records that it was skipped, and why.

import exchangePace, { RedisStore } from 'exchangepace'
import { Cluster as Cluster5 } from 'ioredis'
import { Cluster as Cluster6 } from 'ioredis6'
import { redisServerVersion, startReplicatedCluster, startSentinels } from '../../shared/redis-servers.js'
import { runFailover, runFailovers, runRestart, runSentinel } from './failover-run.js'
import { failoverFigures } from './failover-figures.js'
import { byMode, log, parseOptions, table, writeResult } from '../../shared/common.js'

const options = parseOptions()
// timeoutMs 250, the default since part 15 measured it (it was 50 when this part was written: this
// machine, shared at a load average of about 10 on two cores, stalls the process past 50 ms now and
// then, which times out every master at once, the store's behaviour under a stall, not under a
// failover).
const traffic = { rate: 10, clients: 24, sendPerSecond: 20, strangersPerSecond: 20, guessesPerSecond: 20, timeoutMs: 250, retryMs: 1000 }
const settings = byMode(options, {
  full: { nodeTimeoutMs: 2000, coverages: [false, true], kinds: ['failover', 'kill'], sentinel: ['failover', 'kill'], traffic: { ...traffic, beforeMs: 5000, afterMs: 10_000 } },
  quick: { nodeTimeoutMs: 1000, coverages: [false, true], kinds: ['failover', 'kill'], sentinel: ['failover', 'kill'], traffic: { ...traffic, beforeMs: 2000, afterMs: 3000 } },
  // The restart alone (test/redis/switches/failover.test.ts runs the cluster's scenarios), long enough
  // after it for a retry (retryMs) to end an outage.
  smoke: { nodeTimeoutMs: 1000, coverages: [], kinds: [], sentinel: [], traffic: { ...traffic, clients: 6, beforeMs: 600, afterMs: 1500 } }
})
const lib = { exchangePace, RedisStore }

// Issue 37's shape: 24 clients each sending 30 a second in lockstep through two replicas, the
// client pace alone at 10 a second, RedisStore timeoutMs 100 and retryMs 1000, each replica's
// ioredis Cluster client with enableAutoPipelining and otherwise its defaults, on a cluster with
// cluster-node-timeout 2000 and cluster-require-full-coverage no; a CLUSTER FAILOVER, a rebalance
// onto a new empty master, then a SIGKILL, each watched 11.5 s after the switch. Two variants meet
// each switch at once (two app replicas each): the two ioredis majors with those defaults, then
// ioredis 5 with slotsRefreshInterval 1000 and ioredis 5 without auto-pipelining.
const SHAPE = { rate: 10, clients: 24, sendPerSecond: 30, strangersPerSecond: 0, guessesPerSecond: 0, lockstep: true, clientPaceOnly: true, clientDefaults: true, timeoutMs: 100, retryMs: 1000 }
const shape = byMode(options, {
  full: { beforeMs: 3000, afterMs: 11_500, passes: 2 },
  quick: { beforeMs: 2000, afterMs: 11_500, passes: 1 },
  smoke: { passes: 0 }
})
const VARIANTS = [
  [{ label: 'ioredis 5', clientClass: Cluster5 }, { label: 'ioredis 6', clientClass: Cluster6 }],
  [{ label: 'ioredis 5, slotsRefreshInterval 1000', clientClass: Cluster5, clientOptions: { slotsRefreshInterval: 1000 } },
    { label: 'ioredis 5, no auto-pipelining', clientClass: Cluster5, clientOptions: { enableAutoPipelining: false } }]
].slice(0, shape.passes)

/** Issue 37's runs: per pass of variants, one cluster, its three switches in turn. */
async function shapeRuns () {
  const runs = []
  for (const variants of VARIANTS) {
    const cluster = await startReplicatedCluster({ nodeTimeoutMs: 2000, fullCoverage: false })
    try {
      for (const [how, master] of [['failover', cluster.masters[0]], ['rebalance', null], ['kill', cluster.masters[1]]]) {
        log(`  issue 37's shape, ${how}: ${variants.map(variant => variant.label).join(' and ')}`)
        const settings = variants.map(variant => ({ ...SHAPE, beforeMs: shape.beforeMs, afterMs: shape.afterMs, ...variant }))
        for (const run of await runFailovers(lib, cluster, master, how, settings)) runs.push(failoverFigures(run, SHAPE.rate))
      }
    } finally {
      await cluster.stop()
    }
  }
  return runs
}

/** One cluster per coverage setting; on each, the kinds of failover in turn, each on another master. */
async function clusterRuns () {
  const runs = []
  for (const fullCoverage of settings.coverages) {
    const cluster = await startReplicatedCluster({ nodeTimeoutMs: settings.nodeTimeoutMs, fullCoverage })
    try {
      for (const [i, how] of settings.kinds.entries()) {
        log(`  ${how}, cluster-require-full-coverage ${fullCoverage ? 'yes' : 'no'}`)
        const run = await runFailover(lib, cluster, cluster.masters[i], how, settings.traffic)
        runs.push({ fullCoverage, ...failoverFigures(run, settings.traffic.rate) })
      }
    } finally {
      await cluster.stop()
    }
  }
  return runs
}

/** Each Sentinel failover on a deployment of its own (sentinels refuse a second failover of one master for a while), down after nodeTimeoutMs. */
async function sentinelRuns () {
  const runs = []
  for (const how of settings.sentinel) {
    log(`  Sentinel, ${how}`)
    const deployment = await startSentinels({ downAfterMs: settings.nodeTimeoutMs })
    try {
      runs.push({ fullCoverage: null, ...failoverFigures(await runSentinel(lib, deployment, how, settings.traffic), settings.traffic.rate) })
    } finally {
      await deployment.stop()
    }
  }
  return runs
}

const row = figures => [
  figures.fullCoverage === null ? figures.how : `${figures.how === 'kill' ? 'SIGKILL' : 'CLUSTER FAILOVER'}, full coverage ${figures.fullCoverage ? 'yes' : 'no'}`,
  String(figures.failed),
  String(figures.excessPerReplica),
  figures.excessSharedHealthy === null ? '-' : String(figures.excessSharedHealthy),
  `${figures.excessSharedFailing} (<= ${figures.boundFailing})`,
  String(figures.promotionAfterTrigger),
  figures.outages.perReplica.map(outage => outage.sharedAgainAfterPromotion ?? '-').join(' / '),
  String(figures.outages.warningsForOtherMasters),
  `${figures.guesses.checked} (${figures.guesses.checkedDuringSwitch})`,
  `${figures.keysLeft.withoutExpiry} of ${figures.keysLeft.keys}`
]

if (redisServerVersion() === null) {
  log('failover: skipped: redis-server is not installed')
  writeResult(options, 'failover', { skipped: 'redis-server is not installed' })
} else {
  log(`failover: two replicas, ${settings.traffic.clients} clients at ${settings.traffic.rate}/s sending ${settings.traffic.sendPerSecond}/s, cluster-node-timeout ${settings.nodeTimeoutMs} ms`)
  const runs = await clusterRuns()
  log('  restart of a single Redis')
  runs.push({ fullCoverage: null, ...failoverFigures(await runRestart(lib, settings.traffic), settings.traffic.rate) })
  runs.push(...await sentinelRuns())
  const shaped = await shapeRuns()
  for (const figures of shaped) log(`  ${figures.label}, ${figures.how}: moved clients' excess from 1 s after the switch ${figures.excessSharedAfterFailing} where said shared, ${figures.excessSettledFailing} in all (${figures.pacedAfterSeconds} s of it said paced in memory), decided without Redis ${JSON.stringify(figures.unanswered)}, event loop late up to ${figures.loopDelayMs.max} ms`)
  log(table(['switch', 'failed', 'excess/replica', 'excess healthy', 'excess failed', 'promoted (s)', 'shared again (s)', 'other outages', 'guesses (switch)', 'no expiry'], runs.map(row)))
  const file = writeResult(options, 'failover', {
    description: 'a RedisStore through a Cluster failover and a restart of a single Redis, under two app replicas\' traffic',
    redisServer: redisServerVersion(),
    nodeTimeoutMs: settings.nodeTimeoutMs,
    traffic: settings.traffic,
    runs,
    shape: { ...SHAPE, beforeMs: shape.beforeMs, afterMs: shape.afterMs, nodeTimeoutMs: 2000 },
    shaped
  })
  log(`failover: results in ${file}`)
}
