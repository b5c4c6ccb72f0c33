import t from 'tap'
import type { Cluster } from 'ioredis'
import { Cluster as Cluster6 } from 'ioredis6'
import { clusterBehaviour } from '../helpers/cluster-behaviour.js'
import { installedOrSkip, startCluster } from '../helpers/cluster.js'

// test/redis/cluster.test.ts's behaviours through ioredis 6's Cluster client (the devDependency
// ioredis6): the peer range names both majors.

if (installedOrSkip('redis-server', 'the Redis Cluster tests start a cluster of their own')) {
  clusterBehaviour(t, await startCluster(t, 'redis-server', Cluster6 as unknown as typeof Cluster))
}
