import t from 'tap'
import fc from 'fast-check'
import { Pace } from '../../lib/bucket/pace.js'
import { build, form } from '../helpers/shared-behaviour.js'

/**
 * The ceiling on a pace's rows (`maxKeys`): the fullest rows are forgotten first, a spent or
 * blocked row never, and a new key is refused only while every row is spent. The clock is
 * injected (`clock.ms`).
 */

t.test('at the ceiling the fullest rows are forgotten first, an eighth of the ceiling at once', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ limit: 5, window: 3600, now: () => clock.ms, maxKeys: 16 })
  // 8 rows spent to 1 unit left (4 units), then 8 rows with 4 units left (1 unit).
  for (let i = 0; i < 8; i++) for (let n = 0; n < 4; n++) pace.reserve(`busy-${i}`)
  for (let i = 0; i < 8; i++) pace.reserve(`light-${i}`)
  t.equal(pace.size, 16)
  t.ok(pace.reserve('new').granted, 'a new key at the ceiling is granted')
  t.equal(pace.size, 15, 'two of the fullest were forgotten, the new key added')
  t.equal(pace.inspect('light-0').remaining, 5, 'the first fullest row, forgotten: a full bucket')
  t.equal(pace.inspect('light-1').remaining, 5)
  t.equal(pace.inspect('light-2').remaining, 4, 'the third, kept')
  for (let i = 0; i < 8; i++) t.equal(pace.inspect(`busy-${i}`).remaining, 1, `busy-${i} kept`)
})

t.test('while every row is spent a new key is refused until the fullest holds a unit again; a key with a row is not', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ limit: 2, window: 60, now: () => clock.ms, maxKeys: 4 })
  for (let i = 0; i < 4; i++) {
    clock.ms = i * 1000
    pace.reserve(`spent-${i}`)
    pace.reserve(`spent-${i}`)
  }
  clock.ms = 4000
  const refused = pace.reserve('new')
  t.notOk(refused.granted, 'every row is spent: the new key is refused')
  t.equal(refused.retryAfterMs, 1000, 'looked at again in a second at most')
  t.equal(pace.size, 4, 'nothing forgotten')
  t.ok(pace.block('blocked', 60_000) === undefined && pace.size === 5, 'an operator\'s block is kept whatever the ceiling')
  pace.reset('blocked')
  clock.ms = 4500
  t.notOk(pace.reserve('new').granted, 'refused without a look before then')
  clock.ms = 31_000
  t.ok(pace.reserve('spent-3').granted === false && pace.reserve('spent-0').granted, 'a key with a row is answered by its own bucket')
  clock.ms = 31_000
  const looked = pace.reserve('new')
  t.ok(looked.granted, 'the fullest row holds a unit again: it is forgotten, and the new key granted')
  t.equal(pace.size, 4)
  t.equal(pace.inspect('spent-1').remaining, 2, 'spent-1, the one row holding a unit (spent-0 spent again), was forgotten')
  t.equal(pace.inspect('spent-2').remaining, 0, 'spent-2, a unit away, kept')
})

t.test('every row spent and the fullest a unit away in less than a second: looked at again then', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 2, now: () => clock.ms, maxKeys: 2 })
  for (const key of ['a', 'b']) {
    pace.reserve(key)
    pace.reserve(key)
  }
  const refused = pace.reserve('c')
  t.notOk(refused.granted)
  t.equal(refused.retryAfterMs, 500, 'a unit of 2 a second is back in 500 ms')
  clock.ms = 500
  t.ok(pace.reserve('c').granted)
})

t.test('maxKeys is checked', async t => {
  for (const maxKeys of [0, 1.5, -1, NaN, '10']) {
    t.throws(() => new Pace({ perSecond: 1, maxKeys: maxKeys as number }), new TypeError(`exchangepace: maxKeys must be an integer >= 1 or Infinity, got ${typeof maxKeys === 'string' ? '"10"' : String(maxKeys)}`))
  }
  t.equal(new Pace({ perSecond: 1 }).maxKeys, Infinity, 'a Pace of its own has no ceiling unless given one')
})

t.test('property: the rows never exceed the ceiling, and a new key is refused only while every row is spent', async t => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 20 }),
    fc.array(fc.record({ key: fc.integer({ min: 0, max: 60 }), advance: fc.integer({ min: 0, max: 3000 }), refund: fc.boolean() }), { maxLength: 300 }),
    (maxKeys, steps) => {
      const clock = { ms: 0 }
      const pace = new Pace({ limit: 3, window: 10, now: () => clock.ms, maxKeys })
      const keys = new Set<string>()
      for (const { key, advance, refund } of steps) {
        clock.ms += advance
        const name = `k${key}`
        const known = pace.inspect(name).remaining < 3
        const before = [...keys].map(k => pace.inspect(k).remaining)
        const reservation = pace.reserve(name)
        if (pace.size > maxKeys) return false
        if (!reservation.granted && !known && pace.size === maxKeys && before.some(remaining => remaining >= 1) && reservation.retryAfterMs >= 1000) return false
        if (reservation.granted) keys.add(name)
        if (refund) reservation.refund()
      }
      return true
    }
  ))
  t.pass('held')
})

t.test('the plugin: maxKeys bounds each pace of the in-process store, 100,000 by default', async t => {
  const clock = { ms: 0 }
  const paces = { limit: 1, window: 3600, key: 'source', spend: 'rejected' }
  const app = await build(t, { now: () => clock.ms, maxKeys: 3 }, app => {
    app.post('/login', { config: { pace: paces } }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  const statuses: number[] = []
  for (let i = 0; i < 4; i++) statuses.push((await app.inject({ method: 'POST', url: '/login', remoteAddress: `192.0.2.${i}`, ...form(['a', 'b']) })).statusCode)
  t.same(statuses, [401, 401, 401, 429], 'three sources spent their budget: the fourth, new, is refused')
  t.equal(app.pace.get('/login')?.size, 3)
  const defaults = await build(t, {}, app => { app.post('/login', { config: { pace: paces } }, async () => 'ok') })
  t.equal(defaults.pace.get('/login')?.maxKeys, 100_000)
  await t.rejects(build(t, { maxKeys: 0 }, () => {}), new TypeError('exchangepace: maxKeys must be an integer >= 1 or Infinity, got 0'))
  t.equal((await build(t, { maxKeys: Infinity }, app => { app.post('/login', { config: { pace: paces } }, async () => 'ok') })).pace.get('/login')?.maxKeys, Infinity)
})

t.test('at the ceiling the rows a sweep may remove go first, and nothing is forgotten', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 1, now: () => clock.ms, maxKeys: 2 })
  clock.ms = 200
  pace.reserve('b')
  clock.ms = 900
  pace.reserve('a')
  clock.ms = 1000
  t.notOk(pace.reserve('a').granted, 'a sweep is due at 1000: it finds nothing a horizon old yet')
  clock.ms = 1500
  t.ok(pace.reserve('c').granted)
  t.equal(pace.size, 2, 'b, last granted 1.3 s ago, was swept; a kept')
  t.equal(pace.inspect('a').remaining, 0, 'a still spent: nothing forgotten')
})
