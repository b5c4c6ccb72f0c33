import t from 'tap'
import fc from 'fast-check'
import { Pace } from '../../lib/bucket/pace.js'
import { RowTable } from '../../lib/bucket/row-table.js'

/**
 * Memory is bounded by who spent within the last horizon, not by who was named. Measured here in
 * rows, never in bytes or time: a flood of distinct keys must leave nothing behind.
 */

const FLOOD = 50_000

t.test('a flood of distinct ids whose reservations are all refunded leaves no rows', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 10, now: () => clock.ms })
  let largest = 0
  for (let i = 0; i < FLOOD; i++) {
    const reservation = pace.reserve(`stranger-${i}`) // held while the stranger is checked
    largest = Math.max(largest, pace.size)
    reservation.refund() // the check failed
    if (i % 1000 === 999) clock.ms += 1 // the flood takes 50 ms
  }
  t.equal(largest, 1, 'at most the one being checked')
  t.equal(pace.size, 0)
})

t.test('a flood of distinct spenders leaves no rows one horizon later', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 10, now: () => clock.ms })
  for (let i = 0; i < FLOOD; i++) pace.reserve(`spender-${i}`) // t0: every one kept
  t.equal(pace.size, FLOOD)
  clock.ms = 1000 // t1: one horizon later
  pace.reserve('next').refund()
  t.equal(pace.size, 0)
})

t.test('spenders spread over time leave within one horizon of their last spend', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 10, now: () => clock.ms })
  for (let i = 0; i < FLOOD; i++) {
    pace.reserve(`spender-${i}`)
    if (i % 50 === 49) clock.ms += 1 // 50 new keys per ms, for 1000 ms
  }
  clock.ms = 2000 // t1: one horizon after the last spend
  pace.reserve('next').refund()
  t.equal(pace.size, 0)
})

t.test('while spenders keep coming, only the last horizon of them is held', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 1, now: () => clock.ms })
  let largest = 0
  for (let ms = 0; ms < 10_000; ms++) { // 10 s, 10 new keys per ms
    clock.ms = ms
    for (let i = 0; i < 10; i++) pace.reserve(`spender-${ms}-${i}`)
    largest = Math.max(largest, pace.size)
  }
  // One horizon holds 10 000 keys; a sweep runs at least once per horizon, so at most two
  // horizons' worth are ever held, and the size trigger adds no more than that.
  t.ok(largest <= 20_000, `largest ${largest}`)
  t.ok(pace.size >= 10_000, `the last horizon's spenders are all held: ${pace.size}`)
})

t.test('a repeated client keeps one row however often it spends', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 1000, now: () => clock.ms })
  for (let ms = 0; ms < FLOOD; ms++) {
    clock.ms = ms
    pace.reserve('client')
  }
  t.equal(pace.size, 1)
})

t.test('the row table gives its arrays back after a flood', async t => {
  const table = new RowTable()
  for (let i = 0; i < FLOOD; i++) table.insert(`key-${i}`, i, i)
  t.equal(table.capacity, 65_536)
  table.removeCountedBy(Infinity)
  t.equal(table.size, 0)
  t.equal(table.capacity, RowTable.MIN_ROWS)
})

t.test('the row table shrinks to twice what is still live after a flood', async t => {
  const table = new RowTable()
  for (let i = 0; i < FLOOD; i++) table.insert(`key-${i}`, i, i)
  table.removeCountedBy(FLOOD - 101) // 100 keys stay live
  t.equal(table.size, 100)
  t.equal(table.capacity, 200)
})

t.test('the row table does not grow while flood keys come and go one at a time', async t => {
  const table = new RowTable()
  for (let i = 0; i < FLOOD; i++) {
    table.insert(`key-${i}`, i, i)
    table.remove(`key-${i}`, table.row(`key-${i}`))
  }
  t.equal(table.capacity, RowTable.MIN_ROWS)
})

/**
 * The memory bound against a model of who spent when. The sweep keeps a row while its key spent
 * within the last horizon, and runs at least once a horizon and whenever the table has doubled
 * since the previous sweep, so after every reserve at time t:
 * - every key that spent within the last horizon has its row (none is deleted and inserted again);
 * - every row belongs to a key that spent within the last two horizons (kept by the last sweep, at
 *   most a horizon ago, as spent within the horizon before it);
 * - the table holds at most twice what the last sweep left, which was at most the keys that spent
 *   within one horizon at some moment of the last one (or MIN_ROWS, the smallest trigger).
 * Spenders keep their units; a known key's call refunded at once (a rejected exchange) spends
 * nothing, and strangers come in crowds of new ids, each refunded at once, and leave no row. The clock reads integer milliseconds; the horizon is 1 s.
 */
