import t from 'tap'
import { randomBytes } from 'node:crypto'
import { Pace, type PaceOptions } from '../../lib/bucket/pace.js'

/**
 * The bucket, one behaviour per test. Time is a grid of integer milliseconds (t0 = 0, t1, ...) read
 * through an injected clock; no test sleeps or measures time.
 */

/** A Pace at `perSecond` whose clock reads `clock.ms`. */
function paceAt (perSecond: number, clock = { ms: 0 }): { pace: Pace, clock: { ms: number } } {
  return { pace: new Pace({ perSecond, now: () => clock.ms }), clock }
}

/** Reserves from `key` until a reservation is refused; returns how many were granted. */
function drain (pace: Pace, key: string): number {
  let granted = 0
  while (pace.reserve(key).granted) granted++
  return granted
}

t.test('options', async t => {
  t.test('perSecond must be a finite number >= 1, and the error names it and the value', async t => {
    const table: Array<[unknown, string]> = [
      [NaN, 'got NaN'],
      [Infinity, 'got Infinity'],
      [-Infinity, 'got -Infinity'],
      [0.5, 'got 0.5'],
      [0, 'got 0'],
      [-3, 'got -3'],
      ['10', 'got "10"'], // a string is not a number, even a numeric one
      [null, 'got null'],
      [undefined, 'got undefined'] // missing
    ]
    for (const [perSecond, got] of table) {
      t.throws(() => new Pace({ perSecond } as PaceOptions), {
        name: 'TypeError',
        message: `exchangepace: perSecond must be a finite number >= 1, ${got}`
      }, `perSecond ${String(perSecond)}`)
    }
  })

  t.test('missing options are a TypeError naming perSecond', async t => {
    t.throws(() => new Pace(undefined as unknown as PaceOptions), {
      name: 'TypeError',
      message: 'exchangepace: perSecond must be a finite number >= 1, got undefined'
    })
  })

  t.test('a now that is not a function is a TypeError naming now and the type', async t => {
    t.throws(() => new Pace({ perSecond: 10, now: 5 } as unknown as PaceOptions), {
      name: 'TypeError',
      message: 'exchangepace: now must be a function returning milliseconds, got number'
    })
    t.throws(() => new Pace({ perSecond: 10, now: null } as unknown as PaceOptions), {
      name: 'TypeError',
      message: 'exchangepace: now must be a function returning milliseconds, got object'
    })
  })

  t.test('the smallest rate, 1, and fractional rates above it are accepted as given', async t => {
    t.equal(new Pace({ perSecond: 1, now: () => 0 }).perSecond, 1)
    t.equal(new Pace({ perSecond: 2.5, now: () => 0 }).perSecond, 2.5)
  })

  t.test('without now, the default monotonic clock is used and the pace grants', async t => {
    const pace = new Pace({ perSecond: 1 })
    const first = pace.reserve('k')
    t.equal(first.granted, true)
    t.equal(first.remaining, 0)
    t.equal(pace.size, 1)
  })
})

t.test('a full bucket grants exactly floor(rate) at one instant', async t => {
  for (const perSecond of [1, 3, 10, 2.5, 7.3]) {
    const { pace } = paceAt(perSecond)
    t.equal(drain(pace, 'k'), Math.floor(perSecond), `rate ${perSecond}`)
  }
})

t.test('remaining counts the whole units left after each grant', async t => {
  const table: Array<[number, number[]]> = [
    [1, [0]],
    [3, [2, 1, 0]],
    [2.5, [1, 0]], // 1.5 then 0.5 left: whole units only
    [7.3, [6, 5, 4, 3, 2, 1, 0]]
  ]
  for (const [perSecond, expected] of table) {
    const { pace } = paceAt(perSecond)
    const remaining = expected.map(() => pace.reserve('k').remaining)
    t.same(remaining, expected, `rate ${perSecond}`)
  }
})

t.test('a refused reservation says so, with nothing remaining', async t => {
  const { pace } = paceAt(1)
  pace.reserve('k')
  const refused = pace.reserve('k')
  t.equal(refused.granted, false)
  t.equal(refused.remaining, 0)
})

