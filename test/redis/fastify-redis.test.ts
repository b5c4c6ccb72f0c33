import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import formbody from '@fastify/formbody'
import fastifyRedis from '@fastify/redis'
import exchangePace, { RedisStore } from '../../lib/index.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { form } from '../helpers/shared-behaviour.js'

// The store on the client @fastify/redis decorates the instance with (fastify.redis), as
// docs/stores.md shows it: @fastify/redis 9 brings ioredis 6, where the other tests use ioredis 5.

const SECRET = 'plugin-secret'

/**
 * A replica as docs/stores.md wires it: @fastify/redis first (it waits for the connection before
 * the next plugin loads), then the pace on its client.
 */
async function replica (url: string, prefix: string): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(formbody)
  await app.register(fastifyRedis, { url, enableAutoPipelining: true })
  await app.register(exchangePace, { store: new RedisStore({ client: app.redis, prefix, timeoutMs: 1000 }) })
  app.post('/token', { config: { pace: { perSecond: 3, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
    if ((request.body as Record<string, string>).client_secret !== SECRET) {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token', token_type: 'Bearer' }
  })
  await app.ready()
  return app
}

async function exchange (app: FastifyInstance, id: string, secret = SECRET): Promise<number> {
  return (await app.inject({ method: 'POST', url: '/token', ...form(['client_id', id], ['client_secret', secret]) })).statusCode
}

const client = await redisOrSkip()
if (client !== null) {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'

  t.test('two replicas on @fastify/redis\'s clients share one pace, strangers leave no key, and close() quits the clients', async t => {
    const prefix = uniquePrefix('fastify-redis')
    const replicas = await Promise.all([replica(url, prefix), replica(url, prefix)])
    t.teardown(() => Promise.all(replicas.map(app => app.close())))
    t.equal(replicas[0].redis.status, 'ready', 'connected before the first request')
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => exchange(replicas[i % 2], 'reporting')))
    t.equal(statuses.filter(status => status === 200).length, 3, 'the declared 3/s in total, not per replica')
    const strangers = await Promise.all(Array.from({ length: 50 }, (_, i) => exchange(replicas[i % 2], `named-${i}`, 'guess')))
    t.ok(strangers.every(status => status === 401))
    await Promise.all(replicas.map(app => app.redis.ping())) // after the refunds each replica sent
    t.same((await client.keys(`${prefix}*`)).filter(key => key !== `${prefix}catalog`), [`${prefix}/token:reporting`], 'only the client that spent has a key')
    await Promise.all(replicas.map(app => app.close()))
    for (const app of replicas) await t.rejects(app.redis.ping(), /Connection is closed/, '@fastify/redis quit its client on close')
  })
}
