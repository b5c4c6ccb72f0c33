import t from 'tap'
import { Pace, RedisStore } from '../../lib/index.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import type { FastifyBaseLogger } from 'fastify'

// The Lua scripts against a real Redis: the same bucket as the in-process Pace, on Redis TIME.
// Without moving Redis' clock, these use rates slow enough that a burst finishes long before a
// unit refills (rate 10: one unit per 100 ms; a pipelined burst takes well under a millisecond).

const client = await redisOrSkip()
if (client !== null) {
  const silent = { warn () {}, info () {}, debug () {} } as unknown as FastifyBaseLogger

  /** A pace of `limit` per `window` seconds (1: a perSecond pace) in a store of its own. */
  const paceOf = (label: string, limit: number, window = 1) => {
    const prefix = uniquePrefix(label)
    // 'closed': no pace in memory goes first, so every decision is the script's.
    const store = new RedisStore({ client, prefix, timeoutMs: 1000, whenUnavailable: 'closed' })
    const pace = store.pace('p', { limit, window }, new Pace({ limit, window }), silent)
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
    const { pace, redisKey } = paceOf('expiry', 2)
    await pace.reserve('c')
    const ttl = await client.pttl(redisKey('c'))
    t.ok(ttl > 0 && ttl <= 500, `one unit of rate 2 refills in 500 ms; PTTL was ${ttl}`)
    await pace.reserve('c')
    const longer = await client.pttl(redisKey('c'))
    t.ok(longer > 500 && longer <= 1000, `two units refill in 1000 ms; PTTL was ${longer}`)
  })

  t.test('a refund that leaves the bucket full deletes the key; one that does not shortens its expiry', async t => {
    const { pace, redisKey } = paceOf('refund', 2)
    const first = await pace.reserve('c')
    const second = await pace.reserve('c')
    second.refund()
    await client.ping()
    const ttl = await client.pttl(redisKey('c'))
    t.ok(ttl > 0 && ttl <= 500, `one unit still spent; PTTL was ${ttl}`)
    first.refund()
    await client.ping()
    t.equal(await client.exists(redisKey('c')), 0)
  })

  t.test('refunds give back a unit exactly once and never past capacity', async t => {
    const { pace, redisKey } = paceOf('capacity', 2)
    const granted = await Promise.all([pace.reserve('c'), pace.reserve('c')])
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

  // Redis' clock cannot be moved, so some of these write a key's row by hand, relative to Redis
  // TIME, in the scripts' microticks (rate 10: one unit is 1e6 microticks, the bucket 1e7, and one
  // microsecond of TIME is 10 microticks).
  const UNIT = 1_000_000
  const microticksNow = async (rate: number): Promise<{ now: number, wrap: number }> => {
    const [seconds, micros] = await client.time()
    const wrap = 2 ** 32 * rate
    return { now: Math.round(((Number(seconds) * 1e6 + Number(micros)) % 2 ** 32) * rate), wrap }
  }
  /**
   * A row as the scripts write it: the format byte 2, full, run, count and last as doubles, the
   * marks as a uint32, and the rate it was written at as a double, little-endian.
   */
  const rowOf = (full: number, run: number, count: number, last: number, marks: number, rate = 10): Buffer => {
    const row = Buffer.alloc(45)
    row.writeUInt8(2, 0)
    row.writeDoubleLE(full, 1)
    row.writeDoubleLE(run, 9)
    row.writeDoubleLE(count, 17)
    row.writeDoubleLE(last, 25)
    row.writeUInt32LE(marks, 33)
    row.writeDoubleLE(rate, 37)
    return row
  }
  /** The row a key holds, as [full, run, count, last, marks]. */
  const rowAt = async (key: string): Promise<number[] | null> => {
    const row = await client.getBuffer(key)
    return row === null ? null : [row.readDoubleLE(1), row.readDoubleLE(9), row.readDoubleLE(17), row.readDoubleLE(25), row.readUInt32LE(33)]
  }
  const refund = (client as unknown as { exchangepaceRefund (key: string, rate: number, run: number, count: number, at: number, windowMs?: number): Promise<number> }).exchangepaceRefund.bind(client)
  const grantOf = (reservation: unknown): readonly [number, number, number] => {
    const { run, count, at } = reservation as { run: number, count: number, at: number }
    return [run, count, at]
  }

  t.test('a reservation carries its run, its number in it and its time; a refund counts only within that run', async t => {
    const { pace, redisKey } = paceOf('run', 3)
    const [run, first, firstAt] = grantOf(await pace.reserve('c'))
    const [sameRun, second] = grantOf(await pace.reserve('c'))
    t.ok(Number.isInteger(run) && Number.isInteger(firstAt), 'readings of the clock, as integers')
    t.same([sameRun, first, second], [run, 1, 2], 'one run, grants 1 and 2')
    t.equal(await refund(redisKey('c'), 3, run - 1, 1, firstAt), 0, 'a run that is over (the bucket was full since) gives nothing')
    t.equal(await client.exists(redisKey('c')), 1)
  })

  t.test('a refund run twice (ioredis resends a command whose answer a lost connection kept) gives back once', async t => {
    const { pace, redisKey } = paceOf('twice', 3)
    const key = redisKey('c')
    const grants = [grantOf(await pace.reserve('c')), grantOf(await pace.reserve('c')), grantOf(await pace.reserve('c'))]
    t.equal(await refund(key, 3, ...grants[0]), 1, 'an earlier grant is marked refunded')
    const marked = await rowAt(key)
    t.equal(await refund(key, 3, ...grants[0]), 0, 'run again, it gives nothing')
    t.same(await rowAt(key), marked)
    t.equal(await refund(key, 3, ...grants[2]), 1, 'the latest grant is uncounted')
    const uncounted = await rowAt(key)
    t.equal(await refund(key, 3, ...grants[2]), 0, 'run again, it gives nothing')
    t.same(await rowAt(key), uncounted)
    await client.del(key)
  })

  t.test('a resent refund of a grant refunded before the grant after it gives nothing, once that later grant was refunded too', async t => {
    const { pace, redisKey } = paceOf('resent-marked', 3)
    const key = redisKey('c')
    const [, earlier, latest] = [grantOf(await pace.reserve('c')), grantOf(await pace.reserve('c')), grantOf(await pace.reserve('c'))]
    t.equal(await refund(key, 3, ...earlier), 1, 'marked refunded')
    t.equal(await refund(key, 3, ...latest), 1, 'uncounted: the earlier grant is now the run\'s latest, its mark moved to bit 0')
    const row = await rowAt(key)
    t.same([row![2], row![4]], [2, 1])
    t.equal(await refund(key, 3, ...earlier), 0, 'resent, it gives nothing')
    t.same(await rowAt(key), row, 'the row is as it was: the first grant still holds its unit')
    const burst = await Promise.all([pace.reserve('c'), pace.reserve('c'), pace.reserve('c')])
    t.equal(burst.filter(r => r.granted).length, 2, 'two of three units are back, not three')
    await client.del(key)
  })

  t.test('refunds in any order give every unit back when nothing else was spent', async t => {
    for (const order of [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0]]) {
      // At 3/s the three units keep the key a second unless the refunds delete it.
      const { pace, redisKey } = paceOf(`order-${order.join('')}`, 3)
      const held = await Promise.all([pace.reserve('c'), pace.reserve('c'), pace.reserve('c')])
      for (const i of order) held[i].refund()
      await client.ping()
      t.equal(await client.exists(redisKey('c')), 0, `refunded in the order ${order.join(', ')}: the bucket is full, no key`)
    }
  })

  t.test('a refund gives back no more than the run\'s later grants leave room for', async t => {
    const { redisKey } = paceOf('later', 10)
    const key = redisKey('c')
    const { now, wrap } = await microticksNow(10)
    const run = (now - 5 * UNIT + wrap) % wrap
    // 14 grants, the latest now; the row 9 units ahead of it; none refunded.
    const full = (now + 9 * UNIT) % wrap
    await client.set(key, rowOf(full, run, 14, now, 0), 'PX', 5000)
    t.equal(await refund(key, 10, run, 5, run), 1)
    t.same(await rowAt(key), [full, run, 14, now, 2 ** 9], 'the nine grants after the 5th hold the row where it is; the 5th is marked refunded')
    t.ok(await client.pttl(key) > 4000, 'a row whose time stays keeps its expiry')
    t.equal(await refund(key, 10, run, 13, now), 1)
    t.same(await rowAt(key), [(now + 8 * UNIT) % wrap, run, 14, now, 2 ** 9 + 2], 'one grant after the 13th, at the same moment: one unit back')
    t.equal(await refund(key, 10, run, 14, now), 1)
    t.same(await rowAt(key), [(now + 7 * UNIT) % wrap, run, 13, now, 2 ** 8 + 1], 'the latest grant: one unit back, one grant fewer counted, the marks one grant nearer')
    const ttl = await client.pttl(key)
    t.ok(ttl > 0 && ttl <= 700, `the key expires when the bucket is full again; PTTL was ${ttl}`)
    await client.del(key)
  })

  t.test('a later grant that was refunded no longer holds back an earlier refund', async t => {
    // At 3/s a unit is 333 ms: the row the refund leaves 2 units ahead lives 667 ms, time to read it.
    const { redisKey } = paceOf('marked', 3)
    const key = redisKey('c')
    const { now, wrap } = await microticksNow(3)
    const run = (now - 12 * UNIT + wrap) % wrap
    // 14 grants in 4 s (at most 3 x (1 + 4) = 15), the latest now, the 12th and 13th refunded; the
    // row 3 units ahead, the bucket empty.
    await client.set(key, rowOf((now + 3 * UNIT) % wrap, run, 14, now, 0b110, 3), 'PX', 5000)
    t.equal(await refund(key, 3, run, 11, run), 1)
    t.same(await rowAt(key), [(now + 2 * UNIT) % wrap, run, 14, now, 0b1110], 'only the 14th holds it: one unit back (three later grants counted as kept would give none)')
    await client.del(key)
  })

  t.test('refund marks are counted exactly whichever of the 32 bits are set', async t => {
    const { redisKey } = paceOf('all-marks', 10)
    const key = redisKey('c')
    const { now, wrap } = await microticksNow(10)
    const run = (now - 5 * UNIT + wrap) % wrap
    // 40 grants, the latest now; the row 5 units ahead; grants 9 to 16 and 32 refunded (bits 24-31 and 8).
    const row = [(now + 5 * UNIT) % wrap, run, 40, now, 0xff000100] as const
    await client.set(key, rowOf(...row, 10), 'PX', 5000)
    t.equal(await refund(key, 10, run, 1, run), 1)
    t.same(await rowAt(key), row, 'the 30 later grants still kept hold the row where it is (beyond 32 back, nothing is marked)')
    // Every bit set but grant 33's own (bit 7).
    await client.set(key, rowOf((now + 5 * UNIT) % wrap, run, 40, now, 0xffffff7f, 10), 'PX', 5000)
    t.equal(await refund(key, 10, run, 33, run), 1)
    t.same(await rowAt(key), [(now + 4 * UNIT) % wrap, run, 40, now, 0xffffffff], 'all 7 later grants refunded: one unit back, and its own bit set')
    await client.del(key)
  })

  t.test('replicas declaring different rates for one pace (a deploy changing perSecond) share its bucket, as far from full in time', async t => {
    const prefix = uniquePrefix('rates')
    const store = new RedisStore({ client, prefix, timeoutMs: 1000 })
    const slow = store.pace('p', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), silent)
    const fast = store.pace('p', { limit: 10, window: 1 }, new Pace({ perSecond: 10 }), silent)
    const granted = [0, 0]
    let slowGrant: unknown = null
    // Sent together, alternating: one connection, so Redis runs them in this order within a
    // millisecond, where one after another they could take long enough for a unit to refill.
    const reservations = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? slow : fast).reserve('c')))
    reservations.forEach((reservation, i) => {
      if (!reservation.granted) return
      granted[i % 2]++
      if (i % 2 === 0) slowGrant = reservation
    })
    // Each grant at 5/s moves the bucket 0.2 s from full, each at 10/s 0.1 s: 3 and 4 fill the second.
    t.ok(granted[0] >= 1 && granted[1] >= 1, `both replicas are paced, neither locked out: ${granted.join(' and ')}`)
    t.ok(granted[0] + granted[1] <= 8, `together no more than the second of the faster rate allows: ${granted[0] + granted[1]}`)
    const key = `${prefix}p:c`
    const row = await client.getBuffer(key)
    t.equal(row!.readDoubleLE(37), 10, 'the row carries the rate of its latest writer')
    t.equal(await refund(key, 5, ...grantOf(slowGrant)), 0, 'a refund at another rate gives nothing')
    t.same(await client.getBuffer(key), row)
    await client.del(key)
  })

  t.test('a value the scripts did not write (the text row of an earlier build) reads as a full bucket, and a refund leaves it alone', async t => {
    const { pace, redisKey } = paceOf('foreign', 10)
    const key = redisKey('c')
    const { now, wrap } = await microticksNow(10)
    const text = `${(now + 9 * UNIT) % wrap}:${now}:9:${now}:0`
    const short = Buffer.from([1, 2, 3])
    const earlierBinary = Buffer.from(rowOf((now + 9 * UNIT) % wrap, now, 9, now, 0).subarray(0, 37))
    earlierBinary[0] = 1 // the binary row before it carried its rate
    for (const foreign of [text, short, earlierBinary, Buffer.concat([rowOf((now + 9 * UNIT) % wrap, now, 9, now, 0), short])]) {
      await client.set(key, foreign, 'PX', 5000)
      t.equal(await refund(key, 10, now, 1, now), 0)
      t.same(await client.getBuffer(key), Buffer.from(foreign), 'the refund leaves it as it was')
      const reservation = await pace.reserve('c')
      const [run, count, at] = grantOf(reservation)
      t.same([reservation.granted, reservation.remaining, count, run], [true, 9, 1, at], 'a new run: its first grant, nine units left')
      t.same(await rowAt(key), [(at + UNIT) % wrap, at, 1, at, 0], 'replaced by the grant\'s row')
    }
    await client.del(key)
  })

  t.test('a key of another type under the prefix (a hash, a list) reads as a full bucket too, not as an outage of the store', async t => {
    const { pace, redisKey } = paceOf('wrongtype', 10)
    const key = redisKey('c')
    const { now } = await microticksNow(10)
    for (const write of [() => client.hset(key, 'x', '1'), () => client.rpush(key, 'x')]) {
      await client.del(key)
      await write()
      t.equal(await refund(key, 10, now, 1, now), 0, 'a refund gives nothing')
      t.equal(await client.exists(key), 1, 'and leaves it')
      const reservation = await pace.reserve('c')
      const [run, count, at] = grantOf(reservation)
      t.same([reservation.granted, reservation.remaining, count, run], [true, 9, 1, at], 'granted by Redis: a new run, nine units left')
      t.equal(await client.type(key), 'string', 'replaced by the grant\'s row')
    }
    await client.del(key)
  })

  t.test('a stored time more than one bucket ahead (Redis\'s clock stepped back) is rewritten one bucket ahead', async t => {
    const { pace, redisKey } = paceOf('stepped', 10)
    const key = redisKey('c')
    const { now, wrap } = await microticksNow(10)
    await client.set(key, rowOf((now + 30 * UNIT) % wrap, now, 3, now, 0), 'PX', 5000)
    const refused = await pace.reserve('c')
    t.same([refused.granted, refused.retryAfterMs], [false, 100], 'one unit\'s wait, not three seconds')
    const after = await microticksNow(10)
    const [full, run, count, last, marks] = (await rowAt(key))!
    const ahead = (full - after.now + wrap) % wrap
    t.ok(ahead <= 10 * UNIT && ahead > 5 * UNIT, `the row is one bucket ahead of the reserve, not three: ${ahead / UNIT} units from now`)
    t.same([count, marks, last], [0, 0, run], 'a run with no grant in it')
    t.equal(await refund(key, 10, now, 3, now), 0, 'a refund of a grant from before the step gives nothing')
    const ttl = await client.pttl(key)
    t.ok(ttl > 0 && ttl <= 1000, `the key expires when the bucket is full again, within a second: PTTL ${ttl}`)
    // One unit later (written as if that time had passed: the row one unit nearer), a reserve grants.
    await client.set(key, rowOf((full - UNIT + wrap) % wrap, run, count, last, marks), 'PX', 1000)
    const granted = await pace.reserve('c')
    t.equal(granted.granted, true, 'granted once a unit has refilled')
    t.equal(grantOf(granted)[1], 1, 'the first grant of the run the step began')
    await client.del(key)
  })

  t.test('a refund after Redis\'s clock stepped back keeps the key a second at most', async t => {
    for (const rate of [10, 2.5]) {
      const { redisKey } = paceOf(`stepped-refund-${rate}`, rate)
      const key = redisKey('c')
      const { now, wrap } = await microticksNow(rate)
      // Three grants whose row is 30 units ahead (3 s at 10/s, 12 s at 2.5/s): the clock stepped back since they came.
      await client.set(key, rowOf((now + 30 * UNIT) % wrap, now, 3, now, 0, rate), 'PX', 20000)
      t.equal(await refund(key, rate, now, 3, now), 1, `${rate}/s: the latest grant gives its unit back`)
      const [full] = (await rowAt(key))!
      t.equal((full - now + wrap) % wrap, 29 * UNIT, `${rate}/s: the row one unit earlier`)
      const ttl = await client.pttl(key)
      t.ok(ttl > 0 && ttl <= 1000, `${rate}/s: no longer than the bucket takes to fill from now: PTTL ${ttl}`)
      await client.del(key)
    }
  })

  // Windows other than one second: the scripts read TIME in whole milliseconds, one of which is
  // `limit` microticks, so a unit is the window in ms of them (at 10 per 600 s a unit is 600,000
  // microticks, 60 s, and a millisecond of TIME is 10 microticks). Nothing refills noticeably
  // while these run, and none waits for a refill.
  const msTicksNow = async (limit: number): Promise<{ now: number, wrap: number }> => {
    const [seconds, micros] = await client.time()
    return { now: ((Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)) % 2 ** 36) * limit, wrap: 2 ** 36 * limit }
  }
  /** A row as the scripts write it for a window other than one second: format 3, the fields of rowOf, then the window in ms. */
  const windowedRowOf = (full: number, run: number, count: number, last: number, marks: number, rate: number, windowMs: number): Buffer => {
    const row = rowOf(full, run, count, last, marks, rate)
    row.writeUInt8(3, 0)
    const window = Buffer.alloc(8)
    window.writeDoubleLE(windowMs)
    return Buffer.concat([row, window])
  }
  /** The window in ms a row was written at, and its format byte and length. */
  const shapeOf = async (key: string): Promise<[format: number, bytes: number, windowMs: number | null]> => {
    const row = (await client.getBuffer(key))!
    return [row[0], row.length, row.length === 53 ? row.readDoubleLE(45) : null]
  }

  t.test('a window of 10 per 600 s grants exactly 10 of a concurrent burst, each saying what is left, then one unit\'s wait (60 s)', async t => {
    const { pace, redisKey } = paceOf('window-burst', 10, 600)
    t.teardown(() => client.del(redisKey('c')))
    const results = await Promise.all(Array.from({ length: 30 }, () => pace.reserve('c')))
    t.same(results.filter(r => r.granted).map(r => r.remaining).sort((a, b) => a - b), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    const waits = results.filter(r => !r.granted).map(r => r.retryAfterMs)
    t.equal(waits.length, 20)
    t.ok(waits.every(wait => wait > 55_000 && wait <= 60_000), `one unit refills in 60 s: ${Math.min(...waits)} to ${Math.max(...waits)} ms`)
    t.same(await shapeOf(redisKey('c')), [3, 53, 600_000], 'the row of a window: format 3, 53 bytes, its window in ms')
  })

  t.test('a key of a window expires the moment its bucket is full again: one unit after a grant, at most one window after any number', async t => {
    for (const [limit, window] of [[10, 600], [100, 86_400]]) {
      const { pace, redisKey } = paceOf(`window-expiry-${window}`, limit, window)
      const key = redisKey('c')
      t.teardown(() => client.del(key))
      const unitMs = window * 1000 / limit
      await pace.reserve('c')
      const ttl = await client.pttl(key)
      t.ok(ttl > unitMs - 5000 && ttl <= unitMs, `${limit} per ${window} s: one unit refills in ${unitMs} ms; PTTL was ${ttl}`)
      const rest = await Promise.all(Array.from({ length: limit }, () => pace.reserve('c')))
      t.equal(rest.filter(r => r.granted).length, limit - 1)
      const longest = await client.pttl(key)
      t.ok(longest > window * 1000 - 5000 && longest <= window * 1000, `${limit} per ${window} s: an empty bucket is full again in one window; PTTL was ${longest}`)
    }
  })

  t.test('on a window, a refund that leaves the bucket full deletes the key; one that does not keeps the expiry of what stays spent', async t => {
    const { pace, redisKey } = paceOf('window-refund', 10, 600)
    const first = await pace.reserve('c')
    const second = await pace.reserve('c')
    second.refund()
    await client.ping()
    const ttl = await client.pttl(redisKey('c'))
    t.ok(ttl > 55_000 && ttl <= 60_000, `one unit still spent; PTTL was ${ttl}`)
    first.refund()
    await client.ping()
    t.equal(await client.exists(redisKey('c')), 0)
  })

  t.test('a row of the other time base (a pace that changed between perSecond and a window) reads as a full bucket, and a refund leaves it alone', async t => {
    const windowed = paceOf('bases-windowed', 10, 600)
    const key = windowed.redisKey('c')
    const { now, wrap } = await microticksNow(10)
    const oneSecond = rowOf((now + 9 * UNIT) % wrap, now, 9, now, 0)
    await client.set(key, oneSecond, 'PX', 5000)
    t.equal(await refund(key, 10, now, 9, now, 600_000), 0)
    t.same(await client.getBuffer(key), oneSecond, 'the refund leaves it as it was')
    const granted = await windowed.pace.reserve('c')
    t.same([granted.granted, granted.remaining, grantOf(granted)[1]], [true, 9, 1], 'a new run: its first grant, nine units left')
    t.same(await shapeOf(key), [3, 53, 600_000], 'replaced by the window\'s row')
    await client.del(key)

    const perSecond = paceOf('bases-one-second', 10)
    const other = perSecond.redisKey('c')
    const ms = await msTicksNow(10)
    const ofWindow = windowedRowOf((ms.now + 9 * 600_000) % ms.wrap, ms.now, 9, ms.now, 0, 10, 600_000)
    await client.set(other, ofWindow, 'PX', 5000)
    t.equal(await refund(other, 10, ms.now, 9, ms.now), 0)
    t.same(await client.getBuffer(other), ofWindow, 'the refund leaves it as it was')
    const reservation = await perSecond.pace.reserve('c')
    t.same([reservation.granted, reservation.remaining, grantOf(reservation)[1]], [true, 9, 1], 'a new run: its first grant, nine units left')
    t.same(await shapeOf(other), [2, 45, null], 'replaced by the one-second row')
    await client.del(other)
  })

  t.test('replicas declaring another limit for one window (a deploy changing it) share its bucket, as far from full in time', async t => {
    const prefix = uniquePrefix('window-limits')
    const store = new RedisStore({ client, prefix, timeoutMs: 1000, whenUnavailable: 'closed' })
    const ten = store.pace('p', { limit: 10, window: 600 }, new Pace({ limit: 10, window: 600 }), silent)
    const twenty = store.pace('p', { limit: 20, window: 600 }, new Pace({ limit: 20, window: 600 }), silent)
    const key = `${prefix}p:c`
    t.teardown(() => client.del(key))
    const spent = await Promise.all(Array.from({ length: 5 }, () => ten.reserve('c')))
    t.ok(spent.every(r => r.granted), 'half of 10 per 600 s: the bucket is full again in 300 s')
    const burst = await Promise.all(Array.from({ length: 15 }, () => twenty.reserve('c')))
    t.equal(burst.filter(r => r.granted).length, 10, 'at 20 per 600 s, 300 s from full is 10 units of 30 s spent: 10 left')
    t.equal(burst[0].remaining, 9)
    t.equal((await client.getBuffer(key))!.readDoubleLE(37), 20, 'the row carries the limit of its latest writer')
    const row = await client.getBuffer(key)
    t.equal(await refund(key, 10, ...grantOf(spent[4]), 600_000), 0, 'a refund at another limit gives nothing')
    t.same(await client.getBuffer(key), row)
  })

  t.test('a row of a longer window further ahead than this bucket is this bucket empty, not a clock step: refused with its wait, and left alone', async t => {
    const prefix = uniquePrefix('window-lengths')
    const store = new RedisStore({ client, prefix, timeoutMs: 1000, whenUnavailable: 'closed' })
    const long = store.pace('p', { limit: 10, window: 600 }, new Pace({ limit: 10, window: 600 }), silent)
    const short = store.pace('p', { limit: 10, window: 60 }, new Pace({ limit: 10, window: 60 }), silent)
    const key = `${prefix}p:c`
    t.teardown(() => client.del(key))
    const spent = await Promise.all(Array.from({ length: 5 }, () => long.reserve('c')))
    const row = await client.getBuffer(key)
    const refused = await short.reserve('c')
    // 300 s from full; the short bucket holds 60 s and a unit of it is 6 s: one fits in 246 s.
    t.notOk(refused.granted)
    t.ok(refused.retryAfterMs > 241_000 && refused.retryAfterMs <= 246_000, `the wait until a unit fits the short bucket: ${refused.retryAfterMs} ms`)
    t.same(await client.getBuffer(key), row, 'the longer window\'s row is left as it was (its run and expiry go on)')
    t.equal(await refund(key, 10, ...grantOf(spent[4]), 60_000), 0, 'a refund at another window gives nothing')
    t.equal(await refund(key, 10, ...grantOf(spent[4]), 600_000), 1, 'its own window\'s refund gives its unit back')

    // Further ahead than the longer window too: Redis's clock stepped back since that row was written.
    const { now, wrap } = await msTicksNow(10)
    await client.set(key, windowedRowOf((now + 700_000 * 10) % wrap, now, 3, now, 0, 10, 600_000), 'PX', 5000)
    const stepped = await short.reserve('c')
    t.same([stepped.granted, stepped.retryAfterMs], [false, 6000], 'one unit\'s wait of the short bucket')
    const after = await msTicksNow(10)
    const ahead = ((await client.getBuffer(key))!.readDoubleLE(1) - after.now + wrap) % wrap
    t.ok(ahead <= 60_000 * 10 && ahead > 55_000 * 10, `rewritten one short bucket ahead: ${ahead / 10} ms`)
    t.same(await shapeOf(key), [3, 53, 60_000], 'by the short window')
    const ttl = await client.pttl(key)
    t.ok(ttl > 0 && ttl <= 60_000, `and it expires within the short window: PTTL ${ttl}`)
  })

  t.test('on a window, a stored time more than one window ahead (Redis\'s clock stepped back) is rewritten one window ahead, and a refund keeps the key one window at most', async t => {
    const { pace, redisKey } = paceOf('window-stepped', 10, 600)
    const key = redisKey('c')
    t.teardown(() => client.del(key))
    const unit = 600_000
    const { now, wrap } = await msTicksNow(10)
    await client.set(key, windowedRowOf((now + 30 * unit) % wrap, now, 3, now, 0, 10, 600_000), 'PX', 5000)
    const refused = await pace.reserve('c')
    t.same([refused.granted, refused.retryAfterMs], [false, 60_000], 'one unit\'s wait, not half an hour')
    const after = await msTicksNow(10)
    const row = (await client.getBuffer(key))!
    const ahead = (row.readDoubleLE(1) - after.now + wrap) % wrap
    t.ok(ahead <= 10 * unit && ahead > 9 * unit, `one window ahead of the reserve, not three: ${ahead / unit} units from now`)
    t.same([row.readDoubleLE(17), row.readUInt32LE(33)], [0, 0], 'a run with no grant in it')
    t.equal(await refund(key, 10, now, 3, now, 600_000), 0, 'a refund of a grant from before the step gives nothing')
    const ttl = await client.pttl(key)
    t.ok(ttl > 595_000 && ttl <= 600_000, `the key expires when the bucket is full again, one window: PTTL ${ttl}`)

    // A refund that comes before any reserve after the step.
    await client.set(key, windowedRowOf((now + 30 * unit) % wrap, now, 3, now, 0, 10, 600_000), 'PX', 5_000_000)
    t.equal(await refund(key, 10, now, 3, now, 600_000), 1, 'the latest grant gives its unit back')
    t.equal(((await client.getBuffer(key))!.readDoubleLE(1) - now + wrap) % wrap, 29 * unit, 'the row one unit earlier')
    const capped = await client.pttl(key)
    t.ok(capped > 0 && capped <= 600_000, `no longer than the bucket takes to fill from now: PTTL ${capped}`)
  })

  t.test('an answer that came while the event loop was stalled past timeoutMs counts: no outage', async t => {
    const prefix = uniquePrefix('stall')
    const store = new RedisStore({ client, prefix, timeoutMs: 50 })
    const pace = store.pace('p', { limit: 10, window: 1 }, new Pace({ perSecond: 10 }), silent)
    ;(await pace.reserve('warm')).refund() // loads the script: one round trip from now on
    const pending = pace.reserve('c')
    // ioredis writes auto-pipelined commands from a setImmediate, queued before this one: once it
    // has run, the command is on its way (waiting for a tick only, as this test did, left it
    // unwritten until after the stall, and whether Redis answered before the verdict was a race).
    await new Promise(resolve => setImmediate(resolve))
    const until = performance.now() + 300
    while (performance.now() < until) { /* the loop stalls for six timeouts; Redis answers meanwhile */ }
    const reservation = await pending
    t.equal(store.unavailable, false)
    t.ok('run' in reservation, 'Redis granted it, not the fallback')
    reservation.refund()
  })

  t.test('refunded strangers leave no keys at all', async t => {
    // At 1/s a key a refund failed to delete would live a second: long enough to be seen.
    const { pace, store } = paceOf('strangers', 1)
    const reservations = await Promise.all(Array.from({ length: 500 }, (_, i) => pace.reserve(`random-${i}`)))
    for (const r of reservations) r.refund()
    await client.ping()
    t.same(await client.keys(`${store.prefix}*`), [])
  })
}