t.test('a granted reservation has retryAfterMs 0', async t => {
  const { pace } = paceAt(3)
  t.equal(pace.reserve('k').retryAfterMs, 0)
  t.equal(pace.reserve('k').retryAfterMs, 0)
  t.equal(pace.reserve('k').retryAfterMs, 0) // the last unit
})

t.test('a refusal debits nothing', async t => {
  const { pace, clock } = paceAt(4)
  drain(pace, 'k') // t0: 4 granted, then refused
  for (let i = 0; i < 10; i++) pace.reserve('k') // t0: ten more refusals
  clock.ms = 250 // t1: one unit back, refusals notwithstanding
  t.equal(drain(pace, 'k'), 1)
})

t.test('keys have separate buckets', async t => {
  const { pace } = paceAt(2)
  t.equal(drain(pace, 'a'), 2)
  t.equal(drain(pace, 'b'), 2)
})

t.test('after d ms exactly the refilled whole units are granted again', async t => {
  // Each row: rate, d (ms after the bucket was emptied at t0), whole units granted at t0 + d.
  const table: Array<[number, number, number]> = [
    [10, 0, 0],
    [10, 99, 0], // 0.99 units
    [10, 100, 1], // exactly one unit: granted on the tie
    [10, 250, 2], // 2.5 units
    [10, 1000, 10], // full again
    [3, 333, 0], // 0.999 units
    [3, 334, 1], // 1.002 units
    [3, 1000, 3], // exactly full
    [2.5, 199, 0], // 0.5 left at t0, + 0.4975
    [2.5, 200, 1], // 0.5 + 0.5: a tie
    [2.5, 600, 2], // 0.5 + 1.5: a tie
    [2.5, 1000, 2], // 0.5 + 2.5 capped at 2.5
    [7.3, 95, 0], // 0.3 left at t0, + 0.6935
    [7.3, 96, 1], // 0.3 + 0.7008
    [7.3, 685, 5], // 0.3 + 5.0005
    [7.3, 1000, 7], // capped at 7.3
    [1, 999, 0],
    [1, 1000, 1]
  ]
  for (const [perSecond, d, expected] of table) {
    const { pace, clock } = paceAt(perSecond)
    drain(pace, 'k') // t0
    clock.ms = d // t1
    t.equal(drain(pace, 'k'), expected, `rate ${perSecond}, ${d} ms after`)
  }
})

t.test('refill is continuous: a unit is back after 1000/rate ms, however the wait is split', async t => {
  const { pace, clock } = paceAt(4)
  drain(pace, 'k') // t0
  for (const ms of [50, 100, 150, 200]) { // t1..t4: not yet a unit
    clock.ms = ms
    t.equal(pace.reserve('k').granted, false, `at ${ms} ms`)
  }
  clock.ms = 250 // t5: exactly one unit
  t.equal(pace.reserve('k').granted, true)
  t.equal(pace.reserve('k').granted, false)
})

t.test('an hour of silence gives one second of the rate, not more', async t => {
  const { pace, clock } = paceAt(10)
  drain(pace, 'k') // t0
  clock.ms = 3_600_000 // t1: an hour later
  t.equal(drain(pace, 'k'), 10)
})

t.test('a key never seen has a full bucket at any time', async t => {
  const { pace } = paceAt(10, { ms: 3_600_000 })
  t.equal(drain(pace, 'new'), 10)
})

t.test('retryAfterMs is the exact wait until one unit is back', async t => {
  // Each row: rate, ms after the bucket was emptied at t0, expected retryAfterMs.
  const table: Array<[number, number, number]> = [
    [4, 0, 250],
    [4, 100, 150],
    [4, 249, 1],
    [1, 0, 1000],
    [1, 999, 1],
    [10, 30, 70],
    [3, 0, 1000 / 3],
    [3, 100, 1000 / 3 - 100],
    [2.5, 0, 200], // 0.5 left, 0.5 to go at 2.5 per second
    [2.5, 150, 50],
    [7.3, 0, 700 / 7.3], // 0.3 left, 0.7 to go
    [7.3, 50, 700 / 7.3 - 50]
  ]
  for (const [perSecond, d, expected] of table) {
    const { pace, clock } = paceAt(perSecond)
    drain(pace, 'k') // t0
    clock.ms = d // t1
    const refused = pace.reserve('k')
    t.equal(refused.granted, false)
    t.ok(Math.abs(refused.retryAfterMs - expected) < 1e-9,
      `rate ${perSecond}, ${d} ms after: ${refused.retryAfterMs} ~ ${expected}`)
  }
})

