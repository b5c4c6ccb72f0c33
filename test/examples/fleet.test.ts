import t from 'tap'
import { fileURLToPath } from 'node:url'
import { fleetFromEnv } from '../../examples/fleet.js'
import { buildServer } from '../../examples/oauth2-server.js'
import { buildServer as buildExample } from '../../examples/server.js'
import { runCli } from '../helpers/cli.js'
import { startExample } from '../helpers/example-process.js'
import { redisOrSkip, spareDatabase } from '../helpers/redis.js'
import { RedisStore } from '../../lib/index.js'

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
    const { code, stderr } = await runCli(['reset', '--redis', url, '--prefix', prefix, '--pace', '/admin#source:rejected', '--source', '127.0.0.1'])
    t.equal(code, 0, stderr)
    t.equal((await admin('right-token')).statusCode, 200, 'back in')
  })

  t.test('node examples/server.js with REDIS_URL: two instances share a failure budget and a block, and SIGTERM ends each', async t => {
    // The default prefix, as the example runs it: in a database of the test's own.
    const { url, db } = await spareDatabase(redis, new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'))
    const keys = redis.duplicate({ db })
    t.teardown(async () => {
      const written = await keys.keys('exchangepace:*')
      if (written.length > 0) await keys.del(...written)
      await keys.quit()
    })
    const script = fileURLToPath(new URL('../../examples/server.js', import.meta.url))
    const env = { ...process.env, REDIS_URL: url, TRUST_PROXY: '127.0.0.1', PORT: '0' }
    const instances = [
      await startExample(t, script, env, /server on (http:\/\/127\.0\.0\.1:\d+)/),
      await startExample(t, script, env, /server on (http:\/\/127\.0\.0\.1:\d+)/)
    ]
    const source = '198.51.100.61'
    const token = async (base: string, secret: string): Promise<number> => {
      const response = await fetch(`${base}/token`, {
        method: 'POST',
        headers: { authorization: `Basic ${Buffer.from(`reporting:${secret}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': source },
        body: 'grant_type=client_credentials'
      })
      await response.arrayBuffer()
      return response.status
    }
    const authorize = async (base: string): Promise<{ status: number, retryAfter: string | null }> => {
      const response = await fetch(`${base}/authorize?response_type=code&client_id=webapp`, { redirect: 'manual', headers: { 'x-forwarded-for': source } })
      await response.arrayBuffer()
      return { status: response.status, retryAfter: response.headers.get('retry-after') }
    }
    const guesses = []
    for (let i = 0; i < 5; i++) guesses.push(await token(instances[i % 2].base, `guess-${i}`))
    t.same(guesses, [401, 401, 401, 401, 401], 'five wrong secrets over both instances')
    t.same([await token(instances[0].base, 'reporting-secret'), await token(instances[1].base, 'reporting-secret')], [429, 429], 'one failure budget in Redis: the right secret is refused by both')

    const blocked = await runCli(['block', '--redis', url, '--pace', '/authorize', '--source', source, '--seconds', '600'])
    t.equal(blocked.code, 0, blocked.stderr)
    for (const { base } of instances) t.match(await authorize(base), { status: 429, retryAfter: /^(600|599)$/ }, `${base} refuses the blocked address`)
    const reset = await runCli(['reset', '--redis', url, '--pace', '/authorize', '--source', source])
    t.equal(reset.code, 0, reset.stderr)
    for (const { base } of instances) t.equal((await authorize(base)).status, 302, `${base} lets it in again`)

    for (const instance of instances) instance.child.kill('SIGTERM')
    t.same(await Promise.all(instances.map(instance => instance.exited)), [0, 0], 'each closes its server and its Redis connection, and exits')
  })
}
