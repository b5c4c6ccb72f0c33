import t from 'tap'
import { Pace, RedisStore } from '../lib/index.js'
import { connectRedis, uniquePrefix } from './helpers/redis.js'
import type { FastifyBaseLogger } from 'fastify'

// The Lua scripts against a real Redis: the same bucket as the in-process Pace, on Redis TIME.
// Without moving Redis' clock, these use rates slow enough that a burst finishes long before a
// unit refills (rate 10: one unit per 100 ms; a pipelined burst takes well under a millisecond).

const connection = await connectRedis()
if ('skip' in connection) {
  t.skip(connection.skip)
} else {
  const { client } = connection
  t.teardown(() => client.quit())
  const silent = { warn () {}, info () {}, debug () {} } as unknown as FastifyBaseLogger

  const paceOf = (label: string, perSecond: number) => {
    const prefix = uniquePrefix(label)
    const store = new RedisStore({ client, prefix, timeoutMs: 1000 })
    const pace = store.pace('p', perSecond, new Pace({ perSecond }), silent)
    return { pace, store, redisKey: (key: string) => `${prefix}p:${key}` }
  }

  t.test('a full bucket grants exactly floor(rate) of a concurrent burst, then reports the wait', async t => {
    const { pace } = paceOf('burst', 10)
    const results = await Promise.all(Array.from({ length: 30 }, () => pace.reserve('c')))
    t.equal(results.filter(r => r.granted).length, 10)
    const remaining = results.filter(r => r.granted).map(r => r.remaining).sort((a, b) => a - b)
    t.same(remaining, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 'each grant reports the whole units left after it')
    const refused = results.find(r => !r.granted)
    t.ok(refused !== undefined && refused.retryAfterMs > 0 && refused.retryAfterMs <= 100, 'the wait is at most one unit (100 ms)')
  })

  t.test('a non-integer rate grants floor(rate) at once', async t => {
    const { pace } = paceOf('fraction', 2.5)
    const results = await Promise.all(Array.from({ length: 6 }, () => pace.reserve('c')))
    t.equal(results.filter(r => r.granted).length, 2)
  })

  t.test('a spent key expires no later than the moment its bucket is full again', async t => {
    const { pace, redisKey } = paceOf('expiry', 4)
    await pace.reserve('c')
    const ttl = await client.pttl(redisKey('c'))
    t.ok(ttl > 0 && ttl <= 250, `one unit of rate 4 refills in 250 ms; PTTL was ${ttl}`)
    await Promise.all([pace.reserve('c'), pace.reserve('c')])
    const longer = await client.pttl(redisKey('c'))
    t.ok(longer > 250 && longer <= 750, `three units refill in 750 ms; PTTL was ${longer}`)
  })

  t.test('a refund that leaves the bucket full deletes the key; one that does not shortens its expiry', async t => {
    const { pace, redisKey } = paceOf('refund', 4)
    const first = await pace.reserve('c')
    const second = await pace.reserve('c')
    second.refund()
    await client.ping()
    const ttl = await client.pttl(redisKey('c'))
    t.ok(ttl > 0 && ttl <= 250, `one unit still spent; PTTL was ${ttl}`)
    first.refund()
    await client.ping()
    t.equal(await client.exists(redisKey('c')), 0)
  })

  t.test('refunds give back a unit exactly once and never past capacity', async t => {
    const { pace, redisKey } = paceOf('capacity', 3)
    const granted = await Promise.all([pace.reserve('c'), pace.reserve('c'), pace.reserve('c')])
    t.ok(granted.every(r => r.granted))
    t.notOk((await pace.reserve('c')).granted, 'the bucket is empty')
    granted[0].refund()
    granted[0].refund()
    await client.ping()
    const again = await Promise.all([pace.reserve('c'), pace.reserve('c')])
    t.same(again.map(r => r.granted), [true, false], 'one refund gave back one unit, not two')
    for (const r of [...granted, ...again]) r.refund()
    await client.ping()
    t.equal(await client.exists(redisKey('c')), 0, 'all units back: no key')
  })

  t.test('a refund one horizon late gives nothing back; within the horizon it gives one unit', async t => {
    const { pace, redisKey } = paceOf('late', 3)
    const first = await pace.reserve('c')
    const second = await pace.reserve('c')
    const reservedAt = (second as unknown as { reservedAt: number }).reservedAt
    t.ok(Number.isInteger(reservedAt), 'the reservation keeps the script\'s reading of the clock')
    const refund = (client as unknown as { exchangepaceRefund (key: string, perSecond: number, at: number): Promise<number> }).exchangepaceRefund.bind(client)
    // Redis' clock cannot be moved: a reading one second and a bit older stands for a late refund.
    t.equal(await refund(redisKey('c'), 3, reservedAt - 3 * 1_000_000 - 1), 0, 'a unit reserved a horizon ago has refilled: nothing back')
    const third = await pace.reserve('c')
    t.ok(third.granted)
    t.notOk((await pace.reserve('c')).granted, 'the late refund gave nothing: three units spent')
    t.equal(await refund(redisKey('c'), 3, reservedAt), 1, 'within the horizon a unit comes back')
    t.ok((await pace.reserve('c')).granted)
    for (const r of [first, second, third]) r.refund()
  })

  t.test('refunded strangers leave no keys at all', async t => {
    const { pace, store } = paceOf('strangers', 5)
    const reservations = await Promise.all(Array.from({ length: 500 }, (_, i) => pace.reserve(`random-${i}`)))
    for (const r of reservations) r.refund()
    await client.ping()
    t.same(await client.keys(`${store.prefix}*`), [])
  })
}
