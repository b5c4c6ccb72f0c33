import t from 'tap'
import fc from 'fast-check'
import { Pace, type Reservation } from '../../lib/bucket/pace.js'

/**
 * Pace against a reference bucket in exact arithmetic. The rate is p/q with small integers and the
 * clock reads integer milliseconds, so the reference can count in BigInt steps of 1/(1000 q) of a
 * unit: one millisecond refills exactly p steps, one unit is 1000 q steps and the capacity (one
 * second of the rate) is 1000 p steps. Pace computes in doubles; no rounding may ever change a
 * decision, a `remaining`, or `retryAfterMs` by more than a millionth of a millisecond.
 */
class ExactBucket {
  readonly #p: bigint
  readonly #unit: bigint
  readonly #capacity: bigint
  /**
   * Per key whose bucket is not full: steps held, the run it is in (a grant on a full bucket
   * begins one), the grants counted in that run, when the latest came (ms), and the numbers of the
   * run's grants that were refunded.
   */
  readonly #rows = new Map<string, { level: bigint, run: number, count: number, last: number, refunded: Set<number> }>()
  #runs = 0
  #ms = 0

  constructor (p: number, q: number) {
    this.#p = BigInt(p)
    this.#unit = 1000n * BigInt(q)
    this.#capacity = 1000n * BigInt(p)
  }

  /** Lets `ms` milliseconds pass for every key. */
  advance (ms: number): void {
    this.#ms += ms
    const refill = BigInt(ms) * this.#p
    for (const [key, row] of this.#rows) {
      row.level += refill
      if (row.level >= this.#capacity) this.#rows.delete(key)
    }
  }

  /**
   * What `reserve` must answer (`retryAfterMs` as the exact fraction `waitSteps / p`), and, when
   * granted, the run, the grant's number in it and its time, for `refund`.
   */
  reserve (key: string): { granted: boolean, remaining: number, waitSteps: bigint, run: number, count: number, at: number } {
    const row = this.#rows.get(key) ?? { level: this.#capacity, run: ++this.#runs, count: 0, last: 0, refunded: new Set<number>() }
    if (row.level < this.#unit) return { granted: false, remaining: 0, waitSteps: this.#unit - row.level, run: 0, count: 0, at: 0 }
    row.level -= this.#unit
    row.count++
    row.refunded.delete(row.count - 32) // out of the 32 latest: forgotten, even if an uncount brings it back
    row.last = this.#ms
    this.#rows.set(key, row)
    return { granted: true, remaining: Number(row.level / this.#unit), waitSteps: 0n, run: row.run, count: row.count, at: this.#ms }
  }

  /**
   * Gives back the `count`th grant of run `run` of `key`, made at `at` ms, by the rule of
   * `Pace._giveBack`, in absolute steps (t ms is t p steps; the row's time is now plus the
   * shortfall): nothing once the run is over; the run's latest grant gives its unit and uncounts;
   * any other moves the row to the lowest of one unit earlier plus the time from it to the latest
   * grant, and the later of one unit earlier and the latest grant's time plus one unit per grant
   * counted after it and not refunded (a refund is remembered while its grant is among the run's
   * 32 latest; an older one counts as not refunded).
   */
  refund (key: string, run: number, count: number, at: number): void {
    const row = this.#rows.get(key)
    if (row === undefined || row.run !== run) return
    const now = BigInt(this.#ms) * this.#p
    const last = BigInt(row.last) * this.#p
    const full = now + this.#capacity - row.level
    const min = (a: bigint, b: bigint): bigint => a < b ? a : b
    const max = (a: bigint, b: bigint): bigint => a > b ? a : b
    let left: bigint
    if (row.count === count) {
      left = full - this.#unit
      row.count--
    } else {
      let keptLater = row.count - count
      for (const number of row.refunded) if (number > count) keptLater--
      left = min(full, full - this.#unit + last - BigInt(at) * this.#p)
      left = min(left, max(full - this.#unit, min(full, last + BigInt(keptLater) * this.#unit)))
      if (row.count - count < 32) row.refunded.add(count)
    }
    if (left <= now) this.#rows.delete(key)
    else row.level = this.#capacity - (left - now)
  }

  /** Keys whose bucket is not full: each must have a row in Pace. */
  get short (): number {
    return this.#rows.size
  }

  get p (): bigint {
    return this.#p
  }
}

type Operation =
  | { op: 'advance', ms: number }
  | { op: 'reserve', key: number }
  | { op: 'refund', index: number }
  | { op: 'crowd', keys: number }

const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 400 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 3000 }) }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 2 }) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('refund' as const), index: fc.nat() }) }
)

/** A rate p/q >= 1 with small p and q: integers, halves, thirds, sevenths... */
const rate = fc.integer({ min: 1, max: 7 }).chain(q =>
  fc.integer({ min: q, max: 12 * q }).map(p => ({ p, q })))

