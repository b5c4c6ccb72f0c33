import t from 'tap'
import { createRequire } from 'node:module'
import { Redis } from 'ioredis'
import { blockBehaviour } from '../helpers/block-behaviour.js'
import { installedOrSkip, startAlone, startCluster } from '../helpers/cluster.js'

// A block holds on every replica, Redis or no Redis (test/helpers/block-behaviour.ts), on a redis-server the
// file starts on loopback (it stops it, which the shared server on 6379 must never be), through
// ioredis 5 and through ioredis 6 (the one @fastify/redis 9 depends on), and on a three-master
// cluster, through ioredis's Cluster client.

/** ioredis 6, as @fastify/redis 9 brings it. */
const fromFastifyRedis = createRequire(createRequire(import.meta.url).resolve('@fastify/redis'))
const Redis6 = fromFastifyRedis('ioredis').Redis as typeof Redis

if (installedOrSkip('redis-server', 'the block tests stop a server of their own')) {
  t.test('one Redis server', async t => {
    const server = await startAlone(t, 'redis-server')
    const admin = new Redis({ port: server.port, host: '127.0.0.1' })
    t.teardown(() => admin.disconnect())
    blockBehaviour(t, {
      client: t => {
        const client = new Redis({ port: server.port, host: '127.0.0.1', enableAutoPipelining: true })
        t.teardown(() => client.quit())
        return client
      },
      cli: ['--redis', `redis://127.0.0.1:${server.port}`],
      pause: async () => {
        server.pause()
        return () => { server.resume() }
      },
      call: async (...command) => await admin.call(command[0], ...command.slice(1))
    })
  })

  t.test('one Redis server, through ioredis 6', async t => {
    const server = await startAlone(t, 'redis-server')
    const admin = new Redis({ port: server.port, host: '127.0.0.1' })
    t.teardown(() => admin.disconnect())
    t.match(fromFastifyRedis('ioredis/package.json'), { version: /^6\./ }, 'ioredis 6')
    blockBehaviour(t, {
      client: t => {
        const client = new Redis6({ port: server.port, host: '127.0.0.1', enableAutoPipelining: true })
        t.teardown(() => client.quit())
        return client
      },
      cli: ['--redis', `redis://127.0.0.1:${server.port}`],
      pause: async () => {
        server.pause()
        return () => { server.resume() }
      },
      call: async (...command) => await admin.call(command[0], ...command.slice(1))
    })
  })

  t.test('a cluster of three masters', async t => {
    const cluster = await startCluster(t, 'redis-server')
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
