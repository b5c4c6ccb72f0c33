import t from 'tap'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import formbody from '@fastify/formbody'
import { spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import exchangePace, { RedisStore } from '../../lib/index.js'
import { redisOrSkip, underCI, uniquePrefix } from '../helpers/redis.js'
// The bench's own: plain JavaScript, as tap runs tests without type-checking them.
import { startAlone } from '../../bench/shared/redis-servers.js'

// The plugin on a RedisStore, over a real Redis: replicas share one pace, strangers leave nothing
// in Redis, and a Redis that stops and comes back is survived without a single 5xx.

const SECRET = 'reporting-secret'

async function tokenServer (store: RedisStore, logLines: Array<Record<string, unknown>> = []): Promise<FastifyInstance> {
  const app = Fastify({
    logger: { level: 'info', stream: { write: (line: string) => { logLines.push(JSON.parse(line)) } } },
    logController: new LogController({ disableRequestLogging: true })
  })
  await app.register(formbody)
  await app.register(exchangePace, { store })
  app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
    const { client_secret: secret } = request.body as Record<string, string>
    if (secret !== SECRET) {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token', token_type: 'Bearer' }
  })
  await app.ready()
  return app
}

const exchange = (app: FastifyInstance, clientId: string, secret = SECRET) => app.inject({
  method: 'POST',
  url: '/token',
  headers: { 'content-type': 'application/x-www-form-urlencoded' },
  payload: `grant_type=client_credentials&client_id=${encodeURIComponent(clientId)}&client_secret=${secret}`
})

