import t from 'tap'
import { Redis } from 'ioredis'
import { RedisStore } from '../../lib/index.js'
import { blockBehaviour } from '../helpers/block-behaviour.js'
import { clusterBehaviour } from '../helpers/cluster-behaviour.js'
import { installedOrSkip, startAlone, startCluster } from '../helpers/cluster.js'
import { uniquePrefix } from '../helpers/redis.js'
import { sharedBehaviour } from '../helpers/shared-behaviour.js'

// The shared-store behaviours on Valkey, which the file starts itself on loopback: one server
// alone, through an ioredis client, and a three-master cluster, through ioredis's Cluster client;
// and a block on every replica through an outage (test/helpers/block-behaviour.ts) on each.

if (installedOrSkip('valkey-server', 'the Valkey tests start servers of their own (.ci/run installs Debian\'s valkey-server)')) {
  const [alone, cluster] = await Promise.all([startAlone(t, 'valkey-server'), startCluster(t, 'valkey-server')])

  t.test('one Valkey server', async t => {
    const client = new Redis({ port: alone.port, host: '127.0.0.1', enableAutoPipelining: true, maxRetriesPerRequest: 1 })
    t.teardown(() => client.quit())
    t.match(await client.info('server'), /valkey_version:/, 'the server is Valkey')
    let prefix = ''
    const store = (): Record<string, unknown> => {
      prefix = uniquePrefix('valkey')
      return { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }
    }
    const rows = async (_app: unknown, name: string): Promise<number> => {
      // Refunds are sent from onResponse without waiting: after this turn, a KEYS comes after them.
      await new Promise(resolve => setImmediate(resolve))
      return (await client.keys(`${prefix}${name}:*`)).length
    }
    sharedBehaviour(t, store, rows, 2000)
  })

  t.test('a Valkey cluster of three masters', async t => {
    clusterBehaviour(t, cluster)
  })

  t.test('blocks through an outage, on one Valkey server', async t => {
    const admin = new Redis({ port: alone.port, host: '127.0.0.1' })
    t.teardown(() => admin.disconnect())
    blockBehaviour(t, {
      client: t => {
        const client = new Redis({ port: alone.port, host: '127.0.0.1', enableAutoPipelining: true })
        t.teardown(() => client.quit())
        return client
      },
      cli: ['--redis', `redis://127.0.0.1:${alone.port}`],
      pause: async () => {
        alone.pause()
        return () => { alone.resume() }
      },
      call: async (...command) => await admin.call(command[0], ...command.slice(1))
    })
  })

  t.test('blocks through an outage, on a Valkey cluster', async t => {
    const admin = cluster.client()
    blockBehaviour(t, {
      client: t => {
        const client = cluster.client({ enableAutoPipelining: true })
        t.teardown(() => client.quit())
        return client
      },
      cli: ['--cluster', '--redis', `redis://127.0.0.1:${cluster.masters[0].port}`],
      pause: async () => {
        for (const master of cluster.masters) master.pause()
        return () => { for (const master of cluster.masters) master.resume() }
      },
      call: async (...command) => await admin.call(command[0], ...command.slice(1))
    })
  })
}
