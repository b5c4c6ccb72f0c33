import t from 'tap'
import fc from 'fast-check'
import type { FastifyInstance } from 'fastify'
import { RedisStore, type PaceRouteOptions } from '../../lib/index.js'
import { redisPaceName } from '../../lib/redis/scripts.js'
import { ClockedClient, redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { secretPost } from '../helpers/token-endpoint.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

// Failure budgets (spend: 'rejected', a window of minutes) on a RedisStore, through Fastify: a
// guesser spends its own (client id, source) pair in Redis, the real client from its own address
// never meets it, and replicas sharing the store share the budget, so a guesser moving between
// them gets one budget, not one per replica. The first tests run on Redis's own clock (a unit of
// 10 per 600 s refills in 60 s: nothing refills while they run); the properties run the scripts
// on a clock of the test's (test/helpers/redis.ts, ClockedClient), so that minutes pass without
// waiting.

t.setTimeout(120_000)

const SECRETS = new Map([['victim', 'right-secret']])

const EXCHANGES: PaceRouteOptions = { perSecond: 3, key: 'client', spend: 'accepted' }
const FAILURES: PaceRouteOptions = { limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' }

const GUESSER = '203.0.113.9'
const CLIENT_HOME = '198.51.100.7'

/** The Redis key of the failure budget's pair (victim, `source`) under `prefix`. */
const failureKey = (prefix: string, source: string): string => `${prefix}${redisPaceName('/token#client+source:rejected')}:victim\u001f${source}`

/** A token endpoint (client_secret_post) paced by `paces`, on `store`. */
async function tokenApp (t: TapTest, paces: PaceRouteOptions[], options: Record<string, unknown>): Promise<FastifyInstance> {
  return await build(t, options, app => {
    app.post('/token', { config: { pace: paces } }, secretPost(SECRETS))
  })
}

/** One exchange for the client id 'victim' from `source`, with the right secret or a guess. */
async function exchange (app: FastifyInstance, source: string, right: boolean): Promise<{ status: number, retryAfter: unknown }> {
  const { payload, headers } = form(['grant_type', 'client_credentials'], ['client_id', 'victim'], ['client_secret', right ? 'right-secret' : 'guess'])
  const response = await app.inject({ method: 'POST', url: '/token', remoteAddress: source, headers, payload })
  return { status: response.statusCode, retryAfter: response.headers['retry-after'] }
}

/** Statuses of `count` guesses from `source`, one after another, each sent to the next of `apps` in turn. */
async function guesses (apps: FastifyInstance[], source: string, count: number): Promise<number[]> {
  const statuses: number[] = []
  for (let i = 0; i < count; i++) statuses.push((await exchange(apps[i % apps.length], source, false)).status)
  return statuses
}

const client = await redisOrSkip()
if (client !== null) {
  // test/helpers/shared-behaviour.ts runs the failure budget's own behaviours on a RedisStore too (test/redis/shared.test.ts).
  t.test('a guesser\'s pair lives in Redis until its bucket is full again, one window, and the real client\'s pair not at all', async t => {
    const prefix = uniquePrefix('guesser')
    const app = await tokenApp(t, [EXCHANGES, FAILURES], { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) })
    const key = failureKey(prefix, GUESSER)
    t.teardown(() => client.del(key))
    await guesses([app], GUESSER, 1)
    const one = await client.pttl(key)
    t.ok(one > 55_000 && one <= 60_000, `one failure refills in 60 s: PTTL ${one}`)
    t.same(await guesses([app], GUESSER, 10), [...Array(9).fill(401), 429])
    const ttl = await client.pttl(key)
    t.ok(ttl > 595_000 && ttl <= 600_000, `a spent budget is full again in one window: PTTL ${ttl}`)
    t.equal((await exchange(app, CLIENT_HOME, true)).status, 200)
    t.equal(await client.exists(failureKey(prefix, CLIENT_HOME)), 0, 'an accepted exchange leaves no key')
  })

  t.test('replicas sharing the store share the budget: a guesser moving between them gets one budget, not one per replica', async t => {
    const prefix = uniquePrefix('replicas')
    const store = new RedisStore({ client, prefix, timeoutMs: 1000 })
    const replicas = [await tokenApp(t, [EXCHANGES, FAILURES], { store }), await tokenApp(t, [EXCHANGES, FAILURES], { store })]
    t.teardown(() => client.del(failureKey(prefix, GUESSER)))
    t.same(await guesses(replicas, GUESSER, 14), [...Array(10).fill(401), ...Array(4).fill(429)], 'alternating replicas: ten failures in all')
    const inMemory = [await tokenApp(t, [EXCHANGES, FAILURES], {}), await tokenApp(t, [EXCHANGES, FAILURES], {})]
    t.same(await guesses(inMemory, GUESSER, 22), [...Array(20).fill(401), 429, 429], 'without a store, each replica has its own budget: twenty')
  })

  t.test('the route says a failure budget is shared by all replicas on a RedisStore, and per replica without one', async t => {
    const descriptions: string[] = []
    for (const options of [{ store: new RedisStore({ client, prefix: uniquePrefix('described') }) }, {}]) {
      await build(t, options, app => {
        app.addHook('onRoute', route => { descriptions.push((route.schema as { description: string }).description) })
        app.post('/token', { config: { pace: [EXCHANGES, FAILURES] } }, async () => 'token')
        app.post('/authorize', { config: { pace: { perSecond: 3, key: 'source', spend: 'every' } } }, async () => 'code')
      })
    }
    const budget = 'Paced by exchangepace: 3 requests per second per declared client id (rejected exchanges are refunded); 10 failed client authentications per 10 minutes per declared client id and source address (accepted exchanges are refunded). '
    t.same(descriptions, [
      `${budget}Each rate is shared by all replicas (Redis), failure budgets included; while the store is unavailable, it holds per replica (each replica paces in its own memory).`,
      'Paced by exchangepace: 3 requests per second per source address (every request counts). Each rate is shared by all replicas (Redis); while the store is unavailable, it holds per replica (each replica paces in its own memory).',
      `${budget}Each rate is per replica: N replicas admit up to N times it.`,
      'Paced by exchangepace: 3 requests per second per source address (every request counts). Each rate is per replica: N replicas admit up to N times it.'
    ])
  })

  /**
   * A command of the properties: start a request (a guess, or the real client's exchange) on one of
   * two replicas, which waits in its handler until it is finished; finish one still waiting (with
   * its kind's outcome); or move the clock by tenths of a unit.
   */
  type Command =
    | { op: 'start', real: boolean, replica: number }
    | { op: 'finish', index: number }
    | { op: 'advance', tenths: number }

  const start = fc.record({ op: fc.constant('start' as const), real: fc.boolean(), replica: fc.integer({ min: 0, max: 1 }) })
  const advance = fc.record({ op: fc.constant('advance' as const), tenths: fc.integer({ min: 0, max: 20 }) })
  const command: fc.Arbitrary<Command> = fc.oneof(
    { weight: 4, arbitrary: start },
    { weight: 3, arbitrary: fc.record({ op: fc.constant('finish' as const), index: fc.nat() }) },
    { weight: 2, arbitrary: advance }
  )
  /** Failure budgets of a few units, over ten minutes and over a day. */
  const budget = fc.constantFrom<PaceRouteOptions>(
    { limit: 3, window: 600, key: ['client', 'source'], spend: 'rejected' },
    { limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' },
    { limit: 4, window: 86_400, key: ['client', 'source'], spend: 'rejected' }
  )

  interface Flight { real: boolean, at: number, release: () => void, done: Promise<number> }

  /**
   * Runs `commands` against two replicas of a token endpoint paced by the failure budget `pace`
   * alone, sharing one RedisStore whose scripts read the test's clock (so do the replicas' memories,
   * through the plugin's `now`), every request waiting in its handler until the test finishes it
   * (guesses fail, the real client's exchanges are accepted); then finishes every request still
   * waiting, and returns each request's kind, reservation time (ms) and status.
   */
  async function run (t: TapTest, pace: PaceRouteOptions, commands: readonly Command[]): Promise<Array<{ real: boolean, at: number, status: number }>> {
    const clock = { ms: 0 }
    const prefix = uniquePrefix('property')
    const store = new RedisStore({ client: new ClockedClient(client!, () => 7_000_000_000_000 + clock.ms * 1000), prefix, timeoutMs: 1000 })
    const gates = new Map<string, { entered: () => void, released: Promise<void> }>()
    const replica = async (): Promise<FastifyInstance> => await build(t, { now: () => clock.ms, store }, app => {
      app.post('/token', { config: { pace } }, async (request, reply) => {
        const gate = gates.get(request.headers['x-id'] as string)!
        gate.entered()
        await gate.released
        if (request.headers['x-real'] !== 'yes') {
          request.pace.outcome = 'rejected'
          return reply.code(401).send({ error: 'invalid_client' })
        }
        return 'token'
      })
    })
    const replicas = [await replica(), await replica()]
    const tenth = (pace.window as number) * 100 / (pace.limit as number)
    const waiting: Flight[] = []
    const all: Flight[] = []
    const body = form(['client_id', 'victim'])
    for (const step of commands) {
      if (step.op === 'advance') clock.ms += step.tenths * tenth
      else if (step.op === 'finish') {
        if (waiting.length === 0) continue
        const [flight] = waiting.splice(step.index % waiting.length, 1)
        flight.release()
        await flight.done
      } else {
        const id = String(all.length)
        let release!: () => void
        let entered!: () => void
        const inHandler = new Promise<number>(resolve => { entered = () => resolve(-1) })
        gates.set(id, { entered, released: new Promise<void>(resolve => { release = resolve }) })
        const done = replicas[step.replica].inject({ method: 'POST', url: '/token', remoteAddress: GUESSER, headers: { ...body.headers, 'x-id': id, 'x-real': step.real ? 'yes' : 'no' }, payload: body.payload })
          .then(response => response.statusCode)
        const flight: Flight = { real: step.real, at: clock.ms, release, done }
        all.push(flight)
        // Granted (in its handler) or refused (answered) before the clock moves.
        if (await Promise.race([inHandler, done]) === -1) waiting.push(flight)
      }
    }
    for (const flight of waiting) flight.release()
    const result: Array<{ real: boolean, at: number, status: number }> = []
    for (const flight of all) result.push({ real: flight.real, at: flight.at, status: await flight.done })
    await Promise.all(replicas.map(async app => await app.close()))
    const keys = await client!.keys(`${prefix}*`)
    if (keys.length > 0) await client!.del(...keys)
    return result
  }

  t.test('property: in any span of t seconds a failure budget on Redis keeps at most limit * (1 + t / window) failures over both replicas, whatever runs beside them', async t => {
    // The most any span held over its bound, over every run: at most 0, and 0 once some run spent a whole budget at once.
    let closest = -Infinity
    await t.resolves(fc.assert(fc.asyncProperty(budget, fc.array(command, { minLength: 20, maxLength: 60 }), async (pace, commands) => {
      const { limit, window } = pace as { limit: number, window: number }
      const failures = (await run(t, pace, commands)).filter(r => !r.real && r.status === 401).map(r => r.at)
      for (let i = 0; i < failures.length; i++) {
        for (let j = i; j < failures.length; j++) {
          const span = (failures[j] - failures[i]) / 1000
          const over = j - i + 1 - limit * (1 + span / window)
          if (over > 1e-9) throw new Error(`${j - i + 1} failures within ${span} s at ${limit} per ${window} s`)
          closest = Math.max(closest, over)
        }
      }
    }), { seed: 0xfa11, numRuns: 30 }))
    t.ok(Math.abs(closest) < 1e-9, `some span held exactly its bound (the closest came within ${closest})`)
  })

  t.test('property: on Redis an accepted exchange never consumes a failure budget: one after another, the guesses are decided as if it never came', async t => {
    const sequential = fc.array(fc.oneof({ weight: 4, arbitrary: start }, { weight: 1, arbitrary: advance }), { minLength: 10, maxLength: 40 })
      .map(steps => steps.flatMap((step): Command[] => step.op === 'start' ? [step, { op: 'finish', index: 0 }] : [step]))
    let refused = 0
    await t.resolves(fc.assert(fc.asyncProperty(budget, sequential, async (pace, commands) => {
      const withReal = (await run(t, pace, commands)).filter(r => !r.real)
      const without = await run(t, pace, commands.filter(step => step.op !== 'start' || !step.real))
      refused += withReal.filter(r => r.status === 429).length
      if (JSON.stringify(withReal) !== JSON.stringify(without)) throw new Error(`guesses decided otherwise: ${JSON.stringify(withReal)} against ${JSON.stringify(without)}`)
      if (withReal.some(r => r.status !== 401 && r.status !== 429)) throw new Error('a guess was neither checked nor refused')
    }), { seed: 0xfa11, numRuns: 30 }))
    t.ok(refused > 0, `some guesses found the budget empty (${refused})`)
  })
}
