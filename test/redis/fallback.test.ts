import t from 'tap'
import fc from 'fast-check'
import type { FastifyBaseLogger } from 'fastify'
import { Pace, RedisStore, type PaceReservation, type Reservation, type RedisClientLike } from '../../lib/index.js'

// The rate holds per replica through any sequence of outages and returns: every unit a replica
// kept (granted, not refunded), whichever store granted it, fits the bucket's bound of
// perSecond x (1 + w) in every window of w seconds. Redis is simulated by a Pace on the same
// clock, which the store's scripts mirror (test/redis/differential.test.ts holds them to it).

/** A client whose reserve and refund run on `shared`, or fail while `down`. */
class SimulatedRedis implements RedisClientLike {
  down = false
  readonly #grants = new Map<number, Reservation>()
  #grantCount = 0

  constructor (readonly shared: Pace) {}

  defineCommand (): void {}

  exchangepaceReserveBuffer (key: string): Promise<Buffer> {
    if (this.down) return Promise.reject(new Error('ECONNREFUSED'))
    const reservation = this.shared.reserve(key)
    if (!reservation.granted) {
      const refusal = Buffer.alloc(8)
      refusal.writeDoubleLE(reservation.retryAfterMs)
      return Promise.resolve(refusal)
    }
    const id = ++this.#grantCount
    this.#grants.set(id, reservation)
    const grant = Buffer.alloc(40)
    grant.writeDoubleLE(reservation.remaining, 0)
    grant.writeDoubleLE(id, 8)
    return Promise.resolve(grant)
  }

  exchangepaceRefund (_key: string, _perSecond: number, id: number): Promise<number> {
    if (this.down) return Promise.reject(new Error('ECONNREFUSED'))
    this.#grants.get(id)?.refund()
    return Promise.resolve(1)
  }
}

const quiet = { warn () {}, info () {}, debug () {} } as unknown as FastifyBaseLogger

type Operation =
  | { kind: 'advance', ms: number }
  | { kind: 'outage', down: boolean }
  | { kind: 'request', key: string, refund: boolean }

const operation: fc.Arbitrary<Operation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 400 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('outage' as const), down: fc.boolean() }) },
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('request' as const), key: fc.constantFrom('a', 'b'), refund: fc.boolean() }) }
)

/** The most units in any window of `kept` (ascending times in ms) over what a bucket of `perSecond` allows there. */
function excess (kept: number[], perSecond: number): number {
  let worst = -Infinity
  for (let first = 0; first < kept.length; first++) {
    for (let last = first; last < kept.length; last++) {
      worst = Math.max(worst, last - first + 1 - perSecond * (1 + (kept[last] - kept[first]) / 1000))
    }
  }
  return worst
}

t.test('through outages and returns, the units a replica keeps never exceed perSecond x (1 + w) in any window of w seconds', async t => {
  await t.resolves(fc.assert(fc.asyncProperty(fc.integer({ min: 1, max: 5 }), fc.array(operation, { minLength: 20, maxLength: 120 }), async (perSecond, operations) => {
    let now = 0
    const clock = (): number => now
    const redis = new SimulatedRedis(new Pace({ perSecond, now: clock }))
    // retryMs this small: every request tries Redis, so each outage and return takes effect at once.
    const store = new RedisStore({ client: redis, retryMs: 1e-9 })
    const pace = store.pace('/token', { limit: perSecond, window: 1 }, new Pace({ perSecond, now: clock }), quiet)
    const kept = new Map<string, number[]>([['a', []], ['b', []]])
    for (const step of operations) {
      if (step.kind === 'advance') now += step.ms
      else if (step.kind === 'outage') redis.down = step.down
      else {
        const reservation: PaceReservation = await pace.reserve(step.key)
        if (!reservation.granted) continue
        if (step.refund) reservation.refund()
        else kept.get(step.key)!.push(now)
      }
    }
    for (const times of kept.values()) {
      if (excess(times, perSecond) > 1e-9) return false
    }
    return true
  }), { numRuns: 300 }), 'no window of any run holds more than the bound')
})

t.test('while Redis answers, one replica on the store decides every request as one in-process Pace would', async t => {
  const request = fc.record({ key: fc.constantFrom('a', 'b'), refund: fc.boolean(), ms: fc.integer({ min: 0, max: 300 }) })
  await t.resolves(fc.assert(fc.asyncProperty(fc.integer({ min: 1, max: 5 }), fc.array(request, { minLength: 20, maxLength: 120 }), async (perSecond, requests) => {
    let now = 0
    const clock = (): number => now
    const store = new RedisStore({ client: new SimulatedRedis(new Pace({ perSecond, now: clock })) })
    const pace = store.pace('/token', { limit: perSecond, window: 1 }, new Pace({ perSecond, now: clock }), quiet)
    const reference = new Pace({ perSecond, now: clock })
    for (const step of requests) {
      now += step.ms
      const decided = await pace.reserve(step.key)
      const expected = reference.reserve(step.key)
      if (decided.granted !== expected.granted || decided.remaining !== expected.remaining || decided.retryAfterMs !== expected.retryAfterMs) return false
      if (step.refund) {
        decided.refund()
        expected.refund()
      }
    }
    return true
  }), { numRuns: 200 }), 'the same grants, units left and waits')
})

t.test('replicas sharing Redis keep at most perSecond x (1 + w) in any window of w seconds in total', async t => {
  const request = fc.record({ replica: fc.integer({ min: 0, max: 2 }), refund: fc.boolean(), ms: fc.integer({ min: 0, max: 300 }) })
  await t.resolves(fc.assert(fc.asyncProperty(fc.integer({ min: 1, max: 5 }), fc.array(request, { minLength: 20, maxLength: 120 }), async (perSecond, requests) => {
    let now = 0
    const clock = (): number => now
    const redis = new SimulatedRedis(new Pace({ perSecond, now: clock }))
    const replicas = [0, 1, 2].map(() => new RedisStore({ client: redis }).pace('/token', { limit: perSecond, window: 1 }, new Pace({ perSecond, now: clock }), quiet))
    const kept: number[] = []
    for (const step of requests) {
      now += step.ms
      const reservation = await replicas[step.replica].reserve('a')
      if (!reservation.granted) continue
      if (step.refund) reservation.refund()
      else kept.push(now)
    }
    return excess(kept, perSecond) <= 1e-9
  }), { numRuns: 200 }), 'the shared bucket decides')
})
