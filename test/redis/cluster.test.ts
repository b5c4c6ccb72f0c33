import t from 'tap'
import { clusterBehaviour } from '../helpers/cluster-behaviour.js'
import { installedOrSkip, startCluster } from '../helpers/cluster.js'

// The shared-store behaviours on a three-master Redis Cluster the file starts on loopback, through
// ioredis's Cluster client (test/helpers/cluster-behaviour.ts).

if (installedOrSkip('redis-server', 'the Redis Cluster tests start a cluster of their own')) {
  clusterBehaviour(t, await startCluster(t, 'redis-server'))
}
