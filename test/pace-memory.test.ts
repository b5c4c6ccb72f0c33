import t from 'tap'
import { Pace } from '../lib/pace.js'
import { SlotTable } from '../lib/slot-table.js'

/**
 * Memory is bounded by who spent within the last horizon, not by who was named. Measured here in
 * rows and slots, never in bytes or time: a flood of distinct keys must leave nothing behind.
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

t.test('the slot table gives its arrays back after a flood', async t => {
  const table = new SlotTable()
  for (let i = 0; i < FLOOD; i++) table.insert(`key-${i}`, i)
  t.equal(table.capacity, 65_536)
  table.removeAtMost(Infinity)
  t.equal(table.size, 0)
  t.equal(table.capacity, SlotTable.MIN_SLOTS)
})

t.test('the slot table shrinks to twice what is still live after a flood', async t => {
  const table = new SlotTable()
  for (let i = 0; i < FLOOD; i++) table.insert(`key-${i}`, i)
  table.removeAtMost(FLOOD - 101) // 100 keys stay live
  t.equal(table.size, 100)
  t.equal(table.capacity, 200)
})

t.test('the slot table does not grow while flood keys come and go one at a time', async t => {
  const table = new SlotTable()
  for (let i = 0; i < FLOOD; i++) {
    table.insert(`key-${i}`, i)
    table.remove(`key-${i}`, table.slot(`key-${i}`))
  }
  t.equal(table.capacity, SlotTable.MIN_SLOTS)
})
