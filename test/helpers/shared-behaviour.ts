import type tap from 'tap'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify'
import formbody from '@fastify/formbody'
import { exchangePace } from '../../lib/index.js'

/**
 * The plugin's behaviours that hold whatever the store and whatever its clock, as long as the clock
 * does not move by a noticeable fraction of a second during one test: they must hold for the
 * in-memory default (test/http/plugin-shared.test.ts) and for a store whose clock is not ours
 * (Redis TIME). Behaviours that need time to pass live in the feature files, on an injected clock.
 * The rates are low (3/s at most where a test counts grants or rows) so that on Redis's clock no
 * unit refills while a test runs, even on a busy machine: one unit takes a third of a second or
 * more.
 *
 * Not a test file itself (tap runs test/**\/*.test.ts only): a runner calls `sharedBehaviour`.
 */

/** The type of `t` inside a tap test. */
export type TapTest = Parameters<Parameters<typeof tap.test>[0]>[0]

/** Live rows of the pace `name`: what the store holds for it. */
export type RowCount = (app: FastifyInstance, name: string) => number | Promise<number>

/** The in-memory registry's row count. A store that keeps rows elsewhere passes its own. */
export const memoryRows: RowCount = (app, name) => app.pace.get(name)?.size ?? 0

/**
 * A Fastify instance with @fastify/formbody and exchangepace registered with `options`, the routes
 * `routes` adds, ready, and closed when `t` ends.
 */
export async function build (
  t: TapTest,
  options: Record<string, unknown>,
  routes: (app: FastifyInstance) => void,
  server: FastifyServerOptions = {}
): Promise<FastifyInstance> {
  const app = Fastify(server)
  t.teardown(() => app.close())
  await app.register(formbody)
  await app.register(exchangePace, options)
  routes(app)
  await app.ready()
  return app
}

/** An HTTP Basic Authorization header for `id:secret`, form-encoded first as RFC 6749 2.3.1 asks. */
export function basic (id: string, secret: string): string {
  const encode = (text: string): string => encodeURIComponent(text).replace(/%20/g, '+')
  return `Basic ${Buffer.from(`${encode(id)}:${encode(secret)}`).toString('base64')}`
}

/** A form body (application/x-www-form-urlencoded) with the pairs in order; a key may repeat. */
export function form (...pairs: Array<[string, string]>): { payload: string, headers: Record<string, string> } {
  return {
    payload: new URLSearchParams(pairs).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' }
  }
}

/** Resolves on the next turn of the event loop: makes a handler truly asynchronous. */
export function tick (): Promise<void> {
  return new Promise(resolve => setImmediate(resolve))
}

/** The registered clients of the example token endpoints: id -> secret. */
const CLIENTS = new Map([['victim', 'right-secret'], ['other', 'other-secret']])

/**
 * A token endpoint in the shape the plugin is meant for: client_secret_post, asynchronous client
 * authentication, `outcome = 'rejected'` and a 401 when it fails.
 */
async function tokenHandler (request: FastifyRequest, reply: FastifyReply): Promise<object> {
  const body = request.body as Record<string, string>
  await tick()
  if (CLIENTS.get(body.client_id) !== body.client_secret) {
    request.pace.outcome = 'rejected'
    return reply.code(401).send({ error: 'invalid_client' })
  }
  return { access_token: 'token', token_type: 'Bearer' }
}

const tokenRoute = (perSecond: number) => (app: FastifyInstance): void => {
  app.post('/token', { config: { pace: { perSecond, key: 'client', spend: 'accepted' } } }, tokenHandler)
}

async function postToken (app: FastifyInstance, id: string, secret: string): Promise<number> {
  const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', id], ['client_secret', secret]) })
  return response.statusCode
}

/** How many of `statuses` equal `status`. */
function count (statuses: readonly number[], status: number): number {
  return statuses.filter(s => s === status).length
}

/**
 * Runs the store-independent behaviours as subtests of `t`. `paceOptions` returns the extra plugin
 * options to register with (`{}` for the defaults, `{ store }` for another store); it is called once
 * per Fastify instance. `rows` counts the rows a pace keeps (default: the in-memory registry's).
 * `randomIds` is how many random ids the flood of refunded strangers names (default 5000; a
 * runner whose every request crosses more than one connection, as on a cluster, names fewer).
 */
