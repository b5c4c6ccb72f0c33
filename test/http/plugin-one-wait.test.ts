import t from 'tap'
import fc from 'fast-check'
import { createHook } from 'node:async_hooks'
import type { FastifyInstance, RouteOptions } from 'fastify'
import type { Pace, PaceBucket, PaceEvent, PaceReservation, PaceRouteOptions, PaceStore } from '../../lib/index.js'
import { basic, build, form, tick } from '../helpers/shared-behaviour.js'

/**
 * On a shared store a request waits for the store once: every pace of its route is asked at once
 * (the source pace spent on every request as the request arrives, the others in preHandler), and
 * the preHandler resolves them together, all or nothing, with the refusal the in-memory path would
 * give. The stores here decide from the replica's own pace when asked, as Redis decides when its
 * script runs, and answer when the test (or a schedule) says. The clock stands still.
 */

/** The README's recommended token route: a failure budget per pair, an exchange pace per client, a ceiling per source. */
const README_TOKEN: PaceRouteOptions[] = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 5, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' }
]

/** A reservation the store has decided and not yet answered. */
interface Held {
  readonly name: string
  readonly key: string
  readonly reservation: PaceReservation
  answer (): void
}

/** A store that decides in the replica's own pace when asked and answers only when the test calls `answer`. */
function heldStore (): { store: PaceStore, asked: Held[] } {
  const asked: Held[] = []
  const store: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (name: string, _rate: PaceBucket, local: Pace) => ({
      reserve: (key: string) => new Promise(resolve => {
        const reservation = local.reserve(key)
        asked.push({ name, key, reservation, answer: () => resolve(reservation) })
      })
    })
  }
  return { store, asked }
}

/** Turns of the event loop until `done` holds (at most 50). */
async function until (done: () => boolean): Promise<void> {
  for (let i = 0; i < 50 && !done(); i++) await tick()
}

const token = (app: FastifyInstance, client: string, secret: string, address = '192.0.2.1') => app.inject({
  method: 'POST',
  url: '/token',
  remoteAddress: address,
  ...form(['client_id', client], ['client_secret', secret])
})

/** The README's token handler: a wrong secret is rejected. */
const tokenRoute = (app: FastifyInstance): void => {
  app.post('/token', { config: { pace: README_TOKEN } }, async (request, reply) => {
    const body = request.body as Record<string, string>
    if (body.client_secret !== 'right') {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token' }
  })
}

t.test('the README\'s token route asks the store for its three paces before any answer, and is answered when the last comes', async t => {
  const { store, asked } = heldStore()
  const app = await build(t, { now: () => 0, store }, tokenRoute)
  let answered = false
  const response = token(app, 'c1', 'right').then(r => { answered = true; return r })
  await until(() => asked.length === 3)
  t.same(asked.map(unit => unit.name), ['/token#source', '/token#client+source:rejected', '/token#client'],
    'the source pace asked in onRequest, the other two in preHandler, none answered yet')
  asked[2].answer()
  asked[0].answer()
  await until(() => answered)
  t.equal(answered, false, 'two answers of three: the request waits')
  asked[1].answer()
  const done = await response
  t.equal(done.statusCode, 200)
  const memory = await build(t, { now: () => 0 }, tokenRoute)
  const expected = await token(memory, 'c1', 'right')
  t.same([done.headers['ratelimit-policy'], done.headers.ratelimit], [expected.headers['ratelimit-policy'], expected.headers.ratelimit],
    'the items in the route\'s order, whatever order the store answered in')
})

t.test('the refusal answered is the first in the route\'s order, the others\' units go back, and the answer is the in-memory one', async t => {
  const events: PaceEvent[] = []
  const { store, asked } = heldStore()
  const shared = await build(t, { now: () => 0, store, onEvent: (event: PaceEvent) => { events.push(event) } }, app => {
    app.post('/token', { config: { pace: [{ name: 'first', perSecond: 1, key: 'client', spend: 'accepted' }, { name: 'second', perSecond: 1, key: 'client', spend: 'accepted' }] } }, async () => ({ ok: true }))
  })
  const memory = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: [{ name: 'first', perSecond: 1, key: 'client', spend: 'accepted' }, { name: 'second', perSecond: 1, key: 'client', spend: 'accepted' }] } }, async () => ({ ok: true }))
  })
  // 'second' is spent for c1 only: first grants, second refuses.
  shared.pace.get('second')!.reserve('c1')
  memory.pace.get('second')!.reserve('c1')
  const post = (app: FastifyInstance) => app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'c1']) })
  const pending = post(shared)
  await until(() => asked.length === 2)
  asked[1].answer() // the refusal first
  asked[0].answer()
  const refused = await pending
  const expected = await post(memory)
  t.equal(refused.statusCode, 429)
  t.same([refused.headers['retry-after'], refused.headers.ratelimit, refused.headers['cache-control']], [expected.headers['retry-after'], expected.headers.ratelimit, expected.headers['cache-control']])
  t.same(refused.json(), expected.json(), 'the body names the pace that refused: second')
  t.equal(shared.pace.get('first')!.size, 0, 'first\'s unit went back')
  t.same(events.map(e => [e.type, e.name, e.outcome]), [['refunded', 'first', null], ['refused', 'second', null]], 'the events of the in-memory path, in its order')

  // Both refuse: the first in the route's order answers, whichever came first.
  shared.pace.get('first')!.reserve('c1')
  const both = post(shared)
  await until(() => asked.length === 4)
  asked[3].answer()
  asked[2].answer()
  t.match((await both).json(), { error_description: /first pace/ })
  t.same(shared.pace.counts('first'), { granted: 1, refused: 1, refunded: 1, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 }, 'one refusal counted, the one answered')
  t.same(shared.pace.counts('second'), { granted: 0, refused: 1, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
})

