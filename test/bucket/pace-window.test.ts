import t from 'tap'
import fc from 'fast-check'
import { Pace, type PaceOptions } from '../../lib/index.js'

/**
 * A pace declared as `limit` units per `window` seconds: a bucket of `limit` refilled continuously
 * over the window (a failure budget), beside `perSecond`, which is `{ limit: perSecond, window: 1 }`.
 * Times are on a fixed grid, in milliseconds, on an injected clock.
 */

function windowed (limit: number, window: number) {
  const clock = { t: 0 }
  return { clock, pace: new Pace({ limit, window, now: () => clock.t }) }
}

function grants (pace: Pace, key: string, n: number): boolean[] {
  return Array.from({ length: n }, () => pace.reserve(key).granted)
}

t.test('limit and window must be finite, limit >= 1, window > 0; the error names the option and the value', async t => {
  const table: Array<[Record<string, unknown>, string]> = [
    [{ limit: 0.5, window: 1 }, 'limit must be a finite number >= 1, got 0.5'],
    [{ limit: 0, window: 600 }, 'limit must be a finite number >= 1, got 0'],
    [{ limit: NaN, window: 600 }, 'limit must be a finite number >= 1, got NaN'],
    [{ limit: '10', window: 600 }, 'limit must be a finite number >= 1, got "10"'],
    [{ window: 600 }, 'limit must be a finite number >= 1, got undefined'],
    [{ limit: 10 }, 'window must be a finite number of seconds > 0, got undefined'],
    [{ limit: 10, window: 0 }, 'window must be a finite number of seconds > 0, got 0'],
    [{ limit: 10, window: -600 }, 'window must be a finite number of seconds > 0, got -600'],
    [{ limit: 10, window: Infinity }, 'window must be a finite number of seconds > 0, got Infinity'],
    [{ perSecond: 10, limit: 10, window: 1 }, 'a pace declares perSecond, or limit with window, not both'],
    [{ perSecond: 10, window: 1 }, 'a pace declares perSecond, or limit with window, not both']
  ]
  for (const [options, message] of table) {
    t.throws(() => new Pace(options as PaceOptions), { name: 'TypeError', message: `exchangepace: ${message}` }, JSON.stringify(options))
  }
})

t.test('a pace states its bucket: limit, window, and the rate they make', async t => {
  const budget = new Pace({ limit: 10, window: 600 })
  t.same([budget.limit, budget.window, budget.perSecond], [10, 600, 10 / 600])
  const perSecond = new Pace({ perSecond: 2.5 })
  t.same([perSecond.limit, perSecond.window, perSecond.perSecond], [2.5, 1, 2.5], 'perSecond is one second of it')
})

t.test('a full bucket grants exactly limit at one instant, then refuses with the exact wait for one unit', async t => {
  const { pace } = windowed(10, 600)
  t.same(grants(pace, 'k', 11), [...Array(10).fill(true), false])
  const refused = pace.reserve('k')
  t.equal(refused.retryAfterMs, 60_000, 'one unit every 600 / 10 s')
  t.equal(refused.remaining, 0)
})

t.test('remaining counts whole units left of the limit', async t => {
  const { pace } = windowed(3, 600)
  t.same([pace.reserve('k').remaining, pace.reserve('k').remaining, pace.reserve('k').remaining], [2, 1, 0])
})

// Row per step: [time ms, reservations made then, granted] for a limit of 4 per 60 s (a unit per 15 s).
const GRID: Array<[number, number, number]> = [
  [0, 5, 4], // t0: the whole bucket, no more
  [14_999, 1, 0], // t1: a unit is not back until 15 s
  [15_000, 2, 1], // t2: one unit back
  [45_000, 3, 2], // t3: two more
  [105_000, 5, 4], // t4: a window of silence refills the whole bucket
  [3_600_000, 5, 4] // t5: an hour of silence gives the bucket, not more
]

t.test('refill is continuous over the window: one unit every window / limit', async t => {
  const { clock, pace } = windowed(4, 60)
  for (const [time, made, granted] of GRID) {
    clock.t = time
    t.equal(grants(pace, 'k', made).filter(Boolean).length, granted, `t=${time}`)
  }
})

t.test('a refund gives the failure back; a full bucket has no row', async t => {
  const { pace } = windowed(10, 600)
  const reservation = pace.reserve('guesser')
  t.equal(pace.size, 1)
  reservation.refund()
  t.equal(pace.size, 0, 'the refund left the bucket full: no row')
  t.same(grants(pace, 'guesser', 11).filter(Boolean).length, 10)
})

t.test('a row lives one window at most: the sweep deletes it once the bucket has refilled', async t => {
  const { clock, pace } = windowed(10, 600)
  pace.reserve('a')
  clock.t = 59_999
  pace.tidy()
  t.equal(pace.size, 1, 'one unit takes 60 s to come back')
  clock.t = 600_000
  pace.tidy()
  t.equal(pace.size, 0, 'a window later the row is gone')
})

t.test('perSecond N and { limit: N, window: 1 } are the same bucket', async t => {
  fc.assert(fc.property(fc.integer({ min: 1, max: 20 }), fc.array(fc.tuple(fc.integer({ min: 0, max: 700 }), fc.boolean()), { maxLength: 60 }), (rate, steps) => {
    const clock = { t: 0 }
    const a = new Pace({ perSecond: rate, now: () => clock.t })
    const b = new Pace({ limit: rate, window: 1, now: () => clock.t })
    for (const [ms, refund] of steps) {
      clock.t += ms
      const ra = a.reserve('k')
      const rb = b.reserve('k')
      if (ra.granted !== rb.granted || ra.remaining !== rb.remaining || ra.retryAfterMs !== rb.retryAfterMs) return false
      if (refund) { ra.refund(); rb.refund() }
    }
    return true
  }))
  t.pass('every decision the same')
})

t.test('property: the units kept never exceed limit * (1 + t / window) in any span of t seconds', async t => {
  const operation = fc.oneof(
    fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 120_000 }) }),
    fc.record({ op: fc.constant('reserve' as const) }),
    fc.record({ op: fc.constant('refund' as const), index: fc.nat() })
  )
  fc.assert(fc.property(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 900 }), fc.array(operation, { maxLength: 200 }), (limit, window, operations) => {
    const clock = { t: 0 }
    const pace = new Pace({ limit, window, now: () => clock.t })
    const kept: Array<{ at: number, refund: () => void, refunded: boolean }> = []
    for (const step of operations) {
      if (step.op === 'advance') clock.t += step.ms
      else if (step.op === 'reserve') {
        const reservation = pace.reserve('k')
        if (reservation.granted) kept.push({ at: clock.t, refund: () => reservation.refund(), refunded: false })
      } else if (kept.length > 0) {
        const unit = kept[step.index % kept.length]
        unit.refund()
        unit.refunded = true
      }
    }
    const times = kept.filter(unit => !unit.refunded).map(unit => unit.at)
    for (let i = 0; i < times.length; i++) {
      for (let j = i; j < times.length; j++) {
        if (j - i + 1 > limit * (1 + (times[j] - times[i]) / 1000 / window) + 1e-9) return false
      }
    }
    return true
  }))
  t.pass('no span held more than the bound')
})
