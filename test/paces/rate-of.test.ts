import t from 'tap'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { RedisStore, type PaceRouteOptions } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'
import { ClockedClient, redisOrSkip, uniquePrefix } from '../helpers/redis.js'

// `rateOf`: a key's own rate, for clients registered at different rates. Asked for the declared
// client id before the secret is checked, so a stranger naming a fast client spends that client's
// bucket at its rate and is refunded, as with the declared rate. On memory and on Redis, on a
// clock of the test's: nothing refills while a test runs.

const REGISTERED = new Map([['batch', { secret: 'batch-secret', perSecond: 20 }], ['mobile', { secret: 'mobile-secret', perSecond: undefined }]])
const rateOf = (client: string): number | undefined => REGISTERED.get(client)?.perSecond
const EXCHANGES: PaceRouteOptions = { perSecond: 5, key: 'client', spend: 'accepted', rateOf }

async function tokenApp (t: TapTest, options: Record<string, unknown>, pace: PaceRouteOptions | PaceRouteOptions[] = EXCHANGES): Promise<FastifyInstance> {
  return await build(t, options, app => {
    app.post('/token', { config: { pace } }, async (request: FastifyRequest, reply: FastifyReply) => {
      const body = request.body as Record<string, string>
      if (REGISTERED.get(body.client_id)?.secret !== body.client_secret) {
        request.pace.outcome = 'rejected'
        return reply.code(401).send({ error: 'invalid_client' })
      }
      return { access_token: 'token', token_type: 'Bearer' }
    })
  })
}

/** Sends `count` exchanges for `id` at once, with its secret or a wrong one; the statuses, counted. */
async function burst (app: FastifyInstance, id: string, count: number, right = true, source = '198.51.100.7'): Promise<Record<number, number>> {
  const secret = right ? REGISTERED.get(id)?.secret ?? '' : 'guess'
  const responses = await Promise.all(Array.from({ length: count }, () => app.inject({ method: 'POST', url: '/token', remoteAddress: source, ...form(['client_id', id], ['client_secret', secret]) })))
  const counted: Record<number, number> = {}
  for (const { statusCode } of responses) counted[statusCode] = (counted[statusCode] ?? 0) + 1
  return counted
}

function rateOfBehaviour (t: TapTest, options: (scope: string) => Record<string, unknown>): void {
  t.test('a client registered at 20/s gets 20 of 40 sent at once, the default client 5, and strangers naming the fast client spend nothing of it', async t => {
    const app = await tokenApp(t, options(t.name))
    for (let i = 0; i < 40; i++) t.same(await burst(app, 'batch', 1, false), { 401: 1 }, 'a stranger naming it, refunded')
    t.same(await burst(app, 'batch', 40), { 200: 20, 429: 20 })
    t.same(await burst(app, 'mobile', 40), { 200: 5, 429: 35 })
  })

  t.test('the headers and the 429 body state the key\'s own rate; inspect reports against it', async t => {
    const app = await tokenApp(t, options(t.name))
    const granted = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'batch'], ['client_secret', 'batch-secret']) })
    t.equal(granted.headers['ratelimit-policy'], '"/token";q=20;w=1')
    t.equal(granted.headers.ratelimit, '"/token";r=19;t=1')
    t.same(await app.pace.inspect('/token', { client: 'batch' }), { remaining: 19, retryAfterMs: 0, fullInMs: 50, blockedUntil: null })
    await burst(app, 'batch', 19)
    const refused = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'batch'], ['client_secret', 'batch-secret']) })
    t.equal(refused.statusCode, 429)
    t.match(refused.json(), { error_description: /Too many requests for this \/token pace/ })
    t.same(await app.pace.inspect('/token', { client: 'batch' }), { remaining: 0, retryAfterMs: 50, fullInMs: 1000, blockedUntil: null })
    t.same(await app.pace.inspect('/token', { client: 'mobile' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
  })

  t.test('a limit/window pace takes a limit over its window, and a pair its client\'s rate', async t => {
    const budget: PaceRouteOptions = { limit: 2, window: 3600, key: ['client', 'source'], spend: 'rejected', rateOf: client => client === 'batch' ? 4 : undefined }
    const app = await tokenApp(t, options(t.name), budget)
    t.same(await burst(app, 'batch', 6, false), { 401: 4, 429: 2 })
    t.same(await burst(app, 'mobile', 6, false), { 401: 2, 429: 4 })
    t.same(await app.pace.inspect('/token', { client: 'batch', source: '198.51.100.7' }), { remaining: 0, retryAfterMs: 900_000, fullInMs: 3_600_000, blockedUntil: null })
  })
}