t.test('a source pace that refuses in onRequest is answered from preHandler with the in-memory 429, the later paces\' units given back', async t => {
  const { store, asked } = heldStore()
  const app = await build(t, { now: () => 0, store }, tokenRoute)
  app.pace.get('/token#source')!.reserve('192.0.2.1')
  for (let i = 0; i < 49; i++) app.pace.get('/token#source')!.reserve('192.0.2.1')
  const pending = token(app, 'c1', 'right')
  await until(() => asked.length === 3)
  for (const unit of asked) unit.answer()
  const refused = await pending
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers.ratelimit, '"/token#source";r=0;t=1')
  t.equal(app.pace.get('/token#client')!.size, 0, 'the client pace\'s unit went back')
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 0, 'and the failure budget\'s')
})

t.test('a request answered before its preHandler (a validation error) keeps its source unit, and shows it when the store answered first', async t => {
  const { store, asked } = heldStore()
  let letThrough: (() => void) | null = null
  const app = await build(t, { now: () => 0, store }, app => {
    app.post('/authorize', {
      config: { pace: [{ perSecond: 5, key: 'source', spend: 'every' }, { perSecond: 5, key: 'client', spend: 'accepted' }] },
      schema: { body: { type: 'object', required: ['response_type'] } },
      // Holds the request before validation until the test has decided whether the store answered.
      preValidation: (_request, _reply, done) => { letThrough = done }
    }, async () => ({ ok: true }))
  })
  const invalid = () => app.inject({ method: 'POST', url: '/authorize', ...form(['client_id', 'c1']) })
  const early = invalid()
  await until(() => letThrough !== null)
  asked[0].answer()
  await tick()
  letThrough!()
  letThrough = null
  const first = await early
  t.equal(first.statusCode, 400, 'the validation error answers')
  t.equal(first.headers.ratelimit, '"/authorize#source";r=4;t=1', 'the source unit, in before the answer, is shown')

  const late = invalid()
  await until(() => letThrough !== null)
  t.equal(asked.length, 2)
  letThrough!()
  const second = await late
  t.equal(second.statusCode, 400)
  t.equal(second.headers.ratelimit, undefined, 'the store had not answered: nothing to show')
  asked[1].answer()
  await tick()
  t.same(app.pace.counts('/authorize#source'), { granted: 2, refused: 0, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 }, 'the late unit is held and counted, never refunded')
  t.equal(app.pace.get('/authorize#source')!.size, 1, 'one row: the source\'s two units')
  t.equal(asked.length, 2, 'the client pace was never asked')
})

t.test('a malformed key in preHandler is a 400 before the store is asked for the late paces; the source unit stays spent', async t => {
  const { store, asked } = heldStore()
  const app = await build(t, { now: () => 0, store }, tokenRoute)
  const pending = app.inject({ method: 'POST', url: '/token', remoteAddress: '192.0.2.1', ...form(['client_id', 'a'], ['client_id', 'b']) })
  await until(() => asked.length === 1)
  const response = await pending
  t.equal(response.statusCode, 400)
  t.equal(asked.length, 1, 'only the source pace was asked')
  asked[0].answer()
  await tick()
  t.same(app.pace.counts('/token#source').granted, 1)
  t.same(app.pace.counts('/token#client+source:rejected').invalid, 1, 'the first late pace found the key malformed')
})

t.test('a store that fails for one pace fails the request with 500; the units of the same hook go back, an earlier hook\'s stay', async t => {
  const failing: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (name: string, _rate: PaceBucket, local: Pace) => ({
      reserve: async (key: string) => {
        await tick()
        if (name === '/token#client') throw new Error('store down')
        return local.reserve(key)
      }
    })
  }
  const app = await build(t, { now: () => 0, store: failing }, tokenRoute)
  const response = await token(app, 'c1', 'right')
  t.equal(response.statusCode, 500)
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 0, 'the failure budget\'s unit, taken in the same hook, went back')
  t.equal(app.pace.get('/token#source')!.size, 1, 'the source unit, taken in onRequest, stays: every request spends it')
})