/**
 * Replays `operations` on a Pace and on the reference, starting at `start` ms, and throws at the
 * first answer that differs. A refund picks one of the reservations made so far, whatever its state
 * (refused, already refunded): only a granted, not yet refunded one may change anything. At the
 * end, the units kept (granted and never refunded) must fit the rate: at most p/q x (1 + w) of
 * them in any window of w seconds.
 */
function replay ({ p, q }: { p: number, q: number }, start: number, operations: Operation[]): void {
  const clock = { ms: start }
  const pace = new Pace({ perSecond: p / q, now: () => clock.ms })
  const exact = new ExactBucket(p, q)
  const made: Array<{ key: string, reservation: Reservation, live: boolean, at: number, run: number, count: number, modelAt: number }> = []
  const reserveBoth = (key: string, where: string): void => {
    const got = pace.reserve(key)
    const want = exact.reserve(key)
    if (got.granted !== want.granted) throw new Error(`${where}, ${key}: granted ${got.granted}, want ${want.granted}`)
    if (got.remaining !== want.remaining) throw new Error(`${where}, ${key}: remaining ${got.remaining}, want ${want.remaining}`)
    // |retryAfterMs - waitSteps / p| <= 1e-6, compared without dividing the exact side.
    const error = Math.abs(got.retryAfterMs * p - Number(want.waitSteps)) / p
    if (!(error <= 1e-6)) throw new Error(`${where}, ${key}: retryAfterMs ${got.retryAfterMs}, want ${want.waitSteps}/${p}`)
    made.push({ key, reservation: got, live: got.granted, at: clock.ms, run: want.run, count: want.count, modelAt: want.at })
  }
  operations.forEach((operation, step) => {
    const where = `rate ${p}/${q}, step ${step}, t = ${clock.ms - start} ms`
    if (operation.op === 'advance') {
      clock.ms += operation.ms
      exact.advance(operation.ms)
    } else if (operation.op === 'reserve') {
      reserveBoth(`k${operation.key}`, where)
    } else if (operation.op === 'crowd') {
      for (let i = 0; i < operation.keys; i++) reserveBoth(`s${step}-${i}`, where)
    } else if (made.length > 0) {
      const chosen = made[operation.index % made.length]
      chosen.reservation.refund()
      if (chosen.live) exact.refund(chosen.key, chosen.run, chosen.count, chosen.modelAt)
      chosen.live = false
    }
    if (pace.size < exact.short) throw new Error(`${where}: ${pace.size} rows for ${exact.short} short buckets`)
  })
  for (const key of ['k0', 'k1', 'k2']) {
    const kept = made.filter(m => m.live && m.key === key).map(m => m.at)
    for (let first = 0; first < kept.length; first++) {
      for (let last = first; last < kept.length; last++) {
        // last - first + 1 units within kept[last] - kept[first] ms: at most p/q x (1000 + ms) / 1000.
        if ((last - first + 1) * 1000 * q > p * (1000 + kept[last] - kept[first])) {
          throw new Error(`rate ${p}/${q}: ${key} kept ${last - first + 1} units within ${kept[last] - kept[first]} ms`)
        }
      }
    }
  }
}

t.test('reserve, refund and refill match exact arithmetic over long random sequences', async t => {
  t.doesNotThrow(() => fc.assert(
    fc.property(rate, fc.array(operation, { minLength: 50, maxLength: 400 }), (r, operations) => {
      replay(r, 0, operations)
    }),
    { seed: 0x5eed, numRuns: 400 }
  ))
})

/** Operations for runs longer than the 32 grants whose refunds a row remembers: short advances at fast rates. */
const longRunOperation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 30 }) }) },
  { weight: 6, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), index: fc.nat() }) }
)

t.test('the match holds in runs longer than the 32 grants whose refunds a row remembers', async t => {
  const fastRate = fc.integer({ min: 1, max: 3 }).chain(q =>
    fc.integer({ min: 40 * q, max: 80 * q }).map(p => ({ p, q })))
  t.doesNotThrow(() => fc.assert(
    fc.property(fastRate, fc.array(longRunOperation, { minLength: 200, maxLength: 600 }), (r, operations) => {
      replay(r, 0, operations)
    }),
    { seed: 0x5eed, numRuns: 200 }
  ))
})

/**
 * Operations with crowds: many keys at once, each spending one unit, so that the table grows past
 * its smallest size and the sweeps shrink it again while reservations wait for their refunds. A
 * refund then finds its row moved, or its row given to another key.
 */
const crowdedOperation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 600 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 2 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), index: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('crowd' as const), keys: fc.integer({ min: 1, max: 60 }) }) }
)

t.test('the match holds while crowds of other keys grow and shrink the table under pending refunds', async t => {
  t.doesNotThrow(() => fc.assert(
    fc.property(rate, fc.array(crowdedOperation, { minLength: 50, maxLength: 300 }), (r, operations) => {
      replay(r, 0, operations)
    }),
    { seed: 0x5eed, numRuns: 200 }
  ))
})

