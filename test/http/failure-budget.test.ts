import t from 'tap'
import fc from 'fast-check'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { PaceRouteOptions } from '../../lib/index.js'
import { secretPost } from '../helpers/token-endpoint.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Failure budgets (spend: 'rejected'): a unit is reserved before the handler like any other and
 * given back when the exchange is accepted, so only failed client authentications spend it. Keyed
 * by the declared client id and the source together, a guesser spends its own pair and the real
 * client, calling from its own address, never meets it. The clock is injected (`clock.t`, ms).
 */

const SECRETS = new Map([['victim', 'right-secret'], ['other', 'other-secret']])
const authenticate = secretPost(SECRETS)

const EXCHANGES: PaceRouteOptions = { perSecond: 5, key: 'client', spend: 'accepted' }
const FAILURES: PaceRouteOptions = { limit: 3, window: 600, key: ['client', 'source'], spend: 'rejected' }

const GUESSER = '203.0.113.9'
const CLIENT_HOME = '198.51.100.7'

interface Clock { t: number }

/** A token endpoint (client_secret_post) whose handler counts the credentials it checks. */
async function tokenApp (t: TapTest, paces: PaceRouteOptions[], checked = { n: 0 }): Promise<{ app: FastifyInstance, clock: Clock, checked: { n: number } }> {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: paces } }, async (request: FastifyRequest, reply: FastifyReply) => {
      checked.n++
      return await authenticate(request, reply)
    })
  })
  return { app, clock, checked }
}

function post (app: FastifyInstance, address: string, ...pairs: Array<[string, string]>) {
  return app.inject({ method: 'POST', url: '/token', remoteAddress: address, ...form(...pairs) })
}

const guess = (app: FastifyInstance, i: number, address = GUESSER) => post(app, address, ['client_id', 'victim'], ['client_secret', `guess-${i}`])
const real = (app: FastifyInstance, address = CLIENT_HOME) => post(app, address, ['client_id', 'victim'], ['client_secret', 'right-secret'])

async function statuses (requests: Array<() => Promise<{ statusCode: number }>>): Promise<number[]> {
  const result: number[] = []
  for (const request of requests) result.push((await request()).statusCode)
  return result
}

t.test('a guesser spends its own pair: after its budget it is refused before its credentials are checked, and the real client keeps its rate', async t => {
  const { app, checked } = await tokenApp(t, [EXCHANGES, FAILURES])
  t.same(await statuses(Array.from({ length: 6 }, (_, i) => () => guess(app, i))), [401, 401, 401, 429, 429, 429])
  t.equal(checked.n, 3, 'the refused guesses never reached the handler')
  const refused = await guess(app, 99)
  t.equal(refused.headers['retry-after'], '200', 'one failure comes back every 600/3 s')
  t.same(refused.json(), { error: 'temporarily_unavailable', error_description: 'Too many requests for this /token#client+source:rejected pace; retry after 200 seconds' })
  t.same(await statuses(Array.from({ length: 6 }, () => () => real(app))), [200, 200, 200, 200, 200, 429], 'the client\'s own rate, 5/s, whole')
  t.equal(checked.n, 8)
})

t.test('a rejected exchange keeps the failure and refunds the exchange; an accepted one does the opposite', async t => {
  const { app } = await tokenApp(t, [EXCHANGES, FAILURES])
  await guess(app, 0)
  t.equal(app.pace.get('/token#client')!.size, 0, 'the rejected exchange gave the victim\'s unit back')
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 1, 'and kept the guesser\'s failure')
  await real(app)
  t.equal(app.pace.get('/token#client')!.size, 1, 'the accepted exchange spent the victim\'s unit')
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 1, 'and gave its failure unit back: the real client\'s pair has no row')
})

t.test('a client that always authenticates never spends its failure budget, however many exchanges it makes', async t => {
  const { app, clock } = await tokenApp(t, [EXCHANGES, FAILURES])
  for (let second = 0; second < 20; second++) {
    clock.t = second * 1000
    t.same(await statuses(Array.from({ length: 5 }, () => () => real(app))), [200, 200, 200, 200, 200], `second ${second}`)
  }
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 0)
})