/**
 * Wraps the plugin's reserving hooks of every route added after it, counting the Promises made
 * while one runs, up to its call of `next` (what comes after is Fastify's, and the handler's).
 */
function countPromises (app: FastifyInstance): { made: () => number } {
  let made = 0
  let inside = false
  const hook = createHook({ init (_id, type) { if (inside && type === 'PROMISE') made++ } })
  type Hook = (request: unknown, reply: unknown, next: (err?: Error) => void) => void
  const wrap = (handler: Hook): Hook => (request, reply, next) => {
    hook.enable()
    inside = true
    try {
      handler(request, reply, err => {
        inside = false
        next(err)
      })
    } finally {
      inside = false
      hook.disable()
    }
  }
  app.addHook('onRoute', (routeOptions: RouteOptions) => {
    const onRequest = routeOptions.onRequest as unknown as Hook[]
    const preHandler = routeOptions.preHandler as unknown as Hook[]
    onRequest[0] = wrap(onRequest[0])
    preHandler[0] = wrap(preHandler[0])
  })
  return { made: () => made }
}

t.test('in this replica\'s memory the reserving hooks make no Promise; on a shared store they do', async t => {
  for (const shared of [false, true]) {
    const held = heldStore()
    let counter: { made: () => number } = { made: () => -1 }
    const app = await build(t, { now: () => 0, store: shared ? held.store : undefined }, app => {
      counter = countPromises(app)
      app.post('/token', { config: { pace: README_TOKEN } }, async () => ({ ok: true }))
    })
    const response = token(app, 'c1', 'right')
    if (shared) {
      await until(() => held.asked.length === 3)
      for (const unit of held.asked) unit.answer()
    }
    t.equal((await response).statusCode, 200)
    if (shared) t.ok(counter.made() >= 3, `on a shared store: ${counter.made()} Promises, at least one per pace`)
    else t.equal(counter.made(), 0, 'in memory: none')
  }
})

/** A store that decides when asked and answers after a number of turns the schedule gives, so answers come in any order. */
function scheduledStore (delays: readonly number[]): PaceStore {
  let calls = 0
  return {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (_name: string, _rate: PaceBucket, local: Pace) => ({
      reserve: async (key: string) => {
        const reservation = local.reserve(key)
        const turns = delays[calls++ % delays.length]
        for (let i = 0; i < turns; i++) await tick()
        return reservation
      }
    })
  }
}

t.test('property: any sequence of token requests gets the same answers on a shared store, answering in any order, as in memory', async t => {
  const request = fc.record({
    client: fc.constantFrom('c1', 'c2'),
    address: fc.constantFrom('192.0.2.1', '192.0.2.2'),
    right: fc.boolean(),
    basic: fc.boolean()
  })
  let runs = 0
  await fc.assert(fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 40 }), fc.array(fc.nat({ max: 3 }), { minLength: 1, maxLength: 9 }), async (requests, delays) => {
    runs++
    const slow = [{ limit: 2, window: 3600, key: ['client', 'source'] as const, spend: 'rejected' as const }, { perSecond: 3, key: 'client' as const, spend: 'accepted' as const }, { perSecond: 4, key: 'source' as const, spend: 'every' as const }]
    const route = (app: FastifyInstance) => {
      app.post('/token', { config: { pace: slow } }, async (req, reply) => {
        const body = req.body as Record<string, string>
        if (body.client_secret !== 'right' && req.headers.authorization !== basic(body.client ?? '', 'right')) {
          req.pace.outcome = 'rejected'
          return reply.code(401).send({ error: 'invalid_client' })
        }
        return { access_token: 'token' }
      })
    }
    const memory = await build(t, { now: () => 0 }, route)
    const shared = await build(t, { now: () => 0, store: scheduledStore(delays) }, route)
    for (const { client, address, right, basic: useBasic } of requests) {
      const secret = right ? 'right' : 'wrong'
      const send = (app: FastifyInstance) => app.inject({
        method: 'POST',
        url: '/token',
        remoteAddress: address,
        ...(useBasic
          ? { payload: `client=${client}`, headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: basic(client, secret) } }
          : form(['client_id', client], ['client_secret', secret]))
      })
      const [a, b] = [await send(memory), await send(shared)]
      const seen = (r: typeof a) => [r.statusCode, r.headers.ratelimit, r.headers['ratelimit-policy'], r.headers['retry-after'], r.body]
      if (JSON.stringify(seen(a)) !== JSON.stringify(seen(b))) {
        t.same(seen(b), seen(a), 'the shared store answers as memory does')
        return false
      }
    }
    for (const name of shared.pace.names()) {
      if (shared.pace.get(name)!.size !== memory.pace.get(name)!.size) return false
    }
    await memory.close()
    await shared.close()
    return true
  }), { numRuns: 40, seed: 42 })
  t.equal(runs, 40, 'every sequence answered alike, and the tables hold as many rows')
})
