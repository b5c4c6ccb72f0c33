import { startReplicatedCluster } from './bench/cluster.js'
const cluster = await startReplicatedCluster({ nodeTimeoutMs: 2000, fullCoverage: false })
try {
  const t0 = performance.now()
  const added = await cluster.rebalance()
  console.log('ok', added.port, performance.now() - t0)
} catch (err) { console.log('ERR', err) } finally { await cluster.stop() }
