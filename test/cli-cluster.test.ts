import t from 'tap'
import { main } from '../lib/operator/cli.js'
import { installedOrSkip, startCluster } from './helpers/cluster.js'

// `exchangepace --cluster` on a three-master Redis Cluster the file starts on loopback: given one
// node's URL, the CLI finds the master of the key's slot.

if (installedOrSkip('redis-server', 'the CLI\'s cluster test starts a cluster of its own')) {
  const cluster = await startCluster(t, 'redis-server')
  const client = cluster.client()
  const cli = async (...argv: string[]) => {
    const out = { stdout: '', stderr: '', code: -1 }
    out.code = await main([...argv, '--cluster', '--redis', `redis://127.0.0.1:${cluster.masters[0].port}`], {
      stdout: { write: (text: string) => { out.stdout += text } },
      stderr: { write: (text: string) => { out.stderr += text } },
      env: {}
    })
    return out
  }

  t.test('block, inspect and reset a key on whichever master holds it', async t => {
    const keys = ['reporting-service', 'webapp', 'billing', 'mobile-app']
    for (const id of keys) {
      const blocked = await cli('block', '--pace', '/token#client', '--client', id, '--seconds', '60', '--json')
      t.equal(blocked.code, 0, blocked.stderr)
      t.equal(await client.exists(`exchangepace:/token#client:${id}`), 1, `${id}: the block is in the cluster`)
      t.match(JSON.parse((await cli('inspect', '--pace', '/token#client', '--client', id, '--json')).stdout), { bucket: { state: 'blocked' } })
      t.match((await cli('reset', '--pace', '/token#client', '--client', id)).stdout, /it was blocked\.\n$/)
      t.equal(await client.exists(`exchangepace:/token#client:${id}`), 0, `${id}: reset`)
    }
    const masters = new Set(await Promise.all(keys.map(async id => (await cluster.masterOf(`exchangepace:/token#client:${id}`)).port)))
    t.ok(masters.size > 1, 'the keys live on more than one master')
  })
}
