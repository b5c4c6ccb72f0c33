import t from 'tap'
import fc from 'fast-check'
import Fastify, { type FastifyInstance } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import exchangePace, { RedisStore } from '../../lib/index.js'
import { defineClocked } from '../helpers/clocked-scripts.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

// A redeploy that changes a pace's rate (the same name, a new perSecond) on a shared store: the
// keys the old rate wrote are read by the new one as the same moments (how far from full in time),
// so from the first request at the new rate no key grants more than the new rate allows, and the
// new rate holds in full once its bucket has had a second.

/** A unit kept (granted, not given back), when it was granted and at which rate. */
interface Kept { at: number, rate: number }

/**
 * The most, over every window of `kept` (ascending times in ms), by which the units there exceed
 * what a bucket of one second allows in it, in seconds: each unit weighs the share of a second its
 * rate gives it (1 / rate), and a window of w seconds allows 1 + w. At one rate this is the bucket's
 * bound, perSecond x (1 + w) units; across a rate change it says the old units count against the
 * new bucket for the time they took, so that the old rate's keys grant nothing beyond the new rate.
 */
function excess (kept: readonly Kept[]): number {
  let worst = -Infinity
  for (let first = 0; first < kept.length; first++) {
    let weight = 0
    for (let last = first; last < kept.length; last++) {
      weight += 1 / kept[last].rate
      worst = Math.max(worst, weight - 1 - (kept[last].at - kept[first].at) / 1000)
    }
  }
  return worst
}

type Step =
  | { op: 'advance', ms: number }
  | { op: 'reserve', by: 'old' | 'new' }
  | { op: 'refund', back: number }

/** Steps of a redeploy; `by` says which replicas take a reserve during the rolling part, and is ignored before and after it. */
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 400 }) }) },
  { weight: 5, arbitrary: fc.record({ op: fc.constant('reserve' as const), by: fc.constantFrom('old' as const, 'new' as const) }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('refund' as const), back: fc.nat({ max: 20 }) }) }
)

const client = await redisOrSkip()
if (client !== null) {
  const commands = defineClocked(client)
  const prefix = uniquePrefix('redeploy')
  let runs = 0

  t.test('on the scripts\' own clock: across a redeploy that changes the rate, old replicas draining and late refunds included, no window holds more than a second of the bucket', async t => {
    const rates = fc.constantFrom(1, 2, 3, 5, 10)
    // Old replicas alone, then old and new together (the rolling deploy), then new replicas alone.
    const history = fc.tuple(rates, rates, fc.array(step, { maxLength: 30 }), fc.array(step, { maxLength: 30 }), fc.array(step, { minLength: 1, maxLength: 30 }))
      .filter(([before, after]) => before !== after)
    await t.resolves(fc.assert(fc.asyncProperty(history, async ([before, after, old, rolling, deployed]) => {
      const key = `${prefix}${runs++}`
      let ms = 0
      const micros = (): number => 7_000_000_000 + ms * 1000
      const grants: Array<Kept & { grant: [number, number, number], refunded: boolean }> = []
      const play = async (steps: Step[], phase: 'old' | 'rolling' | 'new'): Promise<void> => {
        for (const s of steps) {
          if (s.op === 'advance') ms += s.ms
          else if (s.op === 'reserve') {
            const rate = (phase === 'rolling' ? s.by : phase) === 'old' ? before : after
            const reply = await commands.clockedReserveBuffer(key, rate, 1000, micros())
            if (reply.length === 40) grants.push({ at: ms, rate, grant: [reply.readDoubleLE(8), reply.readDoubleLE(16), reply.readDoubleLE(24)], refunded: false })
          } else if (grants.length > 0) {
            // Refunded by the replica that granted it, at its rate: an old one's may come after the deploy.
            const chosen = grants[grants.length - 1 - (s.back % grants.length)]
            if (chosen.refunded) continue
            chosen.refunded = await commands.clockedRefund(key, chosen.rate, ...chosen.grant, 1000, micros()) === 1
          }
        }
      }
      await play(old, 'old')
      await play(rolling, 'rolling')
      await play(deployed, 'new')
      // Half a microtick of rounding where one rate reads the other's row: a millionth of a unit.
      if (excess(grants.filter(g => !g.refunded)) > 1e-6) return false
      // A second later the bucket is full at the new rate: it grants floor(after) at once, no more.
      ms += 1000
      let granted = 0
      for (let i = 0; i < after + 2; i++) {
        if ((await commands.clockedReserveBuffer(key, after, 1000, micros())).length === 40) granted++
      }
      await client.del(key)
      return granted === Math.floor(after)
    }), { seed: 0x7ede, numRuns: 80 }), 'every window holds at most 1 + w seconds of units, each weighed at its rate')
  })

  /** A replica's authorization endpoint at `perSecond` per source, on `store`. */
  async function replica (t: TapTest, store: RedisStore, perSecond: number): Promise<FastifyInstance> {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(exchangePace, { store })
    app.get('/authorize', { config: { pace: { perSecond, key: 'source', spend: 'every' } } }, async () => 'ok')
    await app.ready()
    return app
  }

  /** How many of `count` requests sent at once `app` grants, and how long they took. */
  async function burst (app: FastifyInstance, count: number): Promise<{ granted: number, ms: number }> {
    const started = performance.now()
    const statuses = await Promise.all(Array.from({ length: count }, () => app.inject('/authorize')))
    return { granted: statuses.filter(response => response.statusCode === 200).length, ms: performance.now() - started }
  }

  // A new process (a store of its own), or an app reloaded in the same process on the same store.
  for (const [before, after, how] of [[10, 2, 'a new replica'], [2, 10, 'an app reloaded on the same store']] as const) {
    t.test(`through the plugin on Redis's clock, ${how}: from ${before}/s to ${after}/s, no more than ${after}/s from its first request, and ${after} at once a second later`, async t => {
      const storePrefix = uniquePrefix(`redeploy-${before}-${after}`)
      const store = (): RedisStore => new RedisStore({ client: client!, prefix: storePrefix, timeoutMs: 1000 })
      const shared = store()
      const old = await replica(t, shared, before)
      const started = performance.now()
      const spent = await burst(old, before + 5)
      t.ok(spent.granted >= before && spent.granted <= before + Math.floor(before * spent.ms / 1000), `the old replica spends the whole second of its rate: ${spent.granted}`)
      await old.close()
      const deployed = await replica(t, how === 'a new replica' ? store() : shared, after)
      const immediate = await burst(deployed, after + 5)
      // The old key says the bucket is full a second after the old burst: at the new rate as at the
      // old one, the bucket is empty then, and refills at the new rate.
      const bound = Math.floor(after * (performance.now() - started) / 1000)
      t.ok(immediate.granted <= bound, `${immediate.granted} granted at once, at most the ${bound} that ${after}/s refilled since the old burst`)
      await sleep(1100)
      const full = await burst(deployed, after + 5)
      const refilled = Math.floor(after * full.ms / 1000)
      t.ok(full.granted >= after && full.granted <= after + refilled, `a second later, ${full.granted} of a burst: the new rate's ${after}${refilled > 0 ? ` (and ${refilled} refilled during the burst)` : ''}`)
    })
  }
}