const clock = 5_000_000
t.test('in memory', async t => rateOfBehaviour(t, () => ({ now: () => clock })))

const client = await redisOrSkip()
if (client !== null) {
  const prefix = uniquePrefix('rate-of')
  const clocked = new ClockedClient(client, () => clock * 1000)
  t.teardown(async () => {
    const keys = await client.keys(`${prefix}*`)
    if (keys.length > 0) await client.del(...keys)
  })
  t.test('on Redis', async t => rateOfBehaviour(t, scope => ({ now: () => clock, store: new RedisStore({ client: clocked, prefix: `${prefix}${scope}:`, timeoutMs: 1000 }) })))
}

t.test('a rate that is not one is the server\'s mistake: a 500 naming the pace, and nothing spent', async t => {
  const answers: Array<[string, () => unknown]> = [['0', () => 0], ['NaN', () => Number.NaN], ['a string', () => 'fast'], ['1e12', () => 1e12],
    ['a Promise', () => Promise.resolve(20)], ['a rejected Promise', () => Promise.reject(new Error('no database'))]]
  let answer = answers[0][1]
  const app = await tokenApp(t, { now: () => clock }, { ...EXCHANGES, rateOf: () => answer() as number })
  for (const [what, given] of answers) {
    answer = given
    const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'batch'], ['client_secret', 'batch-secret']) })
    t.equal(response.statusCode, 500, what)
  }
  t.equal(app.pace.get('/token')?.size, 0)
})

t.test('a pace keeps at most 256 distinct rates: round them', async t => {
  let rate = 1
  const app = await tokenApp(t, { now: () => clock }, { ...EXCHANGES, rateOf: () => rate })
  const statuses = []
  for (rate = 1; rate <= 257; rate++) statuses.push((await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'mobile'], ['client_secret', 'mobile-secret']) })).statusCode)
  t.same(statuses.slice(0, 2), [200, 200])
  t.same(statuses.flatMap((s, i) => s === 500 ? [i + 1] : []), [257], 'rates 1 to 257 are 257 lanes, the declared rate (5) among them: the last is one too many')
})

t.test('lanes whose keys stopped coming are swept as others are looked up', async t => {
  let now = 0
  let fast = true
  const app = await tokenApp(t, { now: () => now }, { ...EXCHANGES, rateOf: client => fast && client.startsWith('batch') ? 20 : undefined })
  for (let i = 0; i < 10; i++) await app.inject({ method: 'POST', url: '/token', ...form(['client_id', `batch${i}`], ['client_secret', 'x']) })
  await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'batch'], ['client_secret', 'batch-secret']) })
  fast = false
  now += 10_000
  for (let i = 0; i < 600; i++) await app.pace.inspect('/token', { client: `other${i}` })
  t.equal(app.pace.get('/token')?.size, 0, 'the declared lane holds nothing')
  t.same(await app.pace.inspect('/token', { client: 'batch' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
})

t.test('rateOf is checked when the route is added, and routes sharing a pace share one rateOf', async t => {
  await t.rejects(tokenApp(t, {}, { ...EXCHANGES, rateOf: 20 as never }), { name: 'TypeError', message: 'exchangepace: route POST /token: config.pace.rateOf must be a function (key) => number | undefined, got 20' })
  await t.rejects(build(t, {}, app => {
    app.post('/token', { config: { pace: { ...EXCHANGES, name: 'exchanges' } } }, async () => 'ok')
    app.post('/revoke', { config: { pace: { ...EXCHANGES, name: 'exchanges', rateOf: () => 7 } } }, async () => 'ok')
  }), { name: 'TypeError', message: 'exchangepace: route POST /revoke: pace "exchanges" is declared with another rateOf elsewhere; routes sharing a pace share one rateOf function' })
})

t.test('the OpenAPI description says a key may have its own rate', async t => {
  const schemas: Array<Record<string, any>> = []
  await build(t, {}, app => {
    app.addHook('onRoute', route => { if (route.method === 'POST') schemas.push(route.schema as Record<string, any>) })
    app.post('/token', { config: { pace: EXCHANGES } }, async () => 'ok')
    app.post('/by-source', { config: { pace: { perSecond: 9, key: 'source', spend: 'every', rateOf: () => undefined } } }, async () => 'ok')
  })
  t.match(schemas[0].description, /^Paced by exchangepace: 5 requests per second per declared client id, or the client's registered rate \(rejected exchanges are refunded\)\./)
  t.equal(schemas[0]['x-exchangepace'].paces[0].ownRates, true)
  t.match(schemas[1].description, /9 requests per second per source address, or the key's own rate \(every request counts\)/)
})