t.test('a refusal by either pace gives back what the other took, in either order', async t => {
  for (const paces of [[EXCHANGES, FAILURES], [FAILURES, EXCHANGES]]) {
    const order = paces[0] === EXCHANGES ? 'exchanges first' : 'failures first'
    const { app } = await tokenApp(t, paces.map(pace => ({ ...pace, perSecond: pace.perSecond === undefined ? undefined : 1 })) as PaceRouteOptions[])
    t.equal((await real(app)).statusCode, 200, order)
    t.equal((await real(app)).statusCode, 429, `${order}: the exchange pace (1/s) is spent`)
    t.equal(app.pace.get('/token#client+source:rejected')!.size, 0, `${order}: the failure unit the refused request took is back`)
    const { app: guessed } = await tokenApp(t, paces)
    for (let i = 0; i < 3; i++) await guess(guessed, i, CLIENT_HOME)
    t.equal((await real(guessed)).statusCode, 429, `${order}: the pair's budget is spent`)
    t.equal(guessed.pace.get('/token#client')!.size, 0, `${order}: the exchange unit the refused request took is back`)
  }
})

t.test('an outcome set by the error handler settles each pace by its own rule, once', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.setErrorHandler((error: Error & { statusCode?: number }, request, reply) => {
      if (error.statusCode === 401) request.pace.outcome = 'rejected'
      return reply.code(error.statusCode ?? 500).send({ error: error.message })
    })
    app.post('/token', { config: { pace: [EXCHANGES, FAILURES] } }, async request => {
      throw Object.assign(new Error(request.headers['x-fail'] as string), { statusCode: request.headers['x-fail'] === 'invalid_client' ? 401 : 500 })
    })
  })
  const send = (fail: string) => app.inject({ method: 'POST', url: '/token', remoteAddress: GUESSER, headers: { 'x-fail': fail, ...form(['client_id', 'victim']).headers }, payload: form(['client_id', 'victim']).payload })
  t.equal((await send('invalid_client')).statusCode, 401)
  t.equal(app.pace.get('/token#client')!.size, 0, 'rejected late: the exchange unit is refunded')
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 1, 'rejected late: the failure is kept')
  t.equal((await send('server_error')).statusCode, 500)
  t.equal(app.pace.get('/token#client')!.size, 1, 'an error that is no failure spends the exchange')
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 1, 'and refunds its failure unit: still only the first failure')
  const headers = (await send('invalid_client')).headers
  t.equal(headers.ratelimit, '"/token#client+source:rejected";r=1;t=400', 'two failures kept of three, whole again in two units of 200 s')
})

