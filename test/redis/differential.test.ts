import t from 'tap'
import fc from 'fast-check'
import type { Redis } from 'ioredis'
import { Pace } from '../../lib/bucket/pace.js'
import { SCRIPTS } from '../../lib/redis/scripts.js'
import { onTestClock, redisOrSkip, uniquePrefix } from '../helpers/redis.js'

// The Lua scripts against the in-process Pace over long random histories: the same decisions, the
// same units remaining, the same waits, refunds included, for one-second paces and for windows
// from a quarter of a second to a year. Redis' clock cannot be moved, so here the scripts read a
// clock the test passes as their last argument (in microseconds) instead of TIME, and expiries are
// made long (the history runs faster or slower than the time it simulates; other tests check that
// a key expires when its bucket is full again). No test waits: a day-long window's history passes
// in the time its round trips take.

interface ClockedCommands {
  /** The reserve script's reply as it came: 8 bytes (refused: the wait) or 32 (granted: left, run, number, time), doubles. */
  clockedReserveBuffer (key: string, rate: number, windowMs: number, micros: number): Promise<Buffer>
  clockedRefund (key: string, rate: number, run: number, count: number, at: number, windowMs: number, micros: number): Promise<number>
}

type Operation =
  | { op: 'advance', units: number }
  | { op: 'reserve', key: number }
  | { op: 'refund', back: number }

const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), units: fc.integer({ min: 0, max: 20 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), back: fc.nat({ max: 60 }) }) }
)

/** A pace's bucket: `limit` units refilled over `window` seconds (1: a `perSecond` pace). */
interface Bucket { limit: number, window: number }

/** Integer rates (the scripts count fractional ones to a microtick, Pace in doubles: not bit for bit). */
const perSecond: fc.Arbitrary<Bucket> = fc.constantFrom(1, 3, 7, 10, 40, 64, 100).map(limit => ({ limit, window: 1 }))

/** Windows other than one second: a fraction of a second to the longest a route may declare (a year), integer limits. */
const windowed: fc.Arbitrary<Bucket> = fc.record({
  limit: fc.constantFrom(1, 3, 10, 64),
  window: fc.constantFrom(0.25, 1.5, 2, 600, 86_400, 7 * 86_400, 365 * 86_400)
})

/** The window argument the store passes the scripts: the one-second window for perSecond paces, else the window in ms. */
const windowMs = ({ window }: Bucket): number => window * 1000

/** The scripts' cycle, in the microseconds of TIME: 2^32 µs for one-second paces, 2^36 ms for the others. */
const cycleMicros = ({ window }: Bucket): number => window === 1 ? 2 ** 32 : 2 ** 36 * 1000

/** The scripts' reading of TIME `micros` in microticks: µs x limit (one second), whole ms x limit (other windows), modulo the cycle. */
const microticks = ({ limit, window }: Bucket, micros: number): number => window === 1
  ? (micros % 2 ** 32) * limit
  : (Math.floor(micros / 1000) % 2 ** 36) * limit