export function sharedBehaviour (t: TapTest, paceOptions: () => Record<string, unknown>, rows: RowCount = memoryRows, randomIds = 5000): void {
  t.test('a concurrent burst of 100 against a rate of 3 with an async handler admits 3, and no more than refilled while it ran', async t => {
    const options = paceOptions()
    const app = await build(t, options, tokenRoute(3))
    const started = performance.now()
    const statuses = await Promise.all(Array.from({ length: 100 }, () => postToken(app, 'victim', 'right-secret')))
    // A store on Redis's clock refills while a slow machine runs the burst; an injected clock does not.
    const refilled = 'now' in options ? 0 : Math.floor((performance.now() - started) / 1000 * 3)
    const granted = count(statuses, 200)
    t.ok(granted >= 3 && granted <= 3 + refilled, `${granted} admitted: 3, plus at most the ${refilled} units refilled during the burst`)
    t.equal(count(statuses, 429), 100 - granted, 'the rest refused')
  })

  t.test('a concurrent burst across two keys admits each key its own rate', async t => {
    const app = await build(t, paceOptions(), tokenRoute(2))
    const statuses = await Promise.all(Array.from({ length: 40 }, (_, i) =>
      i % 2 === 0 ? postToken(app, 'victim', 'right-secret') : postToken(app, 'other', 'other-secret')))
    t.equal(count(statuses, 200), 4)
    t.equal(count(statuses, 429), 36)
  })

  t.test('200 strangers naming the victim with a wrong secret leave it its full pace and no rows', async t => {
    const app = await build(t, paceOptions(), tokenRoute(3))
    // One after another: a stranger holds the victim's unit only while it is being checked, so 200
    // strangers at the same instant would briefly hold all three (the pace is a ceiling on work in flight too).
    const strangers: number[] = []
    for (let i = 0; i < 200; i++) strangers.push(await postToken(app, 'victim', `guess-${i}`))
    t.equal(count(strangers, 401), 200, 'every stranger reaches client authentication and fails it')
    t.equal(await rows(app, '/token'), 0, 'refunded reservations leave no row')
    const victim: number[] = []
    for (let i = 0; i < 4; i++) victim.push(await postToken(app, 'victim', 'right-secret'))
    t.same(victim, [200, 200, 200, 429], 'the victim still spends its whole second')
  })

  t.test(`${randomIds} refunded random ids leave 0 rows`, async t => {
    // At 1/s a key that a refund failed to delete would live a second: long enough to be counted.
    const app = await build(t, paceOptions(), tokenRoute(1))
    let rejected = 0
    for (let batch = 0; batch < randomIds / 500; batch++) {
      const statuses = await Promise.all(Array.from({ length: 500 }, (_, i) =>
        postToken(app, `random-${batch}-${i}-${Math.random().toString(36).slice(2)}`, 'nope')))
      rejected += count(statuses, 401)
    }
    t.equal(rejected, randomIds)
    t.equal(await rows(app, '/token'), 0)
  })

  t.test('spend accepted: rejected exchanges are refunded, accepted ones are kept', async t => {
    const app = await build(t, paceOptions(), tokenRoute(2))
    const statuses: number[] = []
    for (const secret of ['wrong', 'right-secret', 'wrong', 'right-secret', 'wrong', 'right-secret']) {
      statuses.push(await postToken(app, 'victim', secret))
    }
    t.same(statuses, [401, 200, 401, 200, 429, 429], 'only the two accepted exchanges spent; then even a wrong secret finds no unit')
    t.equal(await rows(app, '/token'), 1)
  })

  t.test('spend every: a rejected outcome is never refunded', async t => {
    const app = await build(t, paceOptions(), app => {
      app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async (request, reply) => {
        request.pace.outcome = 'rejected'
        return reply.code(400).send({ error: 'invalid_request' })
      })
    })
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await app.inject('/authorize')).statusCode)
    t.same(statuses, [400, 400, 429])
    t.equal(await rows(app, '/authorize'), 1)
  })

  t.test('a source pace spent on every request spends even when the body fails validation', async t => {
    const app = await build(t, paceOptions(), app => {
      app.post('/authorize', {
        config: { pace: { perSecond: 2, key: 'source', spend: 'every' } },
        schema: { body: { type: 'object', required: ['response_type'], properties: { response_type: { type: 'string' } } } }
      }, async () => ({ ok: true }))
    })
    const bad = form(['client_id', 'x'])
    const statuses: number[] = []
    statuses.push((await app.inject({ method: 'POST', url: '/authorize', ...bad })).statusCode)
    statuses.push((await app.inject({ method: 'POST', url: '/authorize', ...bad })).statusCode)
    statuses.push((await app.inject({ method: 'POST', url: '/authorize', ...form(['response_type', 'code']) })).statusCode)
    t.same(statuses, [400, 400, 429])
  })

  t.test('when a later pace of the same hook denies, the earlier ones are refunded', async t => {
    const app = await build(t, paceOptions(), app => {
      app.post('/token', {
        config: {
          pace: [
            { name: 'per-client', perSecond: 2, key: 'client', spend: 'accepted' },
            { name: 'per-tenant', perSecond: 1, key: (request) => request.headers['x-tenant'] as string | undefined, spend: 'accepted' }
          ]
        }
      }, tokenHandler)
    })
    const post = async (tenant: string): Promise<number> => (await app.inject({
      method: 'POST',
      url: '/token',
      payload: form(['client_id', 'victim'], ['client_secret', 'right-secret']).payload,
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-tenant': tenant }
    })).statusCode
    t.equal(await post('t0'), 200)
    t.equal(await post('t0'), 429, 'the tenant pace denies after the client pace granted')
    t.same([await post('t1'), await post('t2')], [200, 429], 'the denied request gave its client unit back: t1 had it')
    t.equal(await rows(app, 'per-client'), 1)
    t.equal(await rows(app, 'per-tenant'), 2, 't0 and t1 spent; t2 was stopped by the client pace before reaching it')
  })

  t.test('a handler that throws keeps the unit spent, unless it flagged the exchange rejected', async t => {
    const app = await build(t, paceOptions(), app => {
      app.post('/token', { config: { pace: { perSecond: 2, key: 'client', spend: 'accepted' } } }, async (request) => {
        await tick()
        if ((request.body as Record<string, string>).reject === 'yes') request.pace.outcome = 'rejected'
        throw new Error('database down')
      })
    })
    const post = async (reject: string): Promise<number> =>
      (await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'victim'], ['reject', reject]) })).statusCode
    t.same([await post('yes'), await post('yes'), await post('yes')], [500, 500, 500], 'rejected throws are refunded')
    t.equal(await rows(app, '/token'), 0)
    t.same([await post('no'), await post('no'), await post('no')], [500, 500, 429], 'accepted throws spend')
  })

  t.test('a request declaring no client id reserves nothing and still has request.pace', async t => {
    const app = await build(t, paceOptions(), app => {
      app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, async (request) => {
        return { held: request.pace.held.length, outcome: request.pace.outcome }
      })
    })
    for (let i = 0; i < 3; i++) {
      const response = await app.inject({ method: 'POST', url: '/token', ...form(['grant_type', 'client_credentials']) })
      t.equal(response.statusCode, 200)
      t.same(response.json(), { held: 0, outcome: 'accepted' })
    }
    t.equal(await rows(app, '/token'), 0)
  })

  t.test('a malformed declared identity is a 400 that stores nothing', async t => {
    const app = await build(t, paceOptions(), tokenRoute(10))
    const cases: Array<[string | undefined, Array<[string, string]>]> = [
      [basic('victim', 's'), [['client_id', 'other']]],
      [undefined, [['client_id', 'victim'], ['client_id', 'victim']]],
      [undefined, [['client_id', 'x'.repeat(256)]]],
      ['Basic !!!!', [['grant_type', 'client_credentials']]]
    ]
    for (const [authorization, pairs] of cases) {
      const { payload, headers } = form(...pairs)
      const response = await app.inject({ method: 'POST', url: '/token', payload, headers: authorization === undefined ? headers : { ...headers, authorization } })
      t.equal(response.statusCode, 400)
      t.equal(response.json().error, 'invalid_request')
    }
    t.equal(await rows(app, '/token'), 0)
  })

  t.test('a source pace keeps one row per address; a client pace one per declared id', async t => {
    const app = await build(t, paceOptions(), app => {
      app.post('/token', {
        config: {
          pace: [
            // Slow enough that no row refills while the test runs: a Redis key goes when its bucket is
            // full again, which at 100/s was 10 ms after its request (a busy machine failed the count).
            { perSecond: 3, key: 'client', spend: 'accepted' },
            { perSecond: 3, key: 'source', spend: 'every' }
          ]
        }
      }, tokenHandler)
    })
    for (const address of ['10.0.0.1', '10.0.0.2', '10.0.0.2']) {
      await app.inject({ method: 'POST', url: '/token', remoteAddress: address, ...form(['client_id', 'victim'], ['client_secret', 'right-secret']) })
    }
    t.equal(await rows(app, '/token#source'), 2)
    t.equal(await rows(app, '/token#client'), 1)
  })

  /**
   * The token endpoint the issue recommends, less its per-source ceiling: exchanges per declared
   * client, spent on accepted ones, and a failure budget of 10 per 600 s per (client id, source),
   * spent on rejected ones. Named without ':' so that a store's rows are found by the name.
   */
  const budgetRoute = (app: FastifyInstance): void => {
    app.post('/token', {
      config: {
        pace: [
          { name: 'token', perSecond: 3, key: 'client', spend: 'accepted' },
          { name: 'token-failures', limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' }
        ]
      }
    }, tokenHandler)
  }
  const exchangeFrom = async (app: FastifyInstance, address: string, secret: string): Promise<{ status: number, retryAfter: unknown }> => {
    const response = await app.inject({ method: 'POST', url: '/token', remoteAddress: address, ...form(['client_id', 'victim'], ['client_secret', secret]) })
    return { status: response.statusCode, retryAfter: response.headers['retry-after'] }
  }

  t.test('a failure budget keyed by client and source: a guesser spends its own pair, the client from its own address keeps its pace', async t => {
    const app = await build(t, paceOptions(), budgetRoute)
    const guesses: number[] = []
    for (let i = 0; i < 10; i++) guesses.push((await exchangeFrom(app, '203.0.113.9', 'guess')).status)
    t.same(guesses, Array(10).fill(401), 'ten failed authentications are checked')
    t.same(await exchangeFrom(app, '203.0.113.9', 'guess'), { status: 429, retryAfter: '60' }, 'the eleventh is refused before the check, until one failure refills (60 s)')
    t.equal(await rows(app, 'token-failures'), 1, 'one row: the guesser\'s pair')
    t.equal(await rows(app, 'token'), 0, 'the guesses were refunded from the client\'s pace')
    const own = await Promise.all([1, 2, 3].map(async () => await exchangeFrom(app, '198.51.100.7', 'right-secret')))
    t.same(own.map(r => r.status), [200, 200, 200], 'the client from its own address gets its whole second')
    t.equal(await rows(app, 'token-failures'), 1, 'and its pair keeps no row: accepted exchanges give their failure units back')
  })

  t.test('accepted exchanges never consume the failure budget of their pair', async t => {
    const app = await build(t, paceOptions(), budgetRoute)
    t.same([(await exchangeFrom(app, '198.51.100.7', 'right-secret')).status, (await exchangeFrom(app, '198.51.100.7', 'right-secret')).status], [200, 200])
    t.equal(await rows(app, 'token-failures'), 0)
    // The client's pace keeps one unit of its 3: each rejected exchange takes it and gives it back.
    const statuses: number[] = []
    for (let i = 0; i < 11; i++) statuses.push((await exchangeFrom(app, '198.51.100.7', 'wrong')).status)
    t.same(statuses, [...Array(10).fill(401), 429], 'the pair still has all ten failures')
  })
}