t.test('an answer that passes onSend twice settles its failures once, by the outcome of the first pass', async t => {
  let passes = 0
  const app = await build(t, { now: () => 0 }, app => {
    app.setErrorHandler((_error, request, reply) => {
      request.pace.outcome = 'accepted'
      return reply.code(500).send({ error: 'server_error' })
    })
    app.post('/token', {
      config: { pace: FAILURES },
      // The first answer's payload is no string: Fastify fails it after every onSend hook, and sends
      // the error handler's answer through them again.
      onSend: async (_request, _reply, payload) => ++passes === 1 ? { not: 'a string' } : payload
    }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  t.equal((await guess(app, 0)).statusCode, 500)
  t.equal(passes, 2)
  t.equal(app.pace.get('/token')!.size, 1, 'the failure went out rejected: kept, though the second pass says accepted')
})

t.test('a request that declares no client id takes nothing from a pair budget; a source budget still counts it', async t => {
  const perSource: PaceRouteOptions = { limit: 2, window: 86400, key: 'source', spend: 'rejected' }
  const { app } = await tokenApp(t, [EXCHANGES, FAILURES, perSource])
  t.same(await statuses([0, 1, 2].map(() => () => post(app, GUESSER, ['client_secret', 'x']))), [401, 401, 429])
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 0)
  t.equal(app.pace.get('/token#source:rejected')!.size, 1)
  const refused = await post(app, GUESSER, ['client_id', 'other'], ['client_secret', 'x'])
  t.equal(refused.headers['retry-after'], '43200', 'a day over two failures: one back every 12 hours')
  t.equal(refused.headers['ratelimit-policy'], '"/token#source:rejected";q=2;w=86400', 'a refusal shows the pace that refused')
  t.equal(refused.headers.ratelimit, '"/token#source:rejected";r=0;t=43200')
})

t.test('a pair is the id and the address: the same id from another address, or another id from the same one, has a budget of its own', async t => {
  const { app } = await tokenApp(t, [FAILURES])
  for (let i = 0; i < 3; i++) await guess(app, i)
  t.equal((await guess(app, 3)).statusCode, 429)
  t.equal((await guess(app, 4, '203.0.113.10')).statusCode, 401, 'another address')
  t.equal((await post(app, GUESSER, ['client_id', 'other'], ['client_secret', 'x'])).statusCode, 401, 'another client id')
  t.equal((await guess(app, 5, '[2001:db8:1:2::1]')).statusCode, 401)
  t.equal((await post(app, GUESSER, ['client_id', 'vic\u0001tim'])).statusCode, 400, 'a malformed id is a 400, as for a client pace')
})

t.test('IPv6 sources in one /64 share a pair budget', async t => {
  const { app } = await tokenApp(t, [FAILURES])
  t.same(await statuses(['2001:db8::1', '2001:db8::2', '2001:db8::3', '2001:db8::ffff'].map(address => () => guess(app, 0, address))), [401, 401, 401, 429])
})

t.test('a failure refills continuously over the window: one unit every window / limit', async t => {
  const { app, clock } = await tokenApp(t, [FAILURES])
  for (let i = 0; i < 3; i++) await guess(app, i)
  clock.t = 199_999
  const early = await guess(app, 3)
  t.equal(early.statusCode, 429)
  t.equal(early.headers['retry-after'], '1', 'the exact wait, rounded up: 1 ms')
  t.equal(early.headers.ratelimit, '"/token";r=0;t=1')
  clock.t = 200_000
  t.equal((await guess(app, 4)).statusCode, 401, 'one failure back after 200 s')
  t.equal((await guess(app, 5)).statusCode, 429)
  clock.t = 200_000 + 600_000
  t.same(await statuses([6, 7, 8, 9].map(i => () => guess(app, i))), [401, 401, 401, 429], 'a full window later: the whole limit, no more')
})

t.test('quota headers: a failure budget is the caller\'s own and shows on every answer, counting a unit the outcome refunds as back', async t => {
  const { app } = await tokenApp(t, [EXCHANGES, FAILURES])
  const failed = await guess(app, 0)
  t.equal(failed.statusCode, 401)
  t.equal(failed.headers['ratelimit-policy'], '"/token#client+source:rejected";q=3;w=600', 'on the 401: the pair budget only, not the named client\'s pace')
  t.equal(failed.headers.ratelimit, '"/token#client+source:rejected";r=2;t=200', 'whole again in one unit\'s time, not the window')
  const accepted = await real(app)
  t.equal(accepted.headers['ratelimit-policy'], '"/token#client";q=5;w=1, "/token#client+source:rejected";q=3;w=600')
  t.equal(accepted.headers.ratelimit, '"/token#client";r=4;t=1, "/token#client+source:rejected";r=3;t=0', 'the refunded failure unit counts as back: the pair\'s budget is whole')
})

t.test('the route says what a failure budget counts, per what, and over which window', async t => {
  const schemas = new Map<string, Record<string, any>>()
  await build(t, {}, app => {
    app.addHook('onRoute', route => { schemas.set(route.url, route.schema as Record<string, any>) })
    app.post('/token', { config: { pace: [EXCHANGES, FAILURES, { limit: 100, window: 86400, key: 'source', spend: 'rejected' }] } }, async () => 'ok')
    app.post('/hourly', { config: { pace: { limit: 7, window: 3600, key: 'client', spend: 'rejected' } } }, async () => 'ok')
    app.post('/odd', { config: { pace: [{ limit: 5, window: 90, key: 'source', spend: 'every' }, { limit: 3, window: 1.5, key: ['client', 'source'], spend: 'accepted' }, { limit: 4, window: 172800, key: 'client', spend: 'accepted' }] } }, async () => 'ok')
  })
  t.equal(schemas.get('/token')!.description, 'Paced by exchangepace: 5 requests per second per declared client id (rejected exchanges are refunded); ' +
    '3 failed client authentications per 10 minutes per declared client id and source address (accepted exchanges are refunded); ' +
    '100 failed client authentications per day per source address (accepted exchanges are refunded). Each rate is per replica: N replicas admit up to N times it.')
  t.same(schemas.get('/token')!['x-exchangepace'].paces[1], { name: '/token#client+source:rejected', perSecond: 0.005, limit: 3, window: 600, key: 'declared client id and source address', spend: 'rejected' })
  t.match(schemas.get('/hourly')!.description, /^Paced by exchangepace: 7 failed client authentications per hour per declared client id \(accepted exchanges are refunded\)\./)
  t.match(schemas.get('/odd')!.description, /^Paced by exchangepace: 5 requests per 90 seconds per source address \(every request counts\); 3 requests per 1\.5 seconds per declared client id and source address \(rejected exchanges are refunded\); 4 requests per 2 days per declared client id/)
})

t.test('fastify.pace lists failure budgets beside the other paces, with their buckets', async t => {
  const { app } = await tokenApp(t, [EXCHANGES, FAILURES])
  t.same(app.pace.names(), ['/token#client', '/token#client+source:rejected'])
  const budget = app.pace.get('/token#client+source:rejected')!
  t.same([budget.limit, budget.window, budget.perSecond], [3, 600, 0.005])
})

/**
 * A command of the property tests: start a request (a guess or the real client's exchange) that
 * waits in its handler, finish the oldest one still waiting (with the outcome its kind gives), or
 * move the clock.
 */
type Command =
  | { op: 'start', real: boolean }
  | { op: 'finish', index: number }
  | { op: 'advance', ms: number }

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('start' as const), real: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('finish' as const), index: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 200_000 }) }) }
)