type MemoryOperation =
  | { op: 'advance', ms: number }
  | { op: 'reserve' | 'refunded', key: number }
  | { op: 'spenders' | 'strangers', keys: number }

const memoryOperation: fc.Arbitrary<MemoryOperation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 1200 }) }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 200 }) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('refunded' as const), key: fc.integer({ min: 0, max: 200 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('spenders' as const), keys: fc.integer({ min: 1, max: 80 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('strangers' as const), keys: fc.integer({ min: 1, max: 80 }) }) }
)

/** Distinct keys that spent in the `ms`-long span ending at `end`: (end - ms, end]. */
function spentWithin (spends: Array<{ key: string, at: number }>, end: number, ms: number): number {
  const keys = new Set<string>()
  for (const spend of spends) if (spend.at > end - ms && spend.at <= end) keys.add(spend.key)
  return keys.size
}

/**
 * The most distinct keys that spent within any `ms`-long span ending from `from` to the last spend:
 * the count changes only at `from` and where a key spends. `spends` is in time order; one pass.
 */
function mostWithin (spends: Array<{ key: string, at: number }>, from: number, ms: number): number {
  const ends = [from, ...spends.filter(spend => spend.at > from).map(spend => spend.at)]
  const counts = new Map<string, number>()
  let [first, next, most] = [0, 0, 0]
  for (const end of ends) {
    for (; next < spends.length && spends[next].at <= end; next++) counts.set(spends[next].key, (counts.get(spends[next].key) ?? 0) + 1)
    for (; first < next && spends[first].at <= end - ms; first++) {
      const left = counts.get(spends[first].key)! - 1
      if (left === 0) counts.delete(spends[first].key)
      else counts.set(spends[first].key, left)
    }
    most = Math.max(most, counts.size)
  }
  return most
}

function checkMemoryBound (operations: MemoryOperation[]): void {
  const HORIZON = 1000
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 10, now: () => clock.ms })
  let spends: Array<{ key: string, at: number }> = []
  const check = (): void => {
    const now = clock.ms
    spends = spends.filter(spend => spend.at > now - 2 * HORIZON)
    const live = spentWithin(spends, now, HORIZON)
    if (pace.size < live) throw new Error(`t = ${now}: ${pace.size} rows for ${live} keys that spent within the horizon`)
    const recent = spentWithin(spends, now, 2 * HORIZON)
    if (pace.size > recent) throw new Error(`t = ${now}: ${pace.size} rows, more than the ${recent} keys that spent within two horizons`)
    // The most keys that spent within one horizon at any moment of the last.
    const most = mostWithin(spends, now - HORIZON + 1, HORIZON)
    if (pace.size > Math.max(RowTable.MIN_ROWS, 2 * most)) {
      throw new Error(`t = ${now}: ${pace.size} rows, more than twice the ${most} keys that spent within a horizon`)
    }
  }
  const spend = (key: string): void => {
    if (pace.reserve(key).granted) spends.push({ key, at: clock.ms })
    check()
  }
  operations.forEach((operation, step) => {
    if (operation.op === 'advance') clock.ms += operation.ms
    else if (operation.op === 'reserve') spend(`k${operation.key}`)
    else if (operation.op === 'refunded') {
      pace.reserve(`k${operation.key}`).refund()
      check()
    } else if (operation.op === 'spenders') for (let i = 0; i < operation.keys; i++) spend(`s${step}-${i}`)
    else {
      for (let i = 0; i < operation.keys; i++) pace.reserve(`x${step}-${i}`).refund()
      check()
    }
  })
}

t.test('the table holds the keys that spent within a horizon, plus at most as many again between sweeps', async t => {
  t.doesNotThrow(() => fc.assert(
    fc.property(fc.array(memoryOperation, { minLength: 50, maxLength: 250 }), checkMemoryBound),
    { seed: 0x5eed, numRuns: 60 }
  ))
})

t.test('a key calling below its rate keeps one row, restarted in place, and no sweep removes it', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 10, now: () => clock.ms })
  for (let i = 0; i < 100; i++) pace.reserve(`client-${i}`) // t0: 100 rows
  for (let ms = 200; ms <= 5000; ms += 200) { // every 200 ms, each bucket full again at every visit
    clock.ms = ms
    for (let i = 0; i < 100; i++) t.equal(pace.reserve(`client-${i}`).remaining, 9)
    t.equal(pace.size, 100)
  }
  clock.ms = 6000 // one horizon after their last grant: swept
  pace.reserve('next')
  t.equal(pace.size, 1)
})
