import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { RedisStore } from '../../lib/index.js'
import { redisPaceName } from '../../lib/redis/scripts.js'
import { isVictim, recommendedTokenApp } from '../helpers/made-up-ids.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { form } from '../helpers/shared-behaviour.js'

// Made-up client ids on a RedisStore (`isClient`): 20,000 of them with wrong secrets from 200
// sources leave keys in Redis in proportion to the sources, as in memory
// (test/http/made-up-ids.test.ts), while a guesser naming the real client spends its own pair
// there.

t.setTimeout(180_000)

/** The n-th of 200 sources: 100 IPv4 addresses and 100 IPv6 /64s of one /48. */
const source = (n: number): string => n < 100 ? `192.0.2.${n}` : `2001:db8:1:${(n - 100).toString(16)}::1`

const client = await redisOrSkip()
if (client !== null) {
  /** The keys under `prefix` of the pace `name`. */
  const keysOf = async (prefix: string, name: string): Promise<string[]> => {
    const found: string[] = []
    const stream = client.scanStream({ match: `${prefix}${redisPaceName(name)}:*`, count: 1000 })
    for await (const keys of stream) found.push(...keys as string[])
    return found
  }

  t.test('20,000 made-up ids with wrong secrets from 200 sources leave keys in Redis in proportion to the sources', async t => {
    const prefix = uniquePrefix('made-up')
    t.teardown(async () => {
      const keys: string[] = []
      for await (const batch of client.scanStream({ match: `${prefix}*`, count: 1000 })) keys.push(...batch as string[])
      if (keys.length > 0) await client.del(...keys)
    })
    const app: FastifyInstance = await recommendedTokenApp(t, { store: new RedisStore({ client, prefix, timeoutMs: 1000 }), isClient: isVictim })
    const post = (address: string, id: string, secret: string) => app.inject({ method: 'POST', url: '/token', remoteAddress: address, ...form(['client_id', id], ['client_secret', secret]) })
    const statuses: Record<number, number> = {}
    for (let round = 0; round < 100; round++) {
      const answers = await Promise.all(Array.from({ length: 200 }, (_, n) => post(source(n), `made-up-${round}-${n}`, 'guess')))
      for (const { statusCode } of answers) statuses[statusCode] = (statuses[statusCode] ?? 0) + 1
    }
    t.same(statuses, { 401: 20_000 }, 'each source within its 100 failures a day')
    t.equal(app.pace.get('/token#source:rejected')?.maxKeys, Infinity, 'a shared store\'s paces have no row ceiling in memory: Redis keeps the rows')
    t.equal((await keysOf(prefix, '/token#client+source:rejected')).length, 0, 'no pair key for a made-up id')
    t.equal((await keysOf(prefix, '/token#client')).length, 0, 'no client key for a made-up id')
    t.equal((await keysOf(prefix, '/token#source:rejected')).length, 200, 'one failure-budget key per source')
    t.ok((await keysOf(prefix, '/token#source')).length <= 200, 'at most one ceiling key per source')

    const guesses: number[] = []
    for (let i = 0; i < 6; i++) guesses.push((await post('203.0.113.9', 'victim', `guess-${i}`)).statusCode)
    t.same(guesses, [401, 401, 401, 401, 401, 429], 'a guesser naming the real client spends its own pair: 5 an hour')
    t.equal((await keysOf(prefix, '/token#client+source:rejected')).length, 1)
    t.equal((await post('198.51.100.7', 'victim', 'right-secret')).statusCode, 200, 'the real client, from its own address, is served')
  })
}