const client = await redisOrSkip()
if (client !== null) {
  t.test('two replicas sharing one Redis admit the declared rate in total, not twice it', async t => {
    const prefix = uniquePrefix('replicas')
    const stores = [new RedisStore({ client, prefix, timeoutMs: 1000 }), new RedisStore({ client, prefix, timeoutMs: 1000 })]
    const replicas = [await tokenServer(stores[0]), await tokenServer(stores[1])]
    t.teardown(() => Promise.all(replicas.map(app => app.close())))
    const responses = await Promise.all(Array.from({ length: 40 }, (_, i) => exchange(replicas[i % 2], 'reporting')))
    t.equal(responses.filter(r => r.statusCode === 200).length, 5)
    t.equal(responses.filter(r => r.statusCode === 429).length, 35)
    t.same(stores.map(store => store.unavailable), [false, false], 'Redis decided every request: nothing fell back')
  })

  t.test('strangers naming a client id with a wrong secret leave it its pace and leave no keys in Redis', async t => {
    const prefix = uniquePrefix('strangers')
    const app = await tokenServer(new RedisStore({ client, prefix, timeoutMs: 1000 }))
    t.teardown(() => app.close())
    const strangers = await Promise.all(Array.from({ length: 200 }, () => exchange(app, 'reporting', 'guess')))
    t.ok(strangers.every(r => r.statusCode === 401 || r.statusCode === 429))
    const random = await Promise.all(Array.from({ length: 200 }, (_, i) => exchange(app, `random-${i}`, 'guess')))
    t.ok(random.every(r => r.statusCode === 401))
    await client.ping()
    t.same((await client.keys(`${prefix}*`)).filter(key => key !== `${prefix}catalog`), [], 'every refunded bucket was full again: no key')
    const owner = await Promise.all(Array.from({ length: 5 }, () => exchange(app, 'reporting')))
    t.same(owner.map(r => r.statusCode), [200, 200, 200, 200, 200], 'the client still has its whole second')
    t.equal(owner[0].headers.ratelimit, '"/token";r=4;t=1', 'the client reads its own quota')
  })

  t.test('a key a client spent expires within one second', async t => {
    const prefix = uniquePrefix('expiry')
    const app = await tokenServer(new RedisStore({ client, prefix, timeoutMs: 1000 }))
    t.teardown(() => app.close())
    await exchange(app, 'reporting')
    const ttl = await client.pttl(`${prefix}/token:reporting`)
    t.ok(ttl > 0 && ttl <= 1000, `PTTL ${ttl}`)
  })

  // These start and stop a server of their own: under CI a missing redis-server fails the run.
  // While theirs is down, their client's reconnections are refused (ECONNREFUSED) and a connection
  // killed under it is reset (ECONNRESET): ioredis emits each as an 'error' event, which it would
  // print as unhandled without a listener. What the store makes of the outage is what is asserted.
  const expectedWhileStopped = (): void => {}
  const redisServer = spawnSync('redis-server', ['--version']).status === 0
  if (!redisServer && underCI()) throw new Error('CI needs redis-server installed for the outage tests (.ci/run installs it)')
  t.test('Redis stopped mid-run: requests flow on the per-replica fallback, one warning, and Redis is picked up again', { skip: redisServer ? false : 'redis-server is not installed' }, async t => {
    let server = await startAlone()
    const { port } = server
    t.teardown(() => server.kill())
    const own = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true, maxRetriesPerRequest: 1, retryStrategy: () => 20 })
    own.on('error', expectedWhileStopped)
    t.teardown(() => own.disconnect())
    const logLines: Array<Record<string, unknown>> = []
    const store = new RedisStore({ client: own, timeoutMs: 1000, retryMs: 50 })
    const app = await tokenServer(store, logLines)
    t.teardown(() => app.close())

    t.equal((await exchange(app, 'reporting')).statusCode, 200)
    t.equal(await own.exists('exchangepace:/token:reporting'), 1, 'the unit was taken in Redis')

    await server.kill()
    const during = []
    for (let i = 0; i < 8; i++) during.push((await exchange(app, i % 2 === 0 ? 'reporting' : 'stranger', i % 2 === 0 ? SECRET : 'guess')).statusCode)
    t.same(during.filter(code => code >= 500), [], 'no request failed because of the store')
    t.ok(during.includes(200), 'the client was served from memory')
    t.ok(store.unavailable)
    t.equal(app.pace.get('/token')!.size, 1, 'only the spender has a row in memory; the stranger was refunded there')
    const warnings = logLines.filter(line => line.level === 40)
    t.equal(warnings.length, 1, 'one warning for the whole outage')
    t.match(warnings[0].msg, /Redis store unavailable .*pacing per replica in memory/)

    server = await startAlone({ port })
    for (let i = 0; i < 250 && own.status !== 'ready'; i++) await sleep(20)
    t.equal(own.status, 'ready', 'the client is connected again')
    await sleep(60)
    t.equal((await exchange(app, 'back')).statusCode, 200)
    t.notOk(store.unavailable, 'Redis answered: the store is shared again')
    t.equal(await own.exists('exchangepace:/token:back'), 1, 'the unit was taken in Redis')
    t.ok(logLines.some(line => line.level === 30 && /answers again/.test(String(line.msg))))
  })

  t.test('a unit granted by the fallback is refunded in memory, never in Redis', { skip: redisServer ? false : 'redis-server is not installed' }, async t => {
    let server = await startAlone()
    const { port } = server
    t.teardown(() => server.kill())
    const own = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1, retryStrategy: () => 20 })
    own.on('error', expectedWhileStopped)
    t.teardown(() => own.disconnect())
    const store = new RedisStore({ client: own, timeoutMs: 1000, retryMs: 50 })
    const app = await tokenServer(store)
    t.teardown(() => app.close())
    const local = app.pace.get('/token')!
    const shared = store.pace('/token', { limit: 5, window: 1 }, local, app.log)

    await server.kill()
    const held = await shared.reserve('held')
    t.ok(held.granted)
    t.equal(local.size, 1)

    server = await startAlone({ port })
    for (let i = 0; i < 250 && own.status !== 'ready'; i++) await sleep(20)
    t.equal(own.status, 'ready', 'the client is connected again')
    held.refund()
    await own.ping() // answered after any command the refund sent
    t.equal(local.size, 0, 'refunded in memory')
    // The restarted server has run no command but this test's: a refund sent to Redis would show as a script call.
    const stats = await own.info('commandstats')
    t.match(stats, /cmdstat_ping:calls=/, 'the server counts the commands it ran')
    t.notMatch(stats, /cmdstat_eval/, 'no script ran in Redis: the refund did not reach it')
  })
}