interface Flight { real: boolean, at: number, release: () => void, done: Promise<number> }

/**
 * Runs `commands` against a token endpoint whose every request waits in its handler until the
 * test releases it (guesses fail, the real client's exchanges are accepted), then releases every
 * request still waiting; returns each request's reservation time, kind and status.
 */
async function run (t: TapTest, budget: PaceRouteOptions, commands: readonly Command[]): Promise<Array<{ real: boolean, at: number, status: number }>> {
  const clock = { t: 0 }
  const gates = new Map<string, { entered: () => void, released: Promise<void> }>()
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: budget } }, async (request, reply) => {
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
  const waiting: Flight[] = []
  const all: Flight[] = []
  const body = form(['client_id', 'victim'])
  for (const step of commands) {
    if (step.op === 'advance') clock.t += step.ms
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
      const done = app.inject({ method: 'POST', url: '/token', remoteAddress: GUESSER, headers: { ...body.headers, 'x-id': id, 'x-real': step.real ? 'yes' : 'no' }, payload: body.payload })
        .then(response => response.statusCode)
      const flight: Flight = { real: step.real, at: clock.t, release, done }
      all.push(flight)
      // The request is either in its handler (granted) or answered (refused) before the clock moves.
      if (await Promise.race([inHandler, done]) === -1) waiting.push(flight)
    }
  }
  for (const flight of waiting) flight.release()
  const result: Array<{ real: boolean, at: number, status: number }> = []
  for (const flight of all) result.push({ real: flight.real, at: flight.at, status: await flight.done })
  await app.close()
  return result
}

t.test('property: in any span of t seconds a failure budget keeps at most limit * (1 + t / window) failures, whatever runs beside them', async t => {
  const budget: PaceRouteOptions = { limit: 3, window: 600, key: 'client', spend: 'rejected' }
  await fc.assert(fc.asyncProperty(fc.array(command, { minLength: 1, maxLength: 40 }), async commands => {
    const failures = (await run(t, budget, commands)).filter(r => !r.real && r.status === 401).map(r => r.at)
    for (let i = 0; i < failures.length; i++) {
      for (let j = i; j < failures.length; j++) {
        const span = (failures[j] - failures[i]) / 1000
        if (j - i + 1 > 3 * (1 + span / 600) + 1e-9) throw new Error(`${j - i + 1} failures within ${span} s`)
      }
    }
  }), { numRuns: 60 })
  t.pass('no span held more failures than the bound')
})

t.test('property: an accepted exchange never consumes a failure budget: one after another, the guesses are decided as if it never came', async t => {
  const budget: PaceRouteOptions = { limit: 3, window: 600, key: 'client', spend: 'rejected' }
  const sequential = fc.array(fc.oneof(
    fc.record({ op: fc.constant('start' as const), real: fc.boolean() }),
    fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 200_000 }) })
  ), { minLength: 1, maxLength: 40 }).map(steps => steps.flatMap((step): Command[] => step.op === 'start' ? [step, { op: 'finish', index: 0 }] : [step]))
  await fc.assert(fc.asyncProperty(sequential, async commands => {
    const withReal = (await run(t, budget, commands)).filter(r => !r.real)
    const without = await run(t, budget, commands.filter(step => step.op !== 'start' || !step.real))
    if (JSON.stringify(withReal) !== JSON.stringify(without)) throw new Error(`guesses decided otherwise: ${JSON.stringify(withReal)} against ${JSON.stringify(without)}`)
    if (withReal.length > 0 && withReal.some(r => r.status !== 401 && r.status !== 429)) throw new Error('a guess was neither checked nor refused')
  }), { numRuns: 60 })
  t.pass('every guess decided the same with and without the accepted exchanges')
})