t.test('waiting exactly retryAfterMs gets the unit', async t => {
  const { pace, clock } = paceAt(4)
  drain(pace, 'k') // t0
  clock.ms = 100 // t1
  const { retryAfterMs } = pace.reserve('k')
  clock.ms = 100 + retryAfterMs // t2 = t1 + 150
  t.equal(pace.reserve('k').granted, true)
})

t.test('refund', async t => {
  t.test('gives the unit back', async t => {
    const { pace } = paceAt(3)
    const reservations = [pace.reserve('k'), pace.reserve('k'), pace.reserve('k')] // t0: empty
    reservations[0].refund()
    const again = pace.reserve('k')
    t.equal(again.granted, true)
    t.equal(again.remaining, 0)
    t.equal(pace.reserve('k').granted, false)
  })

  t.test('a second refund of the same reservation does nothing', async t => {
    const { pace } = paceAt(3)
    const [first] = [pace.reserve('k'), pace.reserve('k'), pace.reserve('k')] // t0: empty
    first.refund()
    first.refund()
    t.equal(drain(pace, 'k'), 1)
  })

  t.test('refunding a refused reservation does nothing', async t => {
    const { pace } = paceAt(1)
    pace.reserve('k') // t0: the one unit
    const refused = pace.reserve('k')
    refused.refund()
    t.equal(pace.reserve('k').granted, false)
    t.equal(pace.size, 1)
  })

  t.test('the bucket never holds more than one second of the rate after refunds', async t => {
    const { pace, clock } = paceAt(3)
    const a = pace.reserve('k') // t0: 2 left
    const b = pace.reserve('k') // t0: 1 left
    clock.ms = 500 // t1: 2.5 units
    a.refund() // 3.5, held at 3
    b.refund() // still 3
    t.equal(drain(pace, 'k'), 3)
  })

  t.test('refunding a reservation after its unit refilled gives nothing beyond capacity', async t => {
    const { pace, clock } = paceAt(3)
    const old = pace.reserve('k') // t0
    clock.ms = 2000 // t1: full again
    old.refund()
    t.equal(drain(pace, 'k'), 3)
  })

  t.test('a refund that makes the bucket full deletes the row', async t => {
    const { pace } = paceAt(3)
    const reservation = pace.reserve('k')
    t.equal(pace.size, 1)
    reservation.refund()
    t.equal(pace.size, 0)
  })

  t.test('a refund that leaves the bucket short keeps the row', async t => {
    const { pace } = paceAt(3)
    const a = pace.reserve('k')
    const b = pace.reserve('k')
    a.refund()
    t.equal(pace.size, 1)
    b.refund()
    t.equal(pace.size, 0)
  })

  t.test('a refund on a row whose time has come gives nothing: the bucket is full', async t => {
    const { pace, clock } = paceAt(3)
    const a = pace.reserve('k') // t0
    pace.reserve('k') // t0
    clock.ms = 1000 // t1: full again, row not yet swept
    a.refund()
    t.equal(drain(pace, 'k'), 3)
  })

  t.test('refunds in any order give every unit back when nothing else was spent', async t => {
    // Each row: the order in which three reservations of one instant are refunded.
    const orders = [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0], [0, 2, 1], [2, 0, 1]]
    for (const order of orders) {
      const { pace, clock } = paceAt(10)
      const held = [pace.reserve('k'), pace.reserve('k'), pace.reserve('k')] // t0
      clock.ms = 50 // t1: verification took 50 ms
      for (const i of order) held[i].refund()
      t.equal(drain(pace, 'k'), 10, `refunded in the order ${order.join(', ')}`)
    }
  })

  t.test('refunds after the bucket was full again give nothing, even within one second', async t => {
    const { pace, clock } = paceAt(10)
    const strangers = Array.from({ length: 5 }, () => pace.reserve('k')) // t0: 5 left
    clock.ms = 600 // t1: full again since t0 + 500
    t.equal(drain(pace, 'k'), 10, 'the whole bucket')
    clock.ms = 700 // t2: one unit refilled
    for (const stranger of strangers) stranger.refund()
    t.equal(drain(pace, 'k'), 1, 'kept units from t1 to t2: 11 = 10 x (1 + 0.1), not 16')
  })

  t.test('refunds give back no more than the grants made after them leave room for', async t => {
    const { pace, clock } = paceAt(10)
    const strangers = Array.from({ length: 5 }, () => pace.reserve('k')) // t0: 5 left
    clock.ms = 499 // t1: 9.99 units
    t.equal(drain(pace, 'k'), 9)
    clock.ms = 500 // t2
    for (const stranger of strangers) stranger.refund() // the 9 grants after them hold the bucket
    t.equal(drain(pace, 'k'), 1, 'kept units from t1 to t2: 10, as if the strangers had never come; not 15')
  })

  t.test('a refund after the row was swept changes nothing', async t => {
    const { pace, clock } = paceAt(3)
    const old = pace.reserve('k') // t0
    clock.ms = 1000 // t1: one horizon later
    pace.reserve('other') // the sweep removes k's row
    t.equal(pace.size, 1)
    old.refund()
    t.equal(pace.size, 1)
    t.equal(drain(pace, 'k'), 3)
    t.equal(pace.size, 2)
  })

  t.test('a refund finds its row where a shrinking sweep moved it, and touches no other row', async t => {
    const { pace, clock } = paceAt(10)
    for (let i = 0; i < 40; i++) pace.reserve(`k${i}`) // t0: rows 0..39 of 64, full again at 100 ms
    clock.ms = 950
    const first = pace.reserve('k1') // a new run in row 1, full again at 1050 ms
    const third = pace.reserve('k3') // in row 3, begun at the same instant
    clock.ms = 1000
    pace.reserve('x') // the sweep leaves k1 and k3 and shrinks the table: they move to rows 0 and 1
    t.equal(pace.size, 3)
    first.refund() // row 1 now holds k3's row, begun at the same instant as k1's
    t.equal(pace.size, 3, 'k1 got its unit back: its bucket is full, its row as it was before 950 ms (granted at t0)')
    t.equal(pace.reserve('k3').remaining, 8, 'k3 keeps its spend')
    t.equal(drain(pace, 'k1'), 10)
    third.refund()
    t.equal(drain(pace, 'k3'), 9, 'k3 gets its unit back beside the one spent since')
  })

  t.test('refunding the grant that restarted a full row leaves the row as it was: it goes a horizon after the earlier grant', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('k') // t0: kept, full again at 100 ms
    clock.ms = 500 // t1: k reads full
    const again = pace.reserve('k') // a new run in k's row
    again.refund() // no grant of the run is kept
    t.equal(pace.size, 1, 'the row stays, full')
    t.equal(pace.reserve('k').remaining, 9, 'a full bucket')
    pace.reserve('k').refund() // the grant that began this run is kept: refunding a later one changes no row's life
    clock.ms = 1000 // t2
    pace.reserve('x') // a sweep: k was last granted at 500 ms, so it stays
    t.equal(pace.size, 2)
  })

  t.test('a refunded restart keeps the sweep to the key\'s earlier grant', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('k') // t0
    clock.ms = 500 // t1
    pace.reserve('k').refund() // restarted and refunded: as if it had not come
    clock.ms = 1000 // t2: one horizon after k's only kept grant
    pace.reserve('x') // the sweep removes k
    t.equal(pace.size, 1)
  })

  t.test('a refund after the bucket refilled and was spent again gives nothing back', async t => {
    const { pace, clock } = paceAt(3)
    const old = pace.reserve('k') // t0
    clock.ms = 1000 // t1: k refilled, then swept by its next reserve
    pace.reserve('k') // 2 left
    old.refund() // still 2: giving it back would admit one unit more than the rate
    t.equal(drain(pace, 'k'), 2)
  })

  t.test('a refund with later spends gives back what the later spends leave room for', async t => {
    const { pace, clock } = paceAt(3)
    const first = pace.reserve('k') // t0: 2 left
    clock.ms = 100 // t1: 0.3 refilled
    pace.reserve('k')
    pace.reserve('k') // 0.3 left
    first.refund() // 1 left: the two spends at t1 alone leave 1, so 1.3 would be one refill too many
    t.equal(pace.reserve('k').remaining, 0, 'one unit taken')
    t.equal(pace.reserve('k').granted, false)
    clock.ms = 433 // t2: 0.999 refilled since t1
    t.equal(pace.reserve('k').granted, false)
    clock.ms = 434
    t.equal(pace.reserve('k').granted, true)
  })

  t.test('a later grant that was refunded no longer holds back an earlier refund', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('k')
    pace.reserve('k')
    const stranger = pace.reserve('k') // t0: 7 left
    clock.ms = 200 // t1: 9 left
    const [second, third] = [pace.reserve('k'), pace.reserve('k'), pace.reserve('k')] // 6 left
    second.refund()
    third.refund() // 8 left: one grant after the stranger is still kept
    stranger.refund() // 9: as if the three strangers had never come
    t.equal(drain(pace, 'k'), 9, 'counting the two refunded grants as kept would leave 8')
  })

  t.test('a refund with later spends on a deep bucket gives the whole unit back', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('k')
    pace.reserve('k')
    const third = pace.reserve('k') // t0: 7 left
    clock.ms = 1 // t1: 7.01
    pace.reserve('k') // 6.01
    third.refund() // 7.01: one spend since, far from full
    t.equal(drain(pace, 'k'), 7)
  })

  t.test('refunds of every reservation of many random ids leave no rows', async t => {
    const { pace } = paceAt(10)
    let granted = 0
    for (let i = 0; i < 20_000; i++) {
      const reservation = pace.reserve(randomBytes(12).toString('base64url'))
      if (reservation.granted) granted++
      reservation.refund()
    }
    t.equal(granted, 20_000)
    t.equal(pace.size, 0)
  })
})

