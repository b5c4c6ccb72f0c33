import t from 'tap'
import { RedisStore, type Pace, type PaceBucket, type PaceEvent, type PaceRouteOptions } from '../../lib/index.js'
import { NearLimit } from '../../lib/bucket/near-limit.js'
import { build, type TapTest } from '../helpers/shared-behaviour.js'
import { logSink } from '../helpers/log-sink.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { warnings } from '../helpers/warning-behaviour.js'

/**
 * Early warnings (`warnAt`): a grant that leaves that share of a key's bucket spent warns once,
 * counted, logged and told to onEvent, and not again until the key's bucket has been full (that
 * cycle on memory and on Redis: test/helpers/warning-behaviour.ts).
 */

async function tokenApp (t: TapTest, pace: PaceRouteOptions, options: Record<string, unknown> = {}) {
  const { stream, lines } = logSink()
  const events: PaceEvent[] = []
  const app = await build(t, { now: () => 0, onEvent: (event: PaceEvent) => { events.push(event) }, ...options }, app => {
    app.post('/token', { config: { pace } }, async () => ({ ok: true }))
  }, { logger: { level: 'info', stream } })
  return { app, events, lines }
}

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
