import t from 'tap'
import { Writable } from 'node:stream'
import type { FastifyInstance } from 'fastify'
import { RedisStore, type Pace, type PaceBucket, type PaceEvent, type PaceRouteOptions } from '../lib/index.js'
import { NearLimit } from '../lib/bucket/near-limit.js'
import { build, form, type TapTest } from './shared-behaviour.js'
import { redisOrSkip, uniquePrefix } from './helpers/redis.js'

/**
 * Early warnings (`warnAt`): a grant that leaves that share of a key's bucket spent warns once,
 * counted, logged and told to onEvent, and not again until the key's bucket has been full.
 */

async function tokenApp (t: TapTest, pace: PaceRouteOptions, options: Record<string, unknown> = {}) {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line !== '') lines.push(JSON.parse(line))
      done()
    }
  })
  const events: PaceEvent[] = []
  const clock = { now: 0 }
  const app = await build(t, { now: () => clock.now, onEvent: (event: PaceEvent) => { events.push(event) }, ...options }, app => {
    app.post('/token', { config: { pace } }, async () => ({ ok: true }))
  }, { logger: { level: 'info', stream } })
  return { app, events, lines, clock }
}

const post = (app: FastifyInstance, id = 'c1') =>
  app.inject({ method: 'POST', url: '/token', remoteAddress: '203.0.113.9', ...form(['client_id', id]) })

/** How many of `count` requests warned, request by request. */
async function warnings (app: FastifyInstance, count: number, id = 'c1'): Promise<number[]> {
  const warned: number[] = []
  for (let i = 0; i < count; i++) {
    const before = app.pace.counts('/token')!.nearLimit
    await post(app, id)
    warned.push(app.pace.counts('/token')!.nearLimit - before)
  }
  return warned
}

t.test('the grant that spends the warnAt share warns once; no more until the bucket is full again', async t => {
  const { app, events, lines, clock } = await tokenApp(t, { limit: 10, window: 10, key: 'client', spend: 'every', warnAt: 0.8 })
  t.same(await warnings(app, 11), [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], 'the eighth grant leaves 8 of 10 spent; the eleventh is refused')
  clock.now = 5000
  t.same(await warnings(app, 5), [0, 0, 0, 0, 0], 'half refilled, spent again: the bucket was never full, no second warning')
  clock.now = 15_000
  t.same(await warnings(app, 1), [0], 'full again, one grant: 1 of 10 spent')
  t.same(await warnings(app, 7), [0, 0, 0, 0, 0, 0, 1], 'and the eighth warns again')
  t.same(await warnings(app, 8, 'c2'), [0, 0, 0, 0, 0, 0, 0, 1], 'per key')
  t.same(events.filter(event => event.type === 'near-limit').slice(0, 1), [{ type: 'near-limit', name: '/token', keyKind: 'client', key: 'c1', outcome: null, retryAfterMs: 8000 }])
  const logged = lines.filter(line => line.msg === 'exchangepace: near the limit, the key has spent its warnAt share of the pace')
  t.equal(logged.length, 3)
  t.match(logged[0], { level: 30, pace: '/token', keyKind: 'client', fullInMs: 8000 })
  t.notOk('key' in logged[0], 'a client id only with logClientIds')
  t.equal(app.pace.counts('/token')!.nearLimit, 3)
})

t.test('warnAt 1 warns at the grant that empties the bucket; a source key is logged', async t => {
  const { app, lines } = await tokenApp(t, { limit: 3, window: 60, key: 'source', spend: 'every', warnAt: 1 })
  t.same(await warnings(app, 3), [0, 0, 1])
  t.match(lines.find(line => line.msg?.startsWith('exchangepace: near the limit')), { key: '203.0.113.9', fullInMs: 60000 })
})

t.test('with rateOf, the share is of the key\'s own bucket', async t => {
  const { app } = await tokenApp(t, { limit: 10, window: 10, key: 'client', spend: 'every', warnAt: 0.5, rateOf: id => id === 'big' ? 100 : undefined })
  t.same((await warnings(app, 50, 'big')).indexOf(1), 49, 'the fiftieth of 100')
  t.same((await warnings(app, 5)).indexOf(1), 4, 'the fifth of 10')
})

t.test('a store that does not tell when the bucket is full: the share is the units spent', async t => {
  const store = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (_name: string, _rate: PaceBucket, local: Pace) => ({
      reserve: async (key: string) => {
        const { granted, remaining, retryAfterMs } = local.reserve(key)
        return { granted, remaining, retryAfterMs, refund () {} }
      }
    })
  }
  const { app, events } = await tokenApp(t, { limit: 4, window: 60, key: 'client', spend: 'every', warnAt: 0.75 }, { store })
  t.same(await warnings(app, 4), [0, 0, 1, 0])
  t.equal(events[0].retryAfterMs, 45000, 'three units of 15 s')
})

t.test('the warned keys are forgotten once their buckets are full: memory holds only recent ones', async t => {
  const clock = { now: 0 }
  const near = new NearLimit(0.5, 1, () => clock.now)
  for (let i = 0; i < 1023; i++) t.equal(near.granted(`k${i}`, 600), true)
  clock.now = 1000
  t.equal(near.granted('last', 600), true, 'the 1024th entry sweeps the 1023 full again')
  t.equal(near.granted('k0', 600), true, 'k0 was forgotten: its bucket was full')
  t.equal(near.granted('last', 700), false, 'warned, not full since')
  t.equal(near.granted('last', 100), false)
  clock.now = 5000
  t.equal(near.granted('last', 100), false, 'full again, below the share: forgotten')
  t.equal(near.granted('last', 500), true)
})

const client = await redisOrSkip()
if (client !== null) {
  t.test('on a RedisStore, the share is read from Redis\'s answer', async t => {
    const store = new RedisStore({ client, prefix: uniquePrefix('near-limit'), timeoutMs: 1000 })
    const { app, events } = await tokenApp(t, { limit: 4, window: 600, key: 'client', spend: 'every', warnAt: 0.5 }, { store })
    t.same(await warnings(app, 5), [0, 1, 0, 0, 0])
    t.same(events.map(event => event.type), ['near-limit', 'refused'])
    t.ok(events[0].retryAfterMs > 299_000 && events[0].retryAfterMs <= 300_000, 'two units of 150 s spent')
  })
}
