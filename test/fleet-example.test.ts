import t from 'tap'
import { fleetFromEnv } from '../examples/fleet.js'
import { buildServer } from '../examples/oauth2-server.js'
import { buildServer as buildExample } from '../examples/server.js'
import { redisOrSkip } from './helpers/redis.js'
import { RedisStore } from '../lib/index.js'
import { main } from '../lib/operator/cli.js'

/** examples/fleet.js: what the examples read from their environment to run as a fleet. */

t.test('without the variables, each replica paces in its own memory and trusts no proxy', async t => {
  const fleet = fleetFromEnv({})
  t.same([fleet.store, fleet.trustProxy], [undefined, undefined])
  await fleet.close()
})

t.test('TRUST_PROXY becomes Fastify\'s trustProxy: true, a hop count, or addresses and ranges', async t => {
  t.equal(fleetFromEnv({ TRUST_PROXY: 'true' }).trustProxy, true)
  t.equal(fleetFromEnv({ TRUST_PROXY: '2' }).trustProxy, 2)
  t.same(fleetFromEnv({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }).trustProxy, ['10.0.0.0/8', '127.0.0.1'])
  t.equal(fleetFromEnv({ TRUST_PROXY: '' }).trustProxy, undefined)
  const app = buildServer({ trustProxy: fleetFromEnv({ TRUST_PROXY: '127.0.0.1' }).trustProxy })
  t.teardown(() => app.close())
  app.get('/ip', async request => request.ip)
  t.equal((await app.inject({ url: '/ip', remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': '198.51.100.7' } })).body, '198.51.100.7', 'the proxy\'s X-Forwarded-For is believed')
})

t.test('REDIS_CLUSTER gives a RedisStore on a Cluster of its nodes; a wrong value says what is wrong', async t => {
  const fleet = fleetFromEnv({ REDIS_CLUSTER: '10.0.0.5:7000,[::1]:7001' })
  // The examples import the built package: its RedisStore, by name.
  t.equal(fleet.store?.constructor.name, 'RedisStore')
  await fleet.close()
  t.throws(() => fleetFromEnv({ REDIS_CLUSTER: '10.0.0.5' }), /REDIS_CLUSTER must be host:port,host:port\.\.\., got "10\.0\.0\.5"/)
  t.throws(() => fleetFromEnv({ REDIS_CLUSTER: 'a:7000', REDIS_URL: 'redis://a' }), /give REDIS_URL or REDIS_CLUSTER, not both/)
})

const redis = await redisOrSkip()
if (redis !== null) {
  t.test('REDIS_URL: two replicas share their paces in Redis, and close their connections', async t => {
    const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
    const fleets = [fleetFromEnv({ REDIS_URL: url }), fleetFromEnv({ REDIS_URL: url })]
    const apps = fleets.map(fleet => buildServer({ store: fleet.store }))
    for (const [i, app] of apps.entries()) {
      app.addHook('onClose', fleets[i].close)
      await app.ready()
    }
    t.teardown(() => Promise.all(apps.map(app => app.close())))
    const example = buildExample({ store: new RedisStore({ client: redis, prefix: `exchangepace-fleet-doc-${process.pid}:` }) })
    t.teardown(() => example.close())
    await example.ready()
    t.match(example.swagger().info.description, 'Every rate is shared by all replicas (Redis).')
    const source = `198.51.100.${(process.pid % 200) + 1}`
    await apps[0].pace.block('/authorize', { source }, 60)
    const refused = await apps[1].inject({ url: '/authorize?response_type=code&client_id=webapp', remoteAddress: source })
    t.equal(refused.statusCode, 429, 'a block on one replica holds on the other')
    await apps[1].pace.reset('/authorize', { source })
  })

  t.test('five wrong admin tokens lock the admin routes; the CLI\'s reset of /admin#source:rejected is the way back in', async t => {
    const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
    const prefix = `exchangepace-fleet-${process.pid}-${Date.now()}:`
    const client = redis.duplicate()
    const app = buildServer({ store: new RedisStore({ client, prefix, timeoutMs: 1000 }), adminToken: 'right-token' })
    app.addHook('onClose', async () => { await client.quit() })
    await app.ready()
    t.teardown(() => app.close())
    const admin = (token: string) => app.inject({ method: 'GET', url: '/admin/paces', headers: { authorization: `Bearer ${token}` } })
    for (let i = 0; i < 5; i++) t.equal((await admin(`wrong-${i}`)).statusCode, 401)
    const locked = await admin('right-token')
    t.equal(locked.statusCode, 429, 'the right token is refused too')
    t.equal(locked.headers['retry-after'], '720', '12 minutes')
    const out = { stdout: '', stderr: '' }
    const code = await main(['reset', '--redis', url, '--prefix', prefix, '--pace', '/admin#source:rejected', '--source', '127.0.0.1'], {
      stdout: { write: (text: string) => { out.stdout += text } },
      stderr: { write: (text: string) => { out.stderr += text } },
      env: {}
    })
    t.equal(code, 0, out.stderr)
    t.equal((await admin('right-token')).statusCode, 200, 'back in')
  })
}
