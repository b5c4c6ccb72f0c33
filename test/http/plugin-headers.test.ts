import t from 'tap'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { PaceRefusal, PaceRouteOptions, PaceStore } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Quota and refusal headers (IETF draft-ietf-httpapi-ratelimit-headers-11): `RateLimit-Policy` and
 * `RateLimit` on paced responses, the client's own only on accepted outcomes; 429 with Retry-After,
 * no-store and no-cache. The clock is injected: `clock.t` in milliseconds.
 */

interface Clock { t: number }

/** A token route paced by `pace`; the body field `reject=yes` makes the handler reject the exchange. */
async function tokenApp (tt: TapTest, pace: PaceRouteOptions | PaceRouteOptions[], options: Record<string, unknown> = {}): Promise<{ app: FastifyInstance, clock: Clock }> {
  const clock = { t: 0 }
  const app = await build(tt, { now: () => clock.t, ...options }, app => {
    app.post('/token', { config: { pace } }, async (request: FastifyRequest, reply: FastifyReply) => {
      if ((request.body as Record<string, string> | undefined)?.reject === 'yes') {
        request.pace.outcome = 'rejected'
        return reply.code(401).send({ error: 'invalid_client' })
      }
      return { access_token: 'token' }
    })
  })
  return { app, clock }
}

const CLIENT = { perSecond: 10, key: 'client', spend: 'accepted' } as const
const SOURCE = { perSecond: 50, key: 'source', spend: 'every' } as const

function post (app: FastifyInstance, ...pairs: Array<[string, string]>) {
  return app.inject({ method: 'POST', url: '/token', ...form(...pairs) })
}

t.test('an accepted exchange carries the policy and the remaining quota of its client pace', async t => {
  const { app } = await tokenApp(t, CLIENT)
  const first = await post(app, ['client_id', 'c'])
  t.equal(first.statusCode, 200)
  t.equal(first.headers['ratelimit-policy'], '"/token";q=10;w=1')
  t.equal(first.headers.ratelimit, '"/token";r=9;t=1')
  const second = await post(app, ['client_id', 'c'])
  t.equal(second.headers.ratelimit, '"/token";r=8;t=1')
  const stranger = await post(app, ['client_id', 'd'])
  t.equal(stranger.headers.ratelimit, '"/token";r=9;t=1', 'each key has its own quota')
})

t.test('the remaining quota follows the refill on the clock', async t => {
  const { app, clock } = await tokenApp(t, CLIENT)
  // Row per step: [time ms, status, RateLimit r]
  const grid: Array<[number, number, number | undefined]> = [
    [0, 200, 9], [0, 200, 8], [0, 200, 7], [0, 200, 6], [0, 200, 5],
    [0, 200, 4], [0, 200, 3], [0, 200, 2], [0, 200, 1], [0, 200, 0],
    [0, 429, undefined], // empty
    [99, 429, undefined], // 0.99 units back
    [100, 200, 0], // one whole unit back, spent at once
    [350, 200, 1], // 2.5 back, one spent: 1.5 left shows as 1
    [1350, 200, 9], // refilled to the brim (10), one spent
    [3_600_000, 200, 9] // an hour later: still one second's worth
  ]
  for (const [time, status, remaining] of grid) {
    clock.t = time
    const response = await post(app, ['client_id', 'c'])
    t.equal(response.statusCode, status, `t=${time}`)
    t.equal(response.headers.ratelimit, remaining === undefined ? undefined : `"/token";r=${remaining};t=1`, `t=${time}`)
  }
})

t.test('several paces are listed in the order they reserved: source (onRequest), then client', async t => {
  const { app } = await tokenApp(t, [CLIENT, SOURCE])
  const response = await post(app, ['client_id', 'c'])
  t.equal(response.headers['ratelimit-policy'], '"/token#source";q=50;w=1, "/token#client";q=10;w=1')
  t.equal(response.headers.ratelimit, '"/token#source";r=49;t=1, "/token#client";r=9;t=1')
})

