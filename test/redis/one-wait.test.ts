import t from 'tap'
import { Redis } from 'ioredis'
import { Pace, RedisStore } from '../../lib/index.js'
import { startFaultProxy } from '../../bench/shared/fault-proxy.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'

// ioredis has one auto-pipelined batch in flight per connection and holds the next until its
// answer. A refund sent in a batch would therefore hold the next request's reservations for a
// round trip: with the README's token route (whose failure budget is refunded on every accepted
// exchange) each request would wait for Redis twice. Here Redis's answers are held by a proxy
// while a refund is out, and the next reservation must reach Redis all the same: with ioredis's
// default options and with the auto-pipelining the docs recommend. (The store's reads of the blocks
// in force go on their own too, so no batch of theirs is out when the answers are held.)

const direct = await redisOrSkip()

/** The client options tested: ioredis's defaults, and the auto-pipelining the docs recommend. */
const CLIENT_SHAPES = [['ioredis defaults', {}], ['enableAutoPipelining', { enableAutoPipelining: true }]] as const

/** Keys of `prefix` whose name holds `part`, read on a connection of the test's own. */
async function keysWith (client: Redis, prefix: string, part: string): Promise<string[]> {
  return (await client.keys(`${prefix}*`)).filter(key => key.includes(part))
}

/** Waits until `check` holds, or `ms` passed: whether it held. */
async function eventually (check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const until = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > until) return false
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

for (const [shape, options] of CLIENT_SHAPES) {
  t.test(`a refund out holds no reservation (${shape})`, { skip: direct === null ? 'no Redis' : false }, async t => {
    const redis = direct as Redis
    const proxy = await startFaultProxy({ target: { port: Number(new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379').port || 6379) } })
    t.teardown(() => proxy.close())
    const client = new Redis({ port: proxy.port, host: proxy.host, ...options })
    t.teardown(() => client.disconnect())
    const prefix = uniquePrefix('one-wait')
    const store = new RedisStore({ client, prefix, timeoutMs: 60_000 })
    const pace = store.pace('/token#client+source:rejected', { limit: 5, window: 3600 }, new Pace({ limit: 5, window: 3600 }), { warn () {}, info () {}, error () {}, debug () {} })

    const first = await pace.reserve('first-exchange')
    t.ok(first.granted)
    const stall = await proxy.add({ kind: 'stall', direction: 'downstream' })
    first.refund()
    t.ok(await eventually(async () => (await keysWith(redis, prefix, 'first-exchange')).length === 0, 5000),
      'the refund ran in Redis: the bucket is full again, and has no row')
    const second = pace.reserve('second-exchange')
    t.ok(await eventually(async () => (await keysWith(redis, prefix, 'second-exchange')).length === 1, 5000),
      'the next reservation ran in Redis while the refund\'s answer was held')
    await proxy.remove(stall)
    t.ok((await second).granted)
  })
}

for (const [shape, options] of CLIENT_SHAPES) {
  t.test(`an inspection asked right after a refund sees it (${shape})`, { skip: direct === null ? 'no Redis' : false }, async t => {
    const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', options)
    t.teardown(() => client.disconnect())
    const store = new RedisStore({ client, prefix: uniquePrefix('refund-order') })
    const pace = store.pace('/token#client', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), { warn () {}, info () {}, error () {}, debug () {} })
    const reservation = await pace.reserve('reporting')
    t.ok((await store.inspect('/token#client', 'reporting')).spentMs > 0, 'a unit spent')
    reservation.refund()
    t.equal((await store.inspect('/token#client', 'reporting')).spentMs, 0, 'the refund went first: the bucket is full')
  })
}