t.test('the match holds when the clock reads a day of uptime', async t => {
  t.doesNotThrow(() => fc.assert(
    fc.property(rate, fc.integer({ min: 0, max: 86_400_000 }), fc.array(operation, { minLength: 50, maxLength: 200 }),
      (r, start, operations) => { replay(r, start, operations) }),
    { seed: 0x5eed, numRuns: 200 }
  ))
})

t.test('the reference bucket itself behaves as the specification says', async t => {
  const exact = new ExactBucket(5, 2) // 2.5 per second
  t.same([exact.reserve('k').granted, exact.reserve('k').granted, exact.reserve('k').granted], [true, true, false])
  exact.advance(200) // half a unit back: one whole unit
  const third = exact.reserve('k')
  t.same([third.granted, third.count, third.at], [true, 3, 200], 'the third grant of the run, at 200 ms')

  const over = new ExactBucket(3, 1)
  const old = over.reserve('k')
  over.advance(1000) // full again: that run is over
  over.reserve('k') // a new run: 2 left
  over.refund('k', old.run, old.count, old.at)
  t.equal(over.reserve('k').remaining, 1, 'a refund from a run that is over gives nothing')

  const bounded = new ExactBucket(3, 1)
  const first = bounded.reserve('k') // 2 left
  bounded.advance(100) // 2.3
  bounded.reserve('k')
  bounded.reserve('k') // 0.3
  bounded.refund('k', first.run, first.count, first.at) // 1.3 would be too many: the two later grants keep it at 1
  t.same([bounded.reserve('k').remaining, bounded.reserve('k').granted], [0, false])
  bounded.advance(3_600_000)
  t.equal(bounded.short, 0)
  t.equal(bounded.p, 3n)
})

/**
 * A client that tries once every millisecond takes every unit the moment it is whole. From a full
 * bucket at t0 it must have been granted exactly floor(rate * (1000 + t) / 1000) units by t ms:
 * the first second's burst plus everything refilled, no more and no less, however long it runs.
 */
function greedyRun (p: number, q: number, steps: number): { wrong: number, firstWrong: number, granted: number, owed: number } {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: p / q, now: () => clock.ms })
  const owed = (ms: number): number => Number((BigInt(p) * BigInt(1000 + ms)) / (1000n * BigInt(q)))
  let granted = 0
  while (pace.reserve('client').granted) granted++ // t0: the burst
  let wrong = 0
  let firstWrong = -1
  for (let ms = 1; ms <= steps; ms++) {
    clock.ms = ms
    if (pace.reserve('client').granted) granted++
    if (granted !== owed(ms)) {
      wrong++
      if (firstWrong === -1) firstWrong = ms
      granted = owed(ms) // count each divergence once
    }
  }
  return { wrong, firstWrong, granted, owed: owed(steps) }
}

t.test('a client at its rate for a million milliseconds gets neither an extra unit nor one less', async t => {
  // Each row: p, q (the rate p/q).
  const rates: Array<[number, number]> = [
    [3, 1], // 1000/3 ms per unit: never a whole number of ms
    [73, 10], // 7.3: not exactly representable as a double
    [5, 2],
    [7, 3],
    [1000, 1] // one unit every millisecond
  ]
  for (const [p, q] of rates) {
    const run = greedyRun(p, q, 1_000_000)
    t.equal(run.wrong, 0, `rate ${p}/${q}: steps that diverged (the first at ${run.firstWrong} ms)`)
    t.equal(run.granted, run.owed, `rate ${p}/${q}: units granted in all`)
  }
})

t.test('a client spending exactly every 250 ms at rate 4 is granted every time, and only once', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 4, now: () => clock.ms })
  for (let i = 0; i < 4; i++) pace.reserve('client') // t0: the burst
  let granted = 0
  let refusedAfter = 0
  for (let period = 1; period <= 40_000; period++) { // 10 000 s
    clock.ms = period * 250
    if (pace.reserve('client').granted) granted++
    if (!pace.reserve('client').granted) refusedAfter++
  }
  t.equal(granted, 40_000)
  t.equal(refusedAfter, 40_000)
})

t.test('a million reserve-and-refund pairs at an inexact instant leave the bucket where it was', async t => {
  const clock = { ms: 123_457 } // 123457 * 7.3 is not a double
  const pace = new Pace({ perSecond: 7.3, now: () => clock.ms })
  for (let i = 0; i < 5; i++) pace.reserve('k') // 2.3 units left
  for (let i = 0; i < 1_000_000; i++) pace.reserve('k').refund()
  let granted = 0
  while (pace.reserve('k').granted) granted++
  t.equal(granted, 2)
  clock.ms += 96 // 0.3 + 0.7008
  t.equal(pace.reserve('k').granted, true)
})