t.test('a list of several quotas follows every change, and comes out the same when nothing changed', async t => {
  const { app, clock } = await tokenApp(t, [CLIENT, SOURCE])
  const both = (source: number, client: number) => `"/token#source";r=${source};t=1, "/token#client";r=${client};t=1`
  // Row per step: [time ms, client id, RateLimit]
  const grid: Array<[number, string, string]> = [
    [0, 'c', both(49, 9)],
    [1000, 'c', both(49, 9)], // both buckets full again: the same list
    [1000, 'c', both(48, 8)],
    [1000, 'd', both(47, 9)], // another client: its own quota after the shared source's
    [1000, 'd', both(46, 8)],
    [2000, 'c', both(49, 9)]
  ]
  for (const [time, client, quota] of grid) {
    clock.t = time
    const response = await post(app, ['client_id', client])
    t.equal(response.headers['ratelimit-policy'], '"/token#source";q=50;w=1, "/token#client";q=10;w=1', `t=${time} ${client}`)
    t.equal(response.headers.ratelimit, quota, `t=${time} ${client}`)
  }
})

t.test('a rejected outcome hides the client quota and shows the source quota', async t => {
  const { app } = await tokenApp(t, [CLIENT, SOURCE])
  const response = await post(app, ['client_id', 'c'], ['reject', 'yes'])
  t.equal(response.statusCode, 401)
  t.equal(response.headers['ratelimit-policy'], '"/token#source";q=50;w=1')
  t.equal(response.headers.ratelimit, '"/token#source";r=49;t=1')
})

t.test('a refunded unit of a store that says not when its bucket is full again shows the whole window', async t => {
  // A store of one's own may leave fullInMs out; the quota then says the window, refunded or not.
  const store: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: () => ({ reserve: async () => ({ granted: true, remaining: 40, retryAfterMs: 0, refund () {} }) })
  }
  const { app } = await tokenApp(t, { perSecond: 50, key: 'source', spend: 'accepted' }, { store })
  const rejected = await post(app, ['client_id', 'c'], ['reject', 'yes'])
  t.equal(rejected.statusCode, 401)
  t.equal(rejected.headers.ratelimit, '"/token";r=41;t=1', 'the unit given back counted, the window for when')
  t.equal((await post(app, ['client_id', 'c'])).headers.ratelimit, '"/token";r=40;t=1', 'kept: as the store said')
})

t.test('a rejected outcome on a client-only route sends no quota headers', async t => {
  const { app } = await tokenApp(t, CLIENT)
  const response = await post(app, ['client_id', 'victim'], ['reject', 'yes'])
  t.equal(response.statusCode, 401)
  t.equal(response.headers['ratelimit-policy'], undefined)
  t.equal(response.headers.ratelimit, undefined)
})

t.test('a custom key is private like a client id: hidden on rejected outcomes', async t => {
  const { app } = await tokenApp(t, { perSecond: 4, key: () => 'tenant-a', spend: 'accepted' })
  const accepted = await post(app, ['client_id', 'c'])
  t.equal(accepted.headers.ratelimit, '"/token";r=3;t=1')
  const rejected = await post(app, ['client_id', 'c'], ['reject', 'yes'])
  t.equal(rejected.headers.ratelimit, undefined)
  t.equal(rejected.headers['ratelimit-policy'], undefined)
})

t.test('a request declaring no client id reserves nothing and gets no quota headers', async t => {
  const { app } = await tokenApp(t, CLIENT)
  const response = await post(app, ['grant_type', 'client_credentials'])
  t.equal(response.statusCode, 200)
  t.equal(response.headers.ratelimit, undefined)
})

t.test('a 429 of a client pace carries Retry-After and no quota, whoever asks', async t => {
  const { app } = await tokenApp(t, { perSecond: 1, key: 'client', spend: 'accepted' })
  await post(app, ['client_id', 'victim'])
  const refused = await post(app, ['client_id', 'victim'])
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.equal(refused.headers.pragma, 'no-cache')
  t.equal(refused.headers['ratelimit-policy'], undefined)
  t.equal(refused.headers.ratelimit, undefined)
  t.match(refused.headers['content-type'], /^application\/json/)
  t.same(refused.json(), { error: 'temporarily_unavailable', error_description: 'Too many requests for this /token pace; retry after 1 second' })
})