const client = await redisOrSkip()
if (client !== null) {
  client.defineCommand('clockedReserve', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.reserve) })
  client.defineCommand('clockedRefund', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.refund) })
  const commands = client as Redis & ClockedCommands
  const prefix = uniquePrefix('differential')
  let runs = 0

  /**
   * Deletes the keys among `keys` whose bucket is full by TIME `to` (µs) if it was not at `from`,
   * as their expiry on Redis's clock would: on the test's clock, which runs faster than Redis's
   * for long windows, a row the scripts wrote would otherwise outlive its bucket by more than half
   * the cycle, and read as ahead again, which on Redis it never does (it expires when full).
   */
  async function expire (bucket: Bucket, keys: string[], from: number, to: number): Promise<void> {
    const wrap = cycleMicros(bucket) / (bucket.window === 1 ? 1 : 1000) * bucket.limit
    const elapsed = bucket.window === 1 ? (to - from) * bucket.limit : (Math.floor(to / 1000) - Math.floor(from / 1000)) * bucket.limit
    const rows = await Promise.all(keys.map(async key => await client.getBuffer(key)))
    for (const [i, row] of rows.entries()) {
      if (row === null) continue
      const spent = ((row.readDoubleLE(1) - microticks(bucket, from)) % wrap + wrap) % wrap
      if (spent > wrap / 2 || spent <= elapsed) await client.del(keys[i])
    }
  }

  /**
   * Replays `operations` on a Pace and on the scripts from `startMicros` on Redis' clock, and throws
   * at the first answer that differs. Time advances by about a tenth of a unit at a time, in whole
   * microseconds for a one-second pace and whole milliseconds for another window (the scripts read
   * TIME in milliseconds there), so both read the same instant: Pace in milliseconds, the scripts in
   * microseconds. A refund picks the `back`th latest granted reservation (both sides hold it), if it
   * was not refunded yet.
   */
  async function replay (bucket: Bucket, startMicros: number, operations: Operation[], seen?: Set<string>): Promise<void> {
    const { limit, window } = bucket
    const clock = { micros: 0 }
    const now = (): number => clock.micros / 1000
    const pace = window === 1 ? new Pace({ perSecond: limit, now }) : new Pace({ limit, window, now })
    const tenth = window === 1 ? Math.floor(100_000 / limit) : 1000 * Math.floor(100 * window / limit)
    const key = (k: number): string => `${prefix}${runs}:${k}`
    runs++
    const made: Array<{ key: number, pace: ReturnType<Pace['reserve']>, grant: [number, number, number], refunded: boolean }> = []
    for (const [step, operation] of operations.entries()) {
      const micros = (): number => startMicros + clock.micros
      const where = `limit ${limit} per ${window} s, step ${step}, t = ${clock.micros} µs`
      if (operation.op === 'advance') {
        const from = micros()
        clock.micros += operation.units * tenth
        await expire(bucket, [key(0), key(1)], from, micros())
      } else if (operation.op === 'reserve') {
        const reply = await commands.clockedReserveBuffer(key(operation.key), limit, windowMs(bucket), micros())
        const local = pace.reserve(`k${operation.key}`)
        seen?.add(`${window} ${local.granted ? 'granted' : 'refused'}`)
        if (reply.length === 8) {
          const wait = reply.readDoubleLE(0)
          if (local.granted || Math.abs(wait - local.retryAfterMs) > 1e-6) {
            throw new Error(`${where}: scripts refused, wait ${wait} ms; Pace granted ${local.granted}, wait ${local.retryAfterMs} ms`)
          }
        } else {
          const lua = [0, 8, 16, 24].map(offset => reply.readDoubleLE(offset))
          if (!local.granted || lua[0] !== local.remaining) {
            throw new Error(`${where}: scripts granted ${JSON.stringify(lua)}, Pace granted ${local.granted} with ${local.remaining} left`)
          }
          made.push({ key: operation.key, pace: local, grant: [lua[1], lua[2], lua[3]], refunded: false })
        }
      } else if (made.length > 0) {
        const chosen = made[made.length - 1 - (operation.back % made.length)]
        if (chosen.refunded) continue
        chosen.refunded = true
        chosen.pace.refund()
        await commands.clockedRefund(key(chosen.key), limit, ...chosen.grant, windowMs(bucket), micros())
      }
    }
    await client.del(key(0), key(1))
  }

  t.test('at a fractional rate, a row a grant left up to half a microtick past one bucket ahead is no clock step back', async t => {
    const perSecond = 2.5
    const micros = 7_000_000_123
    const now = (micros % 2 ** 32) * perSecond
    const key = `${prefix}fraction`
    // What a grant at this very moment can write: the bucket empty, rounded up to the microtick.
    const row = Buffer.alloc(45)
    row.writeUInt8(2, 0)
    row.writeDoubleLE(now + 1_000_000 * perSecond + 0.4, 1) // full
    row.writeDoubleLE(now - 2_000_000, 9) // run
    row.writeDoubleLE(3, 17) // count
    row.writeDoubleLE(now, 25) // last
    row.writeUInt32LE(0, 33) // marks
    row.writeDoubleLE(perSecond, 37) // rate
    await client.set(key, row, 'PX', 60_000)
    const reply = await commands.clockedReserveBuffer(key, perSecond, 1000, micros)
    t.equal(reply.length, 8, 'refused: the bucket is empty')
    t.same(await client.getBuffer(key), row, 'and the row is left as it was: its run goes on')
    await client.del(key)
  })

  t.test('the scripts and Pace answer alike over random histories, refunds in any order', async t => {
    await t.resolves(fc.assert(
      fc.asyncProperty(perSecond, fc.array(operation, { minLength: 100, maxLength: 500 }), (bucket, operations) => replay(bucket, 7_000_000_000, operations)),
      { seed: 0xd1ff, numRuns: 40 }
    ))
  })

  t.test('they answer alike for windows other than one second, day-long and year-long ones included', async t => {
    const seen = new Set<string>()
    await t.resolves(fc.assert(
      fc.asyncProperty(windowed, fc.array(operation, { minLength: 100, maxLength: 400 }), (bucket, operations) => replay(bucket, 7_000_000_000_000, operations, seen)),
      { seed: 0xd1ff, numRuns: 40 }
    ))
    t.ok(seen.has('86400 granted') && seen.has('86400 refused') && seen.has('31536000 granted') && seen.has('31536000 refused'), 'day-long and year-long windows were both granted and refused')
  })

  t.test('they answer alike in runs longer than the 32 grants whose refunds a row remembers', async t => {
    const longRun: fc.Arbitrary<Operation> = fc.oneof(
      { weight: 1, arbitrary: fc.record({ op: fc.constant('advance' as const), units: fc.integer({ min: 0, max: 3 }) }) },
      { weight: 5, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.constant(0) }) },
      { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), back: fc.nat({ max: 45 }) }) }
    )
    const deep = fc.constantFrom<Bucket>({ limit: 64, window: 1 }, { limit: 100, window: 1 }, { limit: 64, window: 86_400 })
    await t.resolves(fc.assert(
      fc.asyncProperty(deep, fc.array(longRun, { minLength: 300, maxLength: 600 }), (bucket, operations) => replay(bucket, 7_000_000_000_000, operations)),
      { seed: 0xd1ff, numRuns: 30 }
    ))
  })

  t.test('they still answer alike across the wrap of the scripts\' clock (2^32 microseconds; 2^36 milliseconds for other windows)', async t => {
    await t.resolves(fc.assert(
      fc.asyncProperty(fc.oneof(perSecond, windowed), fc.array(operation, { minLength: 100, maxLength: 400 }), (bucket, operations) => {
        // Half a bucket before the wrap, so that rows are written on both sides of it.
        return replay(bucket, cycleMicros(bucket) - bucket.window * 500_000, operations)
      }),
      { seed: 0xd1ff, numRuns: 30 }
    ))
  })
}
