import t from 'tap'
import Fastify from 'fastify'
import exchangePace, { RedisStore } from '../lib/index.js'

// RedisStore paces one-second buckets only, until its scripts take a window (issue 24, item 6): a
// failure budget on a Redis-backed route must fail when the route is added, naming it, not
// count a window of minutes as one second in Redis.

t.test('a pace with a window longer than a second is refused by RedisStore, naming the route, the pace and its window', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client: { defineCommand () {} } }) })
  t.throws(() => app.post('/token', { config: { pace: { limit: 10, window: 600, key: 'source', spend: 'rejected' } } }, () => 'ok'), {
    name: 'TypeError',
    message: 'exchangepace: route POST /token: RedisStore paces one-second buckets (perSecond) only; pace "/token" declares limit 10 per window 600'
  })
})