t.test('a 429 of a source pace carries its quota, at zero', async t => {
  const { app } = await tokenApp(t, { perSecond: 1, key: 'source', spend: 'every' })
  await post(app)
  const refused = await post(app)
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['ratelimit-policy'], '"/token";q=1;w=1')
  t.equal(refused.headers.ratelimit, '"/token";r=0;t=1')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.equal(refused.headers.pragma, 'no-cache')
})

t.test('a 429 of the client pace still shows the source quota the request holds', async t => {
  const { app } = await tokenApp(t, [{ perSecond: 1, key: 'client', spend: 'accepted' }, SOURCE])
  await post(app, ['client_id', 'victim'])
  const refused = await post(app, ['client_id', 'victim'])
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['ratelimit-policy'], '"/token#source";q=50;w=1')
  t.equal(refused.headers.ratelimit, '"/token#source";r=48;t=1')
})

t.test('a 429 of a late source pace lists the early source quota first, then its own at zero', async t => {
  const { app } = await tokenApp(t, [
    { name: 'ceiling', perSecond: 50, key: 'source', spend: 'every' },
    { name: 'source-accepted', perSecond: 1, key: 'source', spend: 'accepted' }
  ])
  await post(app)
  const refused = await post(app)
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['ratelimit-policy'], '"ceiling";q=50;w=1, "source-accepted";q=1;w=1')
  t.equal(refused.headers.ratelimit, '"ceiling";r=48;t=1, "source-accepted";r=0;t=1')
})

t.test('a 400 for a malformed client id shows the source quota and never the client one', async t => {
  const { app } = await tokenApp(t, [{ name: 'tenant', perSecond: 5, key: () => 'tenant-a', spend: 'accepted' }, CLIENT, SOURCE])
  const response = await post(app, ['client_id', 'c'], ['client_id', 'd'])
  t.equal(response.statusCode, 400)
  t.equal(response.headers['ratelimit-policy'], '"/token#source";q=50;w=1')
  t.equal(response.headers.ratelimit, '"/token#source";r=49;t=1')
  t.equal(app.pace.get('tenant')!.size, 0, 'the tenant unit taken before the client id failed was given back')
})

t.test('Retry-After is whole seconds, at least 1, never earlier than the exact wait', async t => {
  const refusals: PaceRefusal[] = []
  const { app, clock } = await tokenApp(t, { perSecond: 4, key: 'client', spend: 'accepted' }, {
    errorResponseBuilder: (_request: FastifyRequest, refusal: PaceRefusal) => { refusals.push(refusal); return { error: 'slow_down' } }
  })
  for (let i = 0; i < 4; i++) await post(app, ['client_id', 'c'])
  // Row per step: [time ms, exact wait ms]
  const grid: Array<[number, number]> = [[0, 250], [100, 150], [249, 1]]
  for (const [time] of grid) {
    clock.t = time
    const refused = await post(app, ['client_id', 'c'])
    t.equal(refused.statusCode, 429, `t=${time}`)
    t.equal(refused.headers['retry-after'], '1', `t=${time}`)
  }
  t.same(refusals.map(r => r.retryAfterMs), grid.map(([, wait]) => wait))
  t.same(refusals[0], { statusCode: 429, name: '/token', perSecond: 4, limit: 4, window: 1, retryAfterMs: 250, retryAfter: 1, inFlight: false })
})

t.test('Retry-After rounds a whole second of wait to 1, not 2', async t => {
  const { app } = await tokenApp(t, { perSecond: 1, key: 'client', spend: 'accepted' })
  await post(app, ['client_id', 'c'])
  const refused = await post(app, ['client_id', 'c'])
  t.equal(refused.headers['retry-after'], '1')
})

