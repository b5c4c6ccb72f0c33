import t from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import exchangePace, { type PaceRefusal, type PaceRouteOptions } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * A pace's own refusal (`refusal`): its status, body and headers instead of the plugin's 429,
 * checked when the route is added; a function's answer checked on each refusal.
 */

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const SLOW_DOWN = { statusCode: 400, body: { error: 'slow_down' } }

async function pollApp (tt: TapTest, pace: PaceRouteOptions | PaceRouteOptions[], options: Record<string, unknown> = {}): Promise<{ app: FastifyInstance, handled: () => number }> {
  let handled = 0
  const app = await build(tt, { now: () => 0, ...options }, app => {
    app.post('/token', { config: { pace } }, async () => {
      handled++
      return { error: 'authorization_pending' }
    })
  })
  return { app, handled: () => handled }
}

const poll = (app: FastifyInstance, code = 'device-1') => app.inject({ method: 'POST', url: '/token', ...form(['grant_type', DEVICE_GRANT], ['device_code', code]) })

t.test('a device polling faster than its interval gets 400 slow_down, before the handler runs', async t => {
  const { app, handled } = await pollApp(t, { limit: 1, window: 5, key: 'device_code', spend: 'every', refusal: SLOW_DOWN })
  t.equal((await poll(app)).statusCode, 200)
  const fast = await poll(app)
  t.equal(fast.statusCode, 400)
  t.same(fast.json(), { error: 'slow_down' })
  t.equal(fast.headers['retry-after'], '5', "the plugin's headers stay")
  t.equal(fast.headers['cache-control'], 'no-store')
  t.equal(fast.headers.ratelimit, '"/token";r=0;t=5')
  t.equal(handled(), 1, 'the handler never saw the fast poll')
  t.same(app.pace.counts('/token'), { granted: 1, refused: 1, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
})

t.test("a refusal's parts left out keep the plugin's own; its headers are added", async t => {
  const built: PaceRefusal[] = []
  const errorResponseBuilder = (_request: unknown, refusal: PaceRefusal) => { built.push(refusal); return { error: 'built', status: refusal.statusCode } }
  const { app } = await pollApp(t, [
    { perSecond: 1, key: 'device_code', spend: 'every', refusal: { statusCode: 503, headers: { 'x-why': 'paced', 'retry-after': 30 } } },
    { perSecond: 1, key: 'client', spend: 'every', refusal: { body: { error: 'own' } } }
  ], { errorResponseBuilder })
  await poll(app)
  const status = await poll(app)
  t.equal(status.statusCode, 503)
  t.same(status.json(), { error: 'built', status: 503 }, 'errorResponseBuilder builds the body, told the status')
  t.equal(status.headers['x-why'], 'paced')
  t.equal(status.headers['retry-after'], '30', 'a header of the same name replaces the plugin\'s')
  t.equal(built[0].statusCode, 503)
  const client = () => app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'tv']) })
  await client()
  const body = await client()
  t.equal(body.statusCode, 429, 'no status given: 429')
  t.same(body.json(), { error: 'own' })
})

t.test('a refusal function shapes each refusal from the request and the refusal', async t => {
  const seen: PaceRefusal[] = []
  const { app } = await pollApp(t, {
    limit: 1,
    window: 5,
    key: 'device_code',
    spend: 'every',
    refusal: (request, refusal) => {
      seen.push(refusal)
      return { statusCode: 400, body: { error: 'slow_down', error_description: `${(request.body as Record<string, string>).grant_type}: wait ${refusal.retryAfter} s` } }
    }
  })
  await poll(app)
  const fast = await poll(app)
  t.same(fast.json(), { error: 'slow_down', error_description: `${DEVICE_GRANT}: wait 5 s` })
  t.match(seen, [{ statusCode: 429, name: '/token', limit: 1, window: 5, retryAfterMs: 5000, retryAfter: 5 }])
})

t.test("a refusal function's wrong answer is the server's error, naming the route and the pace", async t => {
  const logged: string[] = []
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { logged.push(line) } } } })
  t.teardown(() => app.close())
  await app.register(exchangePace, { now: () => 0 })
  app.post('/token', { config: { pace: { perSecond: 1, key: 'source', spend: 'every', refusal: () => ({ statusCode: 200 }) } } }, async () => 'ok')
  await app.inject({ method: 'POST', url: '/token' })
  const response = await app.inject({ method: 'POST', url: '/token' })
  t.equal(response.statusCode, 500)
  t.match(logged.join(''), 'exchangepace: route POST /token: the refusal function of pace \\"/token\\" returned an answer whose statusCode must be an integer from 400 to 599, got 200')
})

t.test('a wrong refusal fails when the route is added, naming the route and the option', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace)
  const cases: Array<[unknown, string]> = [
    [null, 'shape must be an object, got null'],
    ['slow_down', 'shape must be an object, got "slow_down"'],
    [[400], 'shape must be an object, got an array'],
    [{ status: 400 }, 'status is not a part of an answer (statusCode, body, headers)'],
    [{ statusCode: 429.5 }, 'statusCode must be an integer from 400 to 599, got 429.5'],
    [{ statusCode: 302 }, 'statusCode must be an integer from 400 to 599, got 302'],
    [{ statusCode: '400' }, 'statusCode must be an integer from 400 to 599, got "400"'],
    [{ body: 'slow_down' }, 'body must be an object, got "slow_down"'],
    [{ body: null }, 'body must be an object, got null'],
    [{ headers: [] }, 'headers must be an object of header values, got an array'],
    [{ headers: null }, 'headers must be an object of header values, got null'],
    [{ headers: { 'retry after': '5' } }, 'header name "retry after" is not a token'],
    [{ headers: { 'x-a': 'a\nb' } }, 'header x-a must be a string or a finite number, got "a\\nb"'],
    [{ headers: { 'x-a': Infinity } }, 'header x-a must be a string or a finite number, got Infinity'],
    [{ headers: { 'x-a': { v: 1 } } }, 'header x-a must be a string or a finite number, got an object']
  ]
  for (const [refusal, problem] of cases) {
    t.throws(() => app.post('/token', { config: { pace: { perSecond: 1, key: 'source', spend: 'every', refusal } as unknown as PaceRouteOptions } }, async () => 'ok'),
      { name: 'TypeError', message: `exchangepace: route POST /token: config.pace.refusal must be { statusCode?, body?, headers? } or a function returning one: its ${problem}` }, problem)
  }
  t.doesNotThrow(() => app.post('/fine', { config: { pace: { perSecond: 1, key: 'source', spend: 'every', refusal: { statusCode: undefined, body: undefined, headers: { 'x-n': 1 } } } } }, async () => 'ok'))
})