/** A token endpoint paced by `paces` whose handler waits at `gate` until the test opens it, counting the requests that reached it. */
async function gatedApp (t: TapTest, paces: PaceRouteOptions[], options: Record<string, unknown> = {}) {
  const clock = { t: 0 }
  let open: () => void = () => {}
  const gate = new Promise<void>(resolve => { open = resolve })
  const waiting = { n: 0, reached: (): void => {} }
  const app = await build(t, { now: () => clock.t, ...options }, app => {
    app.post('/token', { config: { pace: paces } }, async (request: FastifyRequest, reply: FastifyReply) => {
      waiting.n++
      waiting.reached()
      await gate
      return await authenticate(request, reply)
    })
  })
  /** Resolves once `n` requests wait in the handler. */
  const inHandler = (n: number) => new Promise<void>(resolve => {
    waiting.reached = () => { if (waiting.n === n) resolve() }
  })
  return { app, clock, open, inHandler }
}

t.test('a refusal that only units in flight cause says so and asks for a second; once they settle as successes the budget is whole', async t => {
  const events: Array<{ type: string, retryAfterMs: number }> = []
  const { app, open, inHandler } = await gatedApp(t, [FAILURES], { onEvent: (event: { type: string, retryAfterMs: number }) => events.push(event) })
  const reached = inHandler(3)
  const burst = Array.from({ length: 3 }, () => real(app).then(response => response))
  await reached
  const refused = await real(app)
  t.equal(refused.statusCode, 429, 'three in flight hold the budget of three')
  t.equal(refused.headers['retry-after'], '1')
  t.same(refused.json(), { error: 'temporarily_unavailable', error_description: 'Too many requests in flight for this /token pace; retry after 1 second' })
  t.match(events, [{ type: 'refused', retryAfterMs: 1000 }], 'the event tells the same wait')
  open()
  t.same((await Promise.all(burst)).map(response => response.statusCode), [200, 200, 200])
  t.equal((await real(app)).statusCode, 200, 'the units came back: the budget is whole')
  t.same(await statuses([0, 1, 2, 3].map(i => () => guess(app, i))), [401, 401, 401, 429])
  const spent = await guess(app, 9)
  t.equal(spent.headers['retry-after'], '200', 'a budget spent by settled failures tells its refill time')
  t.match(spent.json(), { error_description: 'Too many requests for this /token pace; retry after 200 seconds' })
})

t.test('a key blocked while a unit is in flight is told the block\'s time', async t => {
  const { app, open, inHandler } = await gatedApp(t, [FAILURES])
  const reached = inHandler(1)
  const flying = guess(app, 0).then(response => response)
  await reached
  await app.pace.block('/token', { client: 'victim', source: GUESSER }, 3600)
  const refused = await guess(app, 1)
  t.equal(refused.headers['retry-after'], '3600', 'a block is longer than any unit in flight could cover')
  t.match(refused.json(), { error_description: 'Too many requests for this /token pace; retry after 3600 seconds' })
  open()
  t.equal((await flying).statusCode, 401)
})

t.test('units never settled (hijacked replies) stay in flight for at most 10,000 keys; beyond, a refusal tells the refill time', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: [{ limit: 1, window: 600, key: ['client', 'source'], spend: 'rejected' }] } }, async (request: FastifyRequest, reply: FastifyReply) => {
      // Hijacked and closed before it is ended: never settled, so the unit stays spent, and
      // counted in flight (a hijacked reply the app ends is settled by its answer).
      reply.hijack()
      reply.raw.destroy()
    })
  })
  const closed = async (id: string): Promise<void> => {
    await post(app, GUESSER, ['client_id', id]).then(() => { throw new Error(`${id} was answered`) }, (err: NodeJS.ErrnoException) => { if (err.code !== 'LIGHT_ECONNRESET') throw err })
  }
  for (let i = 0; i < 10_000; i++) await closed(`hijacked-${i}`)
  t.match((await post(app, GUESSER, ['client_id', 'hijacked-0'])).json(), { error_description: 'Too many requests in flight for this /token pace; retry after 1 second' }, 'a counted key')
  await closed('one-more')
  t.match((await post(app, GUESSER, ['client_id', 'one-more'])).json(), { error_description: 'Too many requests for this /token pace; retry after 600 seconds' }, 'the 10,001st key was not counted')
})
