import t from 'tap'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import { Redis } from 'ioredis'
import exchangePace, { RedisStore, type PaceRouteOptions } from '../../lib/index.js'
import { installedOrSkip, startAlone } from '../helpers/cluster.js'

// More sources than Redis's memory holds: a flood of made-up ids with wrong secrets, each from a
// /64 of its own, against a Redis of the test's own with a small `maxmemory`. With the policy
// docs/stores.md recommends (volatile-ttl) Redis forgets the rows that would be full soonest and
// keeps a locked-out pair; with Redis's default (noeviction) a full Redis refuses the scripts'
// writes, and every replica paces in its own memory, saying so, until it has room again. Either
// way no request fails and the real client is served.

const TOKEN_PACES: PaceRouteOptions[] = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 5, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' },
  { limit: 100, window: 86400, key: 'source', spend: 'rejected' }
]
const REAL = 'reporting-service'
const GUESSER = '192.0.2.66'
/** Sources enough to fill 2 MB of keys (about 4,000 keys over an empty Redis) more than twice over. */
const SOURCES = 6_000

const canRun = installedOrSkip('redis-server', 'the maxmemory tests start a Redis server of their own')

interface Line { level: number, msg: string }

async function floodedApp (tt: typeof t, policy: string): Promise<{ send: (client: string, secret: string, source: string) => Promise<number>, redis: Redis, lines: Line[] }> {
  const server = await startAlone(tt, 'redis-server')
  const redis = new Redis({ port: server.port, enableAutoPipelining: true })
  tt.teardown(() => redis.disconnect())
  await redis.config('SET', 'maxmemory', '2mb')
  await redis.config('SET', 'maxmemory-policy', policy)
  const lines: Line[] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } } })
  tt.teardown(() => app.close())
  await app.register(formbody)
  await app.register(exchangePace, { store: new RedisStore({ client: redis, timeoutMs: 5000 }), isClient: id => id === REAL })
  app.post('/token', { config: { pace: TOKEN_PACES } }, async (request, reply) => {
    if ((request.body as Record<string, string>).client_secret !== 'right') {
      request.pace.outcome = 'rejected'
      return await reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token', token_type: 'Bearer' }
  })
  await app.ready()
  const send = async (client: string, secret: string, source: string): Promise<number> => (await app.inject({
    method: 'POST',
    url: '/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams({ client_id: client, client_secret: secret }).toString(),
    remoteAddress: source
  })).statusCode
  return { send, redis, lines }
}

/** The guesser spends its pair's budget (five 401s, then 429s), then the flood: every answer's status, counted. */
async function lockOutThenFlood (send: (client: string, secret: string, source: string) => Promise<number>): Promise<{ guesses: number[], flood: Record<number, number> }> {
  const guesses: number[] = []
  for (let i = 0; i < 6; i++) guesses.push(await send(REAL, 'wrong', GUESSER))
  const flood: Record<number, number> = {}
  for (let first = 0; first < SOURCES; first += 500) {
    const statuses = await Promise.all(Array.from({ length: 500 }, (_, i) => send(`made-up-${first + i}`, 'guess', `2001:db8:1:${(first + i).toString(16)}::1`)))
    for (const status of statuses) flood[status] = (flood[status] ?? 0) + 1
  }
  return { guesses, flood }
}

const info = async (redis: Redis, section: string, field: string): Promise<number> =>
  Number(new RegExp(`${field}:(\\d+)`).exec(await redis.info(section))![1])

t.test('maxmemory-policy volatile-ttl: Redis forgets the rows full soonest, and keeps the locked-out pair', { skip: !canRun }, async t => {
  const { send, redis, lines } = await floodedApp(t, 'volatile-ttl')
  const { guesses, flood } = await lockOutThenFlood(send)
  t.same(guesses, [401, 401, 401, 401, 401, 429], 'the guesser spent its pair\'s budget')
  t.same(flood, { 401: SOURCES }, 'every made-up id answered, none failed')
  t.ok(await info(redis, 'stats', 'evicted_keys') > 0, 'Redis was full, and forgot rows')
  // Redis evicts as each command comes in, so a reading between commands may be a little over.
  t.ok(await info(redis, 'memory', 'used_memory') <= 1.1 * 2 * 2 ** 20, 'within maxmemory')
  t.equal(await send(REAL, 'wrong', GUESSER), 429, 'the locked-out pair is still refused')
  t.equal(await send(REAL, 'right', '192.0.2.10'), 200, 'the real client is served')
  t.same(lines.filter(line => line.level >= 40), [], 'nothing to warn of: Redis answered every request')
})

t.test('Redis\'s default, noeviction: a full Redis refuses writes and each replica paces alone, saying so', { skip: !canRun }, async t => {
  const { send, redis, lines } = await floodedApp(t, 'noeviction')
  const { guesses, flood } = await lockOutThenFlood(send)
  t.same(guesses, [401, 401, 401, 401, 401, 429])
  t.same(flood, { 401: SOURCES }, 'every made-up id answered, none failed')
  t.equal(await info(redis, 'stats', 'evicted_keys'), 0)
  t.ok(lines.some(line => line.level === 40 && line.msg.includes('Redis store unavailable (OOM')), 'a full Redis is warned of as the store unavailable')
  t.equal(await send(REAL, 'wrong', GUESSER), 429, 'the locked-out pair is still refused (this replica\'s memory holds it)')
  t.equal(await send(REAL, 'right', '192.0.2.10'), 200, 'the real client is served')
})