t.test('a store reporting a longer wait gets Retry-After rounded up to whole seconds', async t => {
  // The in-process pace never asks for more than one second; a store of one's own may.
  const waits = [1500, 2000, 2001]
  const store: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: () => ({ reserve: async () => ({ granted: false, remaining: 0, retryAfterMs: waits.shift()!, refund () {} }) })
  }
  const app = await build(t, { store }, app => {
    app.post('/token', { config: { pace: CLIENT } }, async () => ({ ok: true }))
  })
  const seen: Array<[string | undefined, string]> = []
  for (let i = 0; i < 3; i++) {
    const refused = await post(app, ['client_id', 'c'])
    seen.push([refused.headers['retry-after'] as string | undefined, refused.json().error_description])
  }
  t.same(seen, [
    ['2', 'Too many requests for this /token pace; retry after 2 seconds'],
    ['2', 'Too many requests for this /token pace; retry after 2 seconds'],
    ['3', 'Too many requests for this /token pace; retry after 3 seconds']
  ])
})

t.test('errorResponseBuilder shapes the 429 body; the headers stay', async t => {
  const { app } = await tokenApp(t, { perSecond: 1, key: 'source', spend: 'every' }, {
    errorResponseBuilder: (request: FastifyRequest, refusal: PaceRefusal) => ({ error: 'slow_down', path: request.url, pace: refusal.name, wait: refusal.retryAfter })
  })
  await post(app)
  const refused = await post(app)
  t.equal(refused.statusCode, 429)
  t.same(refused.json(), { error: 'slow_down', path: '/token', pace: '/token', wait: 1 })
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.equal(refused.headers.pragma, 'no-cache')
  t.equal(refused.headers.ratelimit, '"/token";r=0;t=1')
})

t.test('a pace name is written as a structured-field string, quotes and backslashes escaped', async t => {
  const { app } = await tokenApp(t, { name: 'say "hi" \\o/', perSecond: 2, key: 'source', spend: 'every' })
  const response = await post(app)
  t.equal(response.headers['ratelimit-policy'], '"say \\"hi\\" \\\\o/";q=2;w=1')
  t.equal(response.headers.ratelimit, '"say \\"hi\\" \\\\o/";r=1;t=1')
})

t.test('a fractional rate counts whole units and states an integer quota over a longer window', async t => {
  const { app } = await tokenApp(t, { perSecond: 2.5, key: 'source', spend: 'every' })
  const statuses: number[] = []
  let last
  for (let i = 0; i < 3; i++) {
    last = await post(app)
    statuses.push(last.statusCode)
  }
  t.same(statuses, [200, 200, 429])
  t.equal(last!.headers['ratelimit-policy'], '"/token";q=5;w=2', '2.5/s is 5 per 2 s')
})

t.test('a handler error keeps the quota headers of an accepted outcome', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT } }, async () => { throw new Error('boom') })
  })
  const response = await post(app, ['client_id', 'c'])
  t.equal(response.statusCode, 500)
  t.equal(response.headers.ratelimit, '"/token";r=9;t=1')
})

t.test('a route paced only by source, spend every, writes its quota and commits as it reserves', async t => {
  let settledInHandler: boolean | undefined
  let answered: unknown
  const app = await build(t, { now: () => 0 }, app => {
    const onResponse = (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
      answered = { settled: request.pace.settled, refused: request.pace.refused }
      done()
    }
    app.get('/authorize', { onResponse, config: { pace: { perSecond: 3, key: 'source', spend: 'every' } } }, async (request) => {
      settledInHandler = request.pace.settled
      request.pace.outcome = 'rejected'
      if ((request.query as Record<string, string>).fail === 'yes') throw new Error('boom')
      return 'ok'
    })
  })
  const first = await app.inject('/authorize')
  t.equal(first.statusCode, 200)
  t.equal(settledInHandler, true, 'committed when taken: nothing is ever refunded')
  t.same([first.headers['ratelimit-policy'], first.headers.ratelimit], ['"/authorize";q=3;w=1', '"/authorize";r=2;t=1'])
  const failed = await app.inject('/authorize?fail=yes')
  t.equal(failed.statusCode, 500)
  t.equal(failed.headers.ratelimit, '"/authorize";r=1;t=1', 'an error response keeps the quota written in onRequest')
  t.equal((await app.inject('/authorize')).statusCode, 200, 'the third unit: a rejected outcome refunded nothing')
  const refused = await app.inject('/authorize')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers.ratelimit, '"/authorize";r=0;t=1')
  t.same(answered, { settled: true, refused: true }, 'a refusal settles too: the route has no onSend of the plugin\'s to do it later')
})
