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
  /** The keys reserved, so that a test can make Redis lose their rows. */
  readonly keys = new Set<string>()
  readonly #grants = new Map<number, Reservation>()
  #grantCount = 0

  constructor (readonly shared: Pace) {}

  defineCommand (): void {}

  exchangepaceReserveBuffer (key: string): Promise<Buffer> {
    if (this.down) return Promise.reject(new Error('ECONNREFUSED'))
    this.keys.add(key)
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

t.test('a failure budget through outages and lost rows: at most a budget per outage of each replica and one per life of its row', async t => {
  // Guesses (every one rejected: nothing is refunded) through two replicas, each on a connection
  // of its own that fails or answers, while Redis may lose the guesser's row. A replica's memory
  // grants alone only while its Redis does not answer, from the room its memory has; after an
  // outage, a row Redis lost (or that an operator reset) is a fresh budget, and the memory follows
  // Redis's grant, so a later outage of that replica finds room there again.
  type Step = { kind: 'guess', replica: number } | { kind: 'down', replica: number, down: boolean } | { kind: 'lose' } | { kind: 'advance', ms: number }
  const step: fc.Arbitrary<Step> = fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('guess' as const), replica: fc.integer({ min: 0, max: 1 }) }) },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('down' as const), replica: fc.integer({ min: 0, max: 1 }), down: fc.boolean() }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('lose' as const) }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 400 }) }) }
  )
  let widest = 0
  await t.resolves(fc.assert(fc.asyncProperty(fc.integer({ min: 1, max: 5 }), fc.array(step, { minLength: 20, maxLength: 150 }), async (limit, steps) => {
    let now = 0
    const clock = (): number => now
    const budget = { limit, window: 3600 }
    const shared = new Pace({ ...budget, now: clock })
    let outages = 0
    const counting = { ...quiet, warn () { outages++ } } as unknown as FastifyBaseLogger
    const connections = [new SimulatedRedis(shared), new SimulatedRedis(shared)]
    // retryMs this small: every request tries Redis, so each outage and return takes effect at once.
    const replicas = connections.map(client => new RedisStore({ client, retryMs: 1e-9 }).pace('/token#pair:rejected', budget, new Pace({ ...budget, now: clock }), counting))
    let lives = 1
    let granted = 0
    for (const s of steps) {
      if (s.kind === 'advance') now += s.ms
      else if (s.kind === 'down') connections[s.replica].down = s.down
      else if (s.kind === 'lose') {
        for (const key of connections.flatMap(c => [...c.keys])) if (shared.reset(key)) lives++
      } else if ((await replicas[s.replica].reserve('guesser')).granted) granted++
    }
    widest = Math.max(widest, granted / limit)
    return granted <= (outages + lives) * limit
  }), { numRuns: 300, seed: 7 }), 'no run grants more')
  t.ok(widest > 2, `a run granted ${widest} budgets: more than one per replica`)
})

t.test('a second outage of a replica whose memory followed Redis past a lost row: more than a budget per replica and one more', async t => {
  let now = 0
  const clock = (): number => now
  const budget = { limit: 5, window: 3600 }
  const shared = new Pace({ ...budget, now: clock })
  let outages = 0
  const counting = { ...quiet, warn () { outages++ } } as unknown as FastifyBaseLogger
  const [first, second] = [new SimulatedRedis(shared), new SimulatedRedis(shared)]
  const [one, two] = [first, second].map(client => new RedisStore({ client, retryMs: 1e-9 }).pace('/token#pair:rejected', budget, new Pace({ ...budget, now: clock }), counting))
  let granted = 0
  const guess = async (replica: typeof one, times: number): Promise<void> => {
    for (let i = 0; i < times; i++) {
      now += 10
      if ((await replica.reserve('guesser')).granted) granted++
    }
  }
  await guess(two, 10)
  first.down = true
  await guess(one, 10)
  t.equal(granted, 10, 'the second replica through Redis, the first in memory alone while out: a budget each')
  for (const key of second.keys) shared.reset(key)
  first.down = false
  await guess(one, 1)
  await guess(two, 10)
  t.equal(granted, 15, 'Redis lost the row: one more budget, and the memories followed its grants')
  first.down = true
  await guess(one, 10)
  t.equal(granted, 19, 'the first replica out again: its memory, which followed one grant, has room for four')
  t.equal(outages, 2, 'two outages, both of the first replica')
  t.ok(granted <= (outages + 2) * budget.limit, 'within a budget per outage and one per life of the row')
})
