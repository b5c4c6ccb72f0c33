import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import formbody from '@fastify/formbody'
import { Redis } from 'ioredis'
import exchangePace, { RedisStore, type RedisUnavailable } from '../../lib/index.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { form } from '../helpers/shared-behaviour.js'

// A RedisStore whose client is closed (quit) before the server is, as a shutdown in the wrong
// order does it: every request, in flight at the quit or sent after it, is answered without a 5xx
// by the store's outage policy, which says so once; and the server still closes.

const SECRET = 'quit-secret'

async function server (store: RedisStore, log: Array<Record<string, unknown>>): Promise<FastifyInstance> {
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { log.push(JSON.parse(line)) } } } })
  await app.register(formbody)
  await app.register(exchangePace, { store })
  app.post('/token', { config: { pace: { perSecond: 2, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
    if ((request.body as Record<string, string>).client_secret !== SECRET) {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token', token_type: 'Bearer' }
  })
  app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async () => 'ok')
  await app.ready()
  return app
}

const client = await redisOrSkip()
if (client !== null) {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  /** What each mode answers, after the quit, to three exchanges of one client, a stranger, and three authorizations. */
  const expected: Record<RedisUnavailable, number[]> = {
    fallback: [200, 200, 429, 429, 200, 200, 429], // the stranger finds the bucket empty: nothing to refund
    open: [200, 200, 200, 401, 200, 200, 200],
    closed: [429, 429, 429, 429, 429, 429, 429]
  }
  for (const whenUnavailable of ['fallback', 'open', 'closed'] as const) {
    t.test(`whenUnavailable '${whenUnavailable}': a client quit before the server closes fails no request`, async t => {
      const own = new Redis(url, { lazyConnect: true, enableAutoPipelining: true, maxRetriesPerRequest: 1 })
      await own.connect()
      const log: Array<Record<string, unknown>> = []
      const store = new RedisStore({ client: own, prefix: uniquePrefix(`quit-${whenUnavailable}`), timeoutMs: 1000, whenUnavailable, retryMs: 1000 })
      const app = await server(store, log)
      const exchange = (id: string, secret = SECRET) => app.inject({ method: 'POST', url: '/token', ...form(['client_id', id], ['client_secret', secret]) })

      t.equal((await exchange('before')).statusCode, 200, 'granted by Redis while the client was open')
      // Requests on their way when the client quits: whether a reserve was written before QUIT or
      // found the connection closed, each is answered, by Redis or by the outage policy.
      const inFlight = Array.from({ length: 4 }, (_, i) => exchange(`in-flight-${i}`))
      await own.quit()
      const flown = (await Promise.all(inFlight)).map(response => response.statusCode)
      t.same(flown.filter(status => status !== 200 && !(whenUnavailable === 'closed' && status === 429)), [], `answered: ${flown.join(', ')}`)

      const after = []
      for (let i = 0; i < 3; i++) after.push(await exchange('after'))
      after.push(await exchange('after', 'guess'))
      for (let i = 0; i < 3; i++) after.push(await app.inject('/authorize'))
      t.same(after.map(response => response.statusCode), expected[whenUnavailable], 'the outage policy answers')
      if (whenUnavailable === 'closed') t.equal(after[0].headers['retry-after'], '1', 'retry after retryMs, in whole seconds')
      t.ok(store.unavailable)
      const warnings = log.filter(line => line.level === 40)
      t.equal(warnings.length, 1, 'one warning')
      t.match(warnings[0]?.msg, /Redis store unavailable \(Connection is closed\.\)/)
      await t.resolves(app.close(), 'the server closes')
    })
  }
}
