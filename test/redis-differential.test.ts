import t from 'tap'
import fc from 'fast-check'
import { Pace } from '../lib/pace.js'
import { defineClocked } from './helpers/clocked-scripts.js'
import { redisOrSkip, uniquePrefix } from './helpers/redis.js'

// The Lua scripts against the in-process Pace over long random histories: the same decisions, the
// same units remaining, the same waits, refunds included. Redis' clock cannot be moved, so here the
// scripts read a clock the test passes as their last argument (in microseconds) instead of TIME,
// and expiries are made long (the history runs faster or slower than the time it simulates; other
// tests check that a key expires when its bucket is full again).

type Operation =
  | { op: 'advance', units: number }
  | { op: 'reserve', key: number }
  | { op: 'refund', back: number }

const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), units: fc.integer({ min: 0, max: 20 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.integer({ min: 0, max: 1 }) }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), back: fc.nat({ max: 60 }) }) }
)

/** Integer rates (the scripts count fractional ones to a microtick, Pace in doubles: not bit for bit). */
const rate = fc.constantFrom(1, 3, 7, 10, 40, 64, 100)

const client = await redisOrSkip()
if (client !== null) {
  const commands = defineClocked(client)
  const prefix = uniquePrefix('differential')
  let runs = 0

  /**
   * Replays `operations` on a Pace and on the scripts from `startMicros` on Redis' clock, and throws
   * at the first answer that differs. Time advances by whole microseconds (about a tenth of a unit
   * each), so both read the same instant: Pace in milliseconds, the scripts in microseconds. A refund picks the `back`th
   * latest granted reservation (both sides hold it), if it was not refunded yet.
   */
  async function replay (perSecond: number, startMicros: number, operations: Operation[]): Promise<void> {
    const clock = { micros: 0 }
    const pace = new Pace({ perSecond, now: () => clock.micros / 1000 })
    const key = (k: number): string => `${prefix}${runs}:${k}`
    runs++
    const made: Array<{ key: number, pace: ReturnType<Pace['reserve']>, grant: [number, number, number], refunded: boolean }> = []
    for (const [step, operation] of operations.entries()) {
      const micros = (): number => startMicros + clock.micros
      const where = `rate ${perSecond}, step ${step}, t = ${clock.micros} µs`
      if (operation.op === 'advance') {
        clock.micros += operation.units * Math.floor(100_000 / perSecond)
      } else if (operation.op === 'reserve') {
        const reply = await commands.clockedReserveBuffer(key(operation.key), perSecond, micros())
        const local = pace.reserve(`k${operation.key}`)
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
        await commands.clockedRefund(key(chosen.key), perSecond, ...chosen.grant, micros())
      }
    }
    await commands.del(key(0), key(1))
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
    const reply = await commands.clockedReserveBuffer(key, perSecond, micros)
    t.equal(reply.length, 8, 'refused: the bucket is empty')
    t.same(await client.getBuffer(key), row, 'and the row is left as it was: its run goes on')
    await client.del(key)
  })

  t.test('the scripts and Pace answer alike over random histories, refunds in any order', async t => {
    await t.resolves(fc.assert(
      fc.asyncProperty(rate, fc.array(operation, { minLength: 100, maxLength: 500 }), (perSecond, operations) => replay(perSecond, 7_000_000_000, operations)),
      { seed: 0xd1ff, numRuns: 40 }
    ))
  })

  t.test('they answer alike in runs longer than the 32 grants whose refunds a row remembers', async t => {
    const longRun: fc.Arbitrary<Operation> = fc.oneof(
      { weight: 1, arbitrary: fc.record({ op: fc.constant('advance' as const), units: fc.integer({ min: 0, max: 3 }) }) },
      { weight: 5, arbitrary: fc.record({ op: fc.constant('reserve' as const), key: fc.constant(0) }) },
      { weight: 4, arbitrary: fc.record({ op: fc.constant('refund' as const), back: fc.nat({ max: 45 }) }) }
    )
    await t.resolves(fc.assert(
      fc.asyncProperty(fc.constantFrom(64, 100), fc.array(longRun, { minLength: 300, maxLength: 600 }), (perSecond, operations) => replay(perSecond, 7_000_000_000, operations)),
      { seed: 0xd1ff, numRuns: 30 }
    ))
  })

  t.test('they still answer alike across the wrap of the scripts\' clock (2^32 microseconds)', async t => {
    await t.resolves(fc.assert(
      fc.asyncProperty(rate, fc.array(operation, { minLength: 100, maxLength: 500 }), (perSecond, operations) => replay(perSecond, 2 ** 32 - 500_000, operations)),
      { seed: 0xd1ff, numRuns: 20 }
    ))
  })
}
