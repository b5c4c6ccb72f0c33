import { exchangePace, RedisStore } from './lib/index.js'
import { startReplicatedCluster } from './bench/cluster.js'
import { runFailover } from './bench/failover-run.js'
import { failoverFigures } from './bench/failover-figures.js'
import { Cluster as Cluster6 } from 'ioredis6'
import { Cluster as Cluster5 } from 'ioredis'

const seen = new Map<string, number>()
const orig = (RedisStore.prototype as any)._failed
;(RedisStore.prototype as any)._failed = function (k: string, err: Error, log: any) { const m = err.message.replace(/\d+/g, 'N'); seen.set(m, (seen.get(m) ?? 0) + 1); return orig.call(this, k, err, log) }
const major = process.argv[2] ?? '5'
const hows = (process.argv[3] ?? 'failover,rebalance,kill').split(',')
const settings = { rate: 10, clients: 24, sendPerSecond: 30, strangersPerSecond: 0, guessesPerSecond: 0, beforeMs: 2000, afterMs: Number(process.env.AFTER ?? 12000), timeoutMs: 100, retryMs: 1000, clientPaceOnly: true, clientDefaults: true, lockstep: true, clientClass: major === '6' ? Cluster6 : Cluster5 }
const cluster = await startReplicatedCluster({ nodeTimeoutMs: 2000, fullCoverage: false })
try {
  for (const how of hows) {
    const master = how === 'failover' ? cluster.masters[0] : how === 'kill' ? cluster.masters[1] : null
    const run = await runFailover({ exchangePace, RedisStore }, cluster, master, how, settings)
    for (const l of run.outageLines) console.log('   line', ((l.at - run.promotedAt) / 1000).toFixed(3), l.replica, l.msg)
    console.log('   trigger', ((run.triggeredAt - run.promotedAt) / 1000).toFixed(3))
    const f = failoverFigures(run, 10)
    console.log(JSON.stringify({ major, how: f.how, promoted: f.promotionAfterTrigger, failed: f.failed, clients: f.clients, excessSettledFailing: f.excessSettledFailing, excessSettledHealthy: f.excessSettledHealthy, settled: f.settledSeconds, unanswered: f.unanswered, loop: f.loopDelayMs, clientErrors: f.clientErrors, errs: f.clientErrorSamples }))
    console.log('  failing most/s', f.mostPerSecond.failing?.map(([k, n]: [number, number]) => `${k}:${n}`).join(' '))
    console.log('  healthy most/s', f.mostPerSecond.healthy?.map(([k, n]: [number, number]) => `${k}:${n}`).join(' '))
    console.log('  failed', JSON.stringify([...seen])); seen.clear()
    console.log('  outages', JSON.stringify(f.outages))
  }
} finally {
  await cluster.stop()
}
