import t from 'tap'
import Fastify from 'fastify'
import { exchangePace, RedisStore } from '../../lib/index.js'
import { main } from '../../lib/operator/cli.js'
import { installedOrSkip, startCluster } from '../helpers/cluster.js'
import { fleetFromEnv } from '../../examples/fleet.js'
import { buildServer } from '../../examples/oauth2-server.js'

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

  t.test('fastify.pace.list scans every master of the Cluster', async t => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(exchangePace, { store: new RedisStore({ client, prefix: 'exchangepace-list:', timeoutMs: 1000 }) })
    app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', name: 'listed' } } }, async () => 'ok')
    await app.ready()
    const keys = ['reporting-service', 'webapp', 'billing', 'mobile-app', 'batch', 'kiosk']
    for (const id of keys) await app.pace.block('listed', { client: id }, 60)
    const masters = new Set(await Promise.all(keys.map(async id => (await cluster.masterOf(`exchangepace-list:listed:${id}`)).port)))
    t.ok(masters.size > 1, 'the keys live on more than one master')
    const listed = await app.pace.list('listed')
    t.same(listed.map(entry => entry.who.client).sort(), [...keys].sort())
    t.ok(listed.every(entry => entry.remaining === 0 && entry.blockedUntil !== null))
    t.equal((await app.pace.list('listed', { limit: 2 })).length, 2)
    const paces = await cli('paces', '--prefix', 'exchangepace-list:', '--json')
    t.match(JSON.parse(paces.stdout).paces, [{ name: 'listed', keyKind: 'client', routes: ['POST /token'] }], 'the catalog, read from the Cluster')
    const listedByCli = JSON.parse((await cli('list', '--pace', 'listed', '--prefix', 'exchangepace-list:', '--json')).stdout)
    t.same(listedByCli.keys.map((entry: { who: { client: string } }) => entry.who.client).sort(), [...keys].sort(), 'the CLI lists every master\'s keys')
    for (const id of keys) await app.pace.reset('listed', { client: id })
    t.same(await app.pace.list('listed'), [])
  })

  t.test('inspect with a client alone on a pair pace reads its pairs on every master', async t => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(exchangePace, { store: new RedisStore({ client, prefix: 'exchangepace-pairs:', timeoutMs: 1000 }) })
    app.post('/token', { config: { pace: { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected', name: 'pairs' } } }, async () => 'ok')
    await app.ready()
    const sources = ['192.0.2.1', '192.0.2.2', '192.0.2.3', '192.0.2.4', '192.0.2.5', '192.0.2.6']
    for (const [i, source] of sources.entries()) await app.pace.block('pairs', { client: 'victim', source }, 60 + i)
    const masters = new Set(await Promise.all(sources.map(async source => (await cluster.masterOf(`exchangepace-pairs:pairs:victim\u001f${source}`)).port)))
    t.ok(masters.size > 1, 'the pairs live on more than one master')
    t.match(await app.pace.inspect('pairs', { client: 'victim' }), { remaining: 0, source: '192.0.2.6', pairsHeldBack: 6, blockedUntil: Date }, 'the longest block, of six')
    t.match(JSON.parse((await cli('inspect', '--pace', 'pairs', '--client', 'victim', '--prefix', 'exchangepace-pairs:', '--json')).stdout), { pairsHeldBack: 6, source: '192.0.2.6', bucket: { state: 'blocked' } }, 'so does the CLI')
    await app.pace.reset('pairs', { client: 'victim' })
    t.match(await app.pace.inspect('pairs', { client: 'victim' }), { remaining: 5, source: null, pairsHeldBack: 0 })
  })

  t.test('REDIS_CLUSTER: two replicas of the example share their paces in the Cluster', async t => {
    const nodes = cluster.masters.map(({ port }) => `127.0.0.1:${port}`).join(',')
    const fleets = [fleetFromEnv({ REDIS_CLUSTER: nodes }), fleetFromEnv({ REDIS_CLUSTER: nodes })]
    const apps = fleets.map(fleet => buildServer({ store: fleet.store }))
    for (const [i, app] of apps.entries()) {
      app.addHook('onClose', fleets[i].close)
      await app.ready()
    }
    t.teardown(() => Promise.all(apps.map(app => app.close())))
    await apps[0].pace.block('/authorize', { source: '198.51.100.61' }, 60)
    const refused = await apps[1].inject({ url: '/authorize?response_type=code&client_id=webapp', remoteAddress: '198.51.100.61' })
    t.equal(refused.statusCode, 429, 'a block on one replica holds on the other')
    await apps[1].pace.reset('/authorize', { source: '198.51.100.61' })
    t.equal((await apps[0].inject({ url: '/authorize?response_type=code&client_id=webapp', remoteAddress: '198.51.100.61' })).statusCode, 302, 'a reset on the other lifts it')
  })
}