t.test('the sweep', async t => {
  t.test('rows that refill made full stay until a sweep runs', async t => {
    const { pace, clock } = paceAt(10)
    for (let i = 0; i < 15; i++) pace.reserve(`a${i}`) // t0: 15 rows
    clock.ms = 100 // t1: every row full again, but 15 rows is not a doubling of 16
    pace.reserve('b')
    t.equal(pace.size, 16)
  })

  t.test('runs when the table has reached twice its size after the previous sweep', async t => {
    const { pace, clock } = paceAt(10)
    for (let i = 0; i < 16; i++) pace.reserve(`a${i}`) // t0: 16 rows
    clock.ms = 500 // t1
    pace.reserve('b') // sweep at 16 rows removes nothing (all granted within a horizon); next sweep at 32 rows or 1500 ms
    t.equal(pace.size, 17)
    clock.ms = 1000 // t2: the 16 rows of t0 were granted one horizon ago
    for (let i = 0; i < 15; i++) pace.reserve(`c${i}`) // 32 rows, no sweep yet
    t.equal(pace.size, 32)
    pace.reserve('d') // 32 rows: the sweep removes the 16 of t0
    t.equal(pace.size, 17)
  })

  t.test('keeps a full row while its key was granted within the last horizon, and restarts it in place', async t => {
    const { pace, clock } = paceAt(10)
    const first = pace.reserve('k') // t0: full again at 100 ms
    for (let i = 0; i < 16; i++) pace.reserve(`a${i}`)
    clock.ms = 500 // t1: k reads full
    pace.reserve('b') // a sweep at 17 rows: k was granted within the horizon, so it stays
    t.equal(pace.size, 18)
    const second = pace.reserve('k') // a new run on the same row: a full bucket's grant
    t.equal(second.remaining, 9)
    t.equal(pace.size, 18)
    first.refund() // the run it came from is over: nothing back
    t.equal(pace.reserve('k').remaining, 8)
  })

  t.test('a row that reads full is a full bucket until the sweep removes it', async t => {
    const { pace, clock } = paceAt(10)
    drain(pace, 'k') // t0: full again at 1000 ms
    clock.ms = 1999 // t1: full, not yet a horizon past its latest grant; no sweep due either
    t.equal(pace.size, 1)
    t.equal(drain(pace, 'k'), 10, 'the whole bucket, as from no row')
  })

  t.test('runs when one horizon (one second) has passed since the previous sweep', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('a') // t0: full again at 100 ms
    clock.ms = 999 // t1
    pace.reserve('b') // full again at 1099 ms; no sweep yet
    t.equal(pace.size, 2)
    clock.ms = 1000 // t2: one horizon after the pace began
    pace.reserve('c')
    t.equal(pace.size, 2) // a removed; b and c stay
  })

  t.test('tidy sweeps by the same rule without reserving', async t => {
    const { pace, clock } = paceAt(10)
    pace.reserve('a') // t0: full again at 100 ms
    pace.reserve('b')
    clock.ms = 999 // t1
    pace.tidy()
    t.equal(pace.size, 2, 'no sweep due: less than a horizon, and the table has not doubled')
    clock.ms = 1000 // t2: one horizon after the pace began
    pace.tidy()
    t.equal(pace.size, 0)
  })

  t.test('removes only rows whose key was last granted one horizon ago or more', async t => {
    const { pace, clock } = paceAt(10)
    drain(pace, 'empty') // t0: full again at 1000 ms
    pace.reserve('one') // t0: full again at 100 ms
    clock.ms = 999 // t1
    pace.reserve('late') // no sweep: less than a horizon, and 2 rows
    clock.ms = 1000 // t2
    pace.reserve('trigger') // sweep: removes empty (exactly full) and one, keeps late
    t.equal(pace.size, 2)
    t.equal(pace.reserve('late').remaining, 8) // late still spent its unit at 999 ms
  })

  t.test('spenders leave one horizon after they spent', async t => {
    const { pace, clock } = paceAt(10)
    for (let i = 0; i < 1000; i++) pace.reserve(`spender${i}`) // t0
    t.equal(pace.size, 1000)
    clock.ms = 1000 // t1: one horizon later
    pace.reserve('next').refund()
    t.equal(pace.size, 0)
  })

  t.test('a swept key starts again from a full bucket', async t => {
    const { pace, clock } = paceAt(10)
    drain(pace, 'k') // t0
    clock.ms = 1000 // t1
    pace.reserve('other') // sweeps k
    t.equal(drain(pace, 'k'), 10)
  })
})

t.test('a block', async t => {
  t.test('refuses its key until its end, and inspecting it after the end finds a full bucket', async t => {
    const { pace, clock } = paceAt(10)
    pace.block('k', 1500) // t0
    t.match(pace.inspect('k'), { remaining: 0, blockedMs: 1500 })
    clock.ms = 1000
    t.notOk(pace.reserve('k').granted, 'refused before its end')
    clock.ms = 2000 // the block ended at 1500; its row is not swept yet
    t.same(pace.inspect('k'), pace.inspect('never-spent'), 'as full as a key that never spent')
    t.equal(drain(pace, 'k'), 10, 'and a full bucket to spend')
  })
})

t.test('a block that finds the table due for a sweep keeps the rows not yet full', async t => {
  const clock = { ms: 0 }
  const pace = new Pace({ perSecond: 1, now: () => clock.ms })
  for (let i = 0; i < 16; i++) pace.reserve(`k${i}`) // the table's first 16 rows: a sweep is due at the next insert
  pace.block('blocked', 3_600_000)
  t.equal(pace.size, 17, 'the sweep ran at the time of the block, not at its end')
  t.equal(pace.inspect('k0').remaining, 0, 'k0 spent its unit a moment ago')
})
