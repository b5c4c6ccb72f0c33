import t from 'tap'
import { Cluster } from 'ioredis'
import { Cluster as Cluster6 } from 'ioredis6'
import { failoverScenarios, redirectionChecks, type Major, type ReplicatedCluster } from '../../helpers/failover-behaviour.js'
import { installedOrSkip } from '../../helpers/cluster.js'
import { startReplicatedCluster } from '../../../bench/shared/redis-servers.js'

// A Redis Cluster's redirections and switches under each ioredis major the peer range names (5,
// this package's ioredis, and 6 as the devDependency ioredis6), on one cluster of three masters
// with a replica each, as docs/stores.md recommends it (cluster-node-timeout 2000,
// cluster-require-full-coverage no): both majors' stores meet each switch at once.

const MAJORS: Major[] = [
  { label: '5', Cluster },
  { label: '6', Cluster: Cluster6 as unknown as Major['Cluster'] }
]

// About 60 s on a quiet machine (three switches of 14 to 28 s each, one after the other); a loaded
// one stretches the switches (a rebalance, an election) well past tap's 120 s per file.
t.setTimeout(300_000)

if (installedOrSkip('redis-server', 'the failover tests start a cluster with replicas of their own')) {
  const cluster = await startReplicatedCluster({ nodeTimeoutMs: 2000, fullCoverage: false }) as ReplicatedCluster
  t.teardown(cluster.stop)
  redirectionChecks(t, cluster, MAJORS)
  failoverScenarios(t, cluster, MAJORS)
}
