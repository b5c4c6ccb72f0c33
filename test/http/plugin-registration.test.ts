import t from 'tap'
import Fastify, { type FastifyInstance, type RouteOptions } from 'fastify'
import exchangePace, { Pace, type PaceRouteOptions } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/** A Fastify instance with exchangepace registered (not yet ready), closed when `t` ends. */
async function paced (tt: TapTest, options: Record<string, unknown> = {}): Promise<FastifyInstance> {
  const app = Fastify()
  tt.teardown(() => app.close())
  await app.register(exchangePace, options)
  return app
}

const ok = async () => ({ ok: true })

/** A config whose perSecond cannot be printed as JSON. */
function circular (): unknown {
  const perSecond: Record<string, unknown> = {}
  perSecond.self = perSecond
  return { perSecond, key: 'client', spend: 'accepted' }
}

t.test('options are checked when the plugin is registered', async t => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ now: 5 }, 'exchangepace: now must be a function returning milliseconds, got number'],
    [{ now: 'performance' }, 'exchangepace: now must be a function returning milliseconds, got string'],
    [{ ipv6Subnet: 0 }, 'exchangepace: ipv6Subnet must be an integer from 1 to 128, got 0'],
    [{ ipv6Subnet: 129 }, 'exchangepace: ipv6Subnet must be an integer from 1 to 128, got 129'],
    [{ ipv6Subnet: 56.5 }, 'exchangepace: ipv6Subnet must be an integer from 1 to 128, got 56.5'],
    [{ ipv6Subnet: '64' }, 'exchangepace: ipv6Subnet must be an integer from 1 to 128, got 64'],
    [{ maxKeyLength: 0 }, 'exchangepace: maxKeyLength must be an integer >= 1, got 0'],
    [{ maxKeyLength: 2.5 }, 'exchangepace: maxKeyLength must be an integer >= 1, got 2.5'],
    [{ maxKeyLength: Infinity }, 'exchangepace: maxKeyLength must be an integer >= 1, got Infinity'],
    [{ errorResponseBuilder: { error: 'x' } }, 'exchangepace: errorResponseBuilder must be a function, got object'],
    [{ store: null }, 'exchangepace: store must be a PaceStore such as RedisStore'],
    [{ store: {} }, 'exchangepace: store must be a PaceStore such as RedisStore'],
    [{ store: { pace: () => ({}), scope: 1 } }, 'exchangepace: store must be a PaceStore such as RedisStore']
  ]
  for (const [options, message] of cases) {
    const app = Fastify()
    t.teardown(() => app.close())
    app.register(exchangePace, options as never)
    await t.rejects(async () => { await app.ready() }, { name: 'TypeError', message }, JSON.stringify(options))
  }
})

t.test('the edges of the options are accepted', async t => {
  for (const options of [{ ipv6Subnet: 1 }, { ipv6Subnet: 128 }, { maxKeyLength: 1 }, { now: () => 0, errorResponseBuilder: () => ({}) }, {}]) {
    const app = await paced(t, options)
    await t.resolves(async () => { await app.ready() }, JSON.stringify(options))
  }
})

t.test('fastify.pace is the registry; request.pace is inert on routes without a pace', async t => {
  const app = await build(t, {}, app => {
    app.get('/plain', async (request) => ({ paced: request.pace.paced }))
    app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, ok)
  })
  t.same(app.pace.names(), ['/token'])
  t.type(app.pace.get('/token'), Pace)
  t.equal(app.pace.get('/token')!.perSecond, 5)
  t.equal(app.pace.get('/plain'), undefined)
  const response = await app.inject('/plain')
  t.same(response.json(), { paced: false })
  t.equal(response.headers.ratelimit, undefined)
})

t.test('routes without config.pace get no hooks at all; paced routes keep their own hooks in order', async t => {
  const seen = new Map<string, RouteOptions>()
  const calls: string[] = []
  const own = (name: string) => (_request: unknown, _reply: unknown, next: () => void) => { calls.push(name); next() }
  const ownOnSend = (_request: unknown, _reply: unknown, payload: unknown, next: (err: null, payload: unknown) => void) => { calls.push('onSend'); next(null, payload) }
  const preHandlers = [own('preHandler')]
  const app = await build(t, {}, app => {
    app.addHook('onRoute', routeOptions => { seen.set(`${String(routeOptions.method)} ${routeOptions.url}`, routeOptions) })
    app.get('/plain', ok)
    app.post('/plain-with-hooks', { preHandler: own('plain') }, ok)
    app.post('/token', {
      config: { pace: { perSecond: 5, key: 'source', spend: 'every' } },
      onRequest: own('onRequest'),
      preHandler: preHandlers,
      onSend: ownOnSend,
      onResponse: own('onResponse'),
      onRequestAbort: (_request, done) => done()
    }, ok)
    app.post('/paced-accepted', {
      config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } },
      onSend: [ownOnSend],
      onRequestAbort: [(_request, done) => done()],
      onResponse: [(_request, _reply, done) => done()]
    }, ok)
  })
  const plain = seen.get('GET /plain')!
  for (const hook of ['onRequest', 'preHandler', 'onSend', 'onResponse', 'onRequestAbort'] as const) {
    t.equal(plain[hook], undefined, `no ${hook} on an unpaced route`)
  }
  t.type(seen.get('POST /plain-with-hooks')!.preHandler, 'function', 'an unpaced route keeps its single hook as given')

  const token = seen.get('POST /token')!
  t.equal((token.onRequest as unknown[]).length, 2, 'the early reservation, then the route\'s own onRequest')
  t.equal(token.preHandler, preHandlers, 'no late pace: the preHandler array is the route\'s own')
  t.equal(preHandlers.length, 1)
  t.equal(token.onSend, ownOnSend, 'only source paces spent on every request: the quota headers are written as they are taken, no onSend')
  t.type(token.onResponse, 'function', 'and nothing to settle later: the route\'s own onResponse as given')
  const accepted = seen.get('POST /paced-accepted')!
  t.equal((accepted.onSend as unknown[]).length, 2, 'a client pace: the route\'s own onSend, then the quota headers and the settlement, once the outcome is known')
  t.equal((accepted.onSend as unknown[])[0], ownOnSend)
  t.type(token.onRequestAbort, 'function', 'the route\'s onRequestAbort as given: hang-ups settle in onSend')
  t.type(seen.get('POST /paced-accepted')!.onRequestAbort, 'array', 'as given')
  t.equal((seen.get('POST /paced-accepted')!.onRequestAbort as unknown[]).length, 1)
  t.equal((seen.get('POST /paced-accepted')!.onResponse as unknown[]).length, 1, 'the route\'s own onResponse hooks as given: settlement is in onSend')

  await app.inject({ method: 'POST', url: '/token' })
  t.same(calls, ['onRequest', 'preHandler', 'onSend', 'onResponse'], 'the route\'s own hooks all ran')
})

t.test('route config errors name the route, the option and the value', async t => {
  const cases: Array<[unknown, string]> = [
    [{ perSecond: '10', key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got "10"'],
    [{ perSecond: 0, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got 0'],
    [{ perSecond: 0.5, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got 0.5'],
    [{ perSecond: NaN, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got NaN'],
    [{ perSecond: Infinity, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got Infinity'],
    [{ perSecond: 1e12, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got 1000000000000'],
    [{ perSecond: 10n, key: 'client', spend: 'accepted' }, 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got 10'],
    [{ key: 'client', spend: 'accepted' }, 'route POST /token: config.pace declares no rate: give perSecond, or limit with window'],
    [{ perSecond: 10, key: 'ip', spend: 'accepted' }, 'route POST /token: config.pace.key must be \'client\', \'source\', [\'client\', \'source\'], \'device_code\', \'bearer\' or a function (request) => string | undefined, got "ip"'],
    [{ perSecond: 10, key: Symbol('client'), spend: 'accepted' }, 'route POST /token: config.pace.key must be \'client\', \'source\', [\'client\', \'source\'], \'device_code\', \'bearer\' or a function (request) => string | undefined, got Symbol(client)'],
    [{ perSecond: 10, key: 'client', spend: 'sometimes' }, 'route POST /token: config.pace.spend must be \'accepted\', \'rejected\' or \'every\', got "sometimes"'],
    [{ perSecond: 10, key: 'client' }, 'route POST /token: config.pace.spend must be \'accepted\', \'rejected\' or \'every\', got undefined'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', name: '' }, 'route POST /token: config.pace.name must be a non-empty string of printable ASCII, got ""'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', name: 'pàce' }, 'route POST /token: config.pace.name must be a non-empty string of printable ASCII, got "pàce"'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', name: 'a\nb' }, 'route POST /token: config.pace.name must be a non-empty string of printable ASCII, got "a\\nb"'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', name: () => 'x' }, 'route POST /token: config.pace.name must be a non-empty string of printable ASCII, got a function'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', name: 7 }, 'route POST /token: config.pace.name must be a non-empty string of printable ASCII, got 7'],
    ['10/s', 'route POST /token: config.pace must be an object { perSecond or limit and window, key, spend, name? }, got "10/s"'],
    [null, 'route POST /token: config.pace must be an object { perSecond or limit and window, key, spend, name? }, got null'],
    [circular(), 'route POST /token: config.pace.perSecond must be a number from 1 to 999999999999, got [object Object]'],
    [[], 'route POST /token: config.pace must be a pace or a non-empty array of paces, got []'],
    [{ perSecond: 10, key: 'client', spend: 'accepted', nmae: 'token' }, 'route POST /token: config.pace.nmae is not an option of a pace (perSecond, limit, window, key, spend, name, rateOf, refusal, exceptGrantTypes, shadow, warnAt)'],
    [[{ perSecond: 10, key: 'client', spend: 'accepted' }, { perSecond: 10, key: 'source', spend: 'every', max: 5 }], 'route POST /token: config.pace[1].max is not an option of a pace (perSecond, limit, window, key, spend, name, rateOf, refusal, exceptGrantTypes, shadow, warnAt)'],
    [[{ perSecond: 10, key: 'client', spend: 'accepted' }, 5], 'route POST /token: config.pace[1] must be an object { perSecond or limit and window, key, spend, name? }, got 5'],
    [[{ perSecond: 10, key: 'client', spend: 'accepted' }, { perSecond: 10, key: 'source', spend: 'never' }], 'route POST /token: config.pace[1].spend must be \'accepted\', \'rejected\' or \'every\', got "never"'],
    [{ limit: 0.5, window: 1, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.limit must be a number from 1 to 999999999999, got 0.5'],
    [{ limit: 10, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.window must be a number of seconds > 0 and <= 31536000 (a year), got undefined'],
    [{ window: 600, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.limit must be a number from 1 to 999999999999, got undefined'],
    [{ limit: 10, window: 0, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.window must be a number of seconds > 0 and <= 31536000 (a year), got 0'],
    [{ limit: 10, window: 31536001, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.window must be a number of seconds > 0 and <= 31536000 (a year), got 31536001'],
    [{ limit: 10, window: '600', key: 'client', spend: 'rejected' }, 'route POST /token: config.pace.window must be a number of seconds > 0 and <= 31536000 (a year), got "600"'],
    [{ perSecond: 10, limit: 10, window: 600, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace declares perSecond and limit: give perSecond, or limit with window, not both'],
    [{ perSecond: 10, window: 600, key: 'client', spend: 'rejected' }, 'route POST /token: config.pace declares perSecond and window: give perSecond, or limit with window, not both'],
    [{ perSecond: 10, key: ['source', 'client'], spend: 'rejected' }, 'route POST /token: config.pace.key must be \'client\', \'source\', [\'client\', \'source\'], \'device_code\', \'bearer\' or a function (request) => string | undefined, got ["source","client"]'],
    [{ perSecond: 10, key: ['client'], spend: 'rejected' }, 'route POST /token: config.pace.key must be \'client\', \'source\', [\'client\', \'source\'], \'device_code\', \'bearer\' or a function (request) => string | undefined, got ["client"]'],
    [[{ limit: 10, window: 600, key: 'source', spend: 'rejected' }, { limit: 100, window: 86400, key: 'source', spend: 'rejected' }], 'route POST /token: config.pace must be paces with distinct names (two are named "/token#source:rejected"), got "/token#source:rejected"']
  ]
  for (const [pace, message] of cases) {
    const app = await paced(t)
    t.throws(() => app.post('/token', { config: { pace: pace as PaceRouteOptions } }, ok), { name: 'TypeError', message: `exchangepace: ${message}` })
  }
  const highest = await paced(t)
  highest.get('/highest', { config: { pace: { perSecond: 999_999_999_999, key: 'source', spend: 'every' } } }, ok)
  t.equal((await highest.inject({ url: '/highest' })).headers['ratelimit-policy'], '"/highest";q=999999999999;w=1', 'the highest rate is accepted, its quota a 12-digit integer')
  const app = await paced(t)
  t.throws(() => app.get('/jeton-é', { config: { pace: { perSecond: 10, key: 'source', spend: 'every' } } }, ok), {
    name: 'TypeError',
    message: 'exchangepace: route GET /jeton-é: config.pace.name must be given when the route\'s URL is not printable ASCII (the default name, "/jeton-é", would go into headers), got undefined'
  })
  app.get('/jeton-é', { config: { pace: { perSecond: 10, key: 'source', spend: 'every', name: 'jeton' } } }, ok)
  const response = await app.inject('/jeton-%C3%A9')
  t.equal(response.statusCode, 200, 'a name of its own serves such a route')
  t.equal(response.headers['ratelimit-policy'], '"jeton";q=10;w=1')
})

t.test('a route with several methods is named by all of them in errors', async t => {
  const app = await paced(t)
  t.throws(() => app.route({ method: ['GET', 'POST'], url: '/both', config: { pace: { perSecond: -1, key: 'source', spend: 'every' } }, handler: ok }),
    { message: 'exchangepace: route GET,POST /both: config.pace.perSecond must be a number from 1 to 999999999999, got -1' })
})

t.test('a route declared inside a later plugin fails ready() with the same error', async t => {
  const app = await paced(t)
  app.register(async function routes (app) {
    app.post('/token', { config: { pace: { perSecond: 10, key: 'client', spend: 'later' as never } } }, ok)
  })
  await t.rejects(async () => { await app.ready() }, { message: /route POST \/token: config\.pace\.spend must be 'accepted', 'rejected' or 'every', got "later"/ })
})

t.test('one name declared at two rates is a registration error naming the second route', async t => {
  const app = await paced(t)
  app.post('/token', { config: { pace: { name: 'clients', perSecond: 10, key: 'client', spend: 'accepted' } } }, ok)
  t.throws(() => app.post('/introspect', { config: { pace: { name: 'clients', perSecond: 20, key: 'client', spend: 'accepted' } } }, ok), {
    name: 'TypeError',
    message: 'exchangepace: route POST /introspect: pace "clients" is declared with perSecond 10 elsewhere, got perSecond 20'
  })
  app.post('/failures', { config: { pace: { name: 'failures', limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' } } }, ok)
  t.throws(() => app.post('/other-failures', { config: { pace: { name: 'failures', limit: 10, window: 60, key: ['client', 'source'], spend: 'rejected' } } }, ok), {
    message: 'exchangepace: route POST /other-failures: pace "failures" is declared with limit 10 per window 600 elsewhere, got limit 10 per window 60'
  })
  app.post('/same-failures', { config: { pace: { name: 'failures', limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' } } }, ok)
  app.post('/per-second', { config: { pace: { name: 'clients', limit: 10, window: 1, key: 'client', spend: 'accepted' } } }, ok)
  t.same(app.pace.names(), ['clients', 'failures'], 'the same bucket, written either way, is the same pace')
})

t.test('one name declared for two kinds of key is a registration error', async t => {
  const cases: Array<[PaceRouteOptions['key'], PaceRouteOptions['key'], string]> = [
    ['client', 'source', 'keyed by client elsewhere, got key source'],
    ['source', () => 'x', 'keyed by source elsewhere, got key function'],
    [() => 'x', 'client', 'keyed by function elsewhere, got key client'],
    [['client', 'source'], 'client', 'keyed by client+source elsewhere, got key client']
  ]
  for (const [first, second, message] of cases) {
    const app = await paced(t)
    app.post('/a', { config: { pace: { name: 'shared', perSecond: 10, key: first, spend: 'every' } } }, ok)
    t.throws(() => app.post('/b', { config: { pace: { name: 'shared', perSecond: 10, key: second, spend: 'every' } } }, ok), {
      message: `exchangepace: route POST /b: pace "shared" is ${message}`
    })
  }
})

t.test('two custom key functions may share a name: both are functions', async t => {
  const app = await paced(t)
  app.post('/a', { config: { pace: { name: 'tenants', perSecond: 10, key: () => 'a', spend: 'every' } } }, ok)
  app.post('/b', { config: { pace: { name: 'tenants', perSecond: 10, key: () => 'b', spend: 'accepted' } } }, ok)
  await app.ready()
  t.same(app.pace.names(), ['tenants'])
})

t.test('two paces of one route may not share a name', async t => {
  const app = await paced(t)
  t.throws(() => app.post('/token', {
    config: {
      pace: [
        { name: 'x', perSecond: 10, key: 'client', spend: 'accepted' },
        { name: 'x', perSecond: 10, key: 'source', spend: 'every' }
      ]
    }
  }, ok), { message: 'exchangepace: route POST /token: config.pace must be paces with distinct names (two are named "x"), got "x"' })
  t.throws(() => app.post('/token', {
    config: {
      pace: [
        { perSecond: 10, key: 'client', spend: 'accepted' },
        { perSecond: 20, key: 'client', spend: 'accepted' }
      ]
    }
  }, ok), { message: 'exchangepace: route POST /token: config.pace must be paces with distinct names (two are named "/token#client"), got "/token#client"' }, 'two default names collide too')
})

t.test('default names: the URL for one pace, the URL and the key kind for several', async t => {
  const app = await build(t, {}, app => {
    app.post('/one', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, ok)
    app.post('/one-in-array', { config: { pace: [{ perSecond: 1, key: 'source', spend: 'every' }] } }, ok)
    app.post('/token', {
      config: {
        pace: [
          { perSecond: 10, key: 'client', spend: 'accepted' },
          { perSecond: 50, key: 'source', spend: 'every' },
          { perSecond: 5, key: () => undefined, spend: 'accepted' },
          { name: 'named', perSecond: 2, key: 'source', spend: 'accepted' }
        ]
      }
    }, ok)
    app.register(async function prefixed (app) {
      app.get('/authorize', { config: { pace: { perSecond: 3, key: 'source', spend: 'every' } } }, ok)
    }, { prefix: '/oauth' })
  })
  t.same(app.pace.names().sort(), ['/oauth/authorize', '/one', '/one-in-array', '/token#client', '/token#key', '/token#source', 'named'])
  t.same(['/token#client', '/token#source', '/token#key', 'named'].map(name => app.pace.get(name)!.perSecond), [10, 50, 5, 2])
})

t.test('an array config reserves from every pace of the route', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: {
        pace: [
          { perSecond: 3, key: 'client', spend: 'accepted' },
          { perSecond: 5, key: 'source', spend: 'every' }
        ]
      }
    }, async (request) => request.pace.held.map(({ name, key, spend }) => ({ name, key, spend })))
  })
  const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'c1']) })
  t.same(response.json(), [
    { name: '/token#source', key: '127.0.0.1', spend: 'every' },
    { name: '/token#client', key: 'c1', spend: 'accepted' }
  ], 'the source pace reserves in onRequest, the client pace in preHandler')
  const statuses: number[] = []
  for (let i = 0; i < 5; i++) statuses.push((await app.inject({ method: 'POST', url: '/token', ...form(['client_id', `c${i % 2 === 0 ? 2 : 3}`]) })).statusCode)
  t.same(statuses, [200, 200, 200, 200, 429], 'the source ceiling of 5 stops the fifth request whatever the client')
})

t.test('GET, its automatic HEAD and POST of one URL share one pace', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    const config = { pace: { perSecond: 3, key: 'source', spend: 'every' } as const }
    app.get('/authorize', { config }, ok)
    app.post('/authorize', { config }, ok)
  })
  t.same(app.pace.names(), ['/authorize'])
  const statuses = [
    (await app.inject({ method: 'GET', url: '/authorize' })).statusCode,
    (await app.inject({ method: 'HEAD', url: '/authorize' })).statusCode,
    (await app.inject({ method: 'POST', url: '/authorize' })).statusCode,
    (await app.inject({ method: 'GET', url: '/authorize' })).statusCode
  ]
  t.same(statuses, [200, 200, 200, 429])
  t.equal(app.pace.get('/authorize')!.size, 1)
})

t.test('a route at "/" under a prefix keeps one pace, named by the prefix, with and without the trailing slash, HEADs included', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.register(async function authorize (app) {
      app.get('/', { config: { pace: { perSecond: 1, key: 'source', spend: 'every' } } }, ok)
    }, { prefix: '/authorize' })
  })
  t.same(app.pace.names(), ['/authorize'])
  const statuses: number[] = []
  for (const [method, url] of [['GET', '/authorize'], ['GET', '/authorize/'], ['HEAD', '/authorize'], ['HEAD', '/authorize/']] as const) {
    statuses.push((await app.inject({ method, url })).statusCode)
  }
  t.same(statuses, [200, 429, 429, 429], 'one unit a second, whichever of the four asks')
})

t.test('with prefixTrailingSlash "slash", a route at "/" under a prefix keeps its own URL: a root route at the prefix is another route', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, ok)
    app.register(async function authorize (app) {
      app.get('/', { prefixTrailingSlash: 'slash', config: { pace: { perSecond: 1, key: 'source', spend: 'every' } } }, ok)
    }, { prefix: '/authorize' })
  })
  t.same(app.pace.names(), ['/authorize', '/authorize/'])
})

t.test('a HEAD request spends once, not once per derived route', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, ok)
  })
  const head = await app.inject({ method: 'HEAD', url: '/authorize' })
  t.equal(head.statusCode, 200)
  t.equal(head.headers.ratelimit, '"/authorize";r=1;t=1')
})

t.test('the plugin is registered once, under its name, for Fastify 5', async t => {
  const app = await build(t, {}, () => {})
  t.ok(app.hasPlugin('exchangepace'))
  t.ok(app.hasDecorator('pace'))
  t.ok(app.hasRequestDecorator('pace'))
})

t.test('an option of a route\'s pace set to undefined is as good as missing, whatever its name', async t => {
  const app = await paced(t)
  app.post('/token', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted', name: undefined, burst: undefined } as PaceRouteOptions } }, ok)
  await app.ready()
  t.ok(app.pace.get('/token'), 'the default name')
})

/** An app whose log lines at error and above are kept, as objects. */
function loggedApp (tt: TapTest): { app: FastifyInstance, errors: Array<Record<string, unknown>> } {
  const errors: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { errors.push(JSON.parse(line)) } } } })
  tt.teardown(() => app.close())
  return { app, errors }
}

t.test('a route declaring config.pace added before the plugin loaded is never served: 500, and its route logged once', async t => {
  const { app, errors } = loggedApp(t)
  let ran = 0
  let handled: Error | null = null
  app.setErrorHandler((error, _request, reply) => { handled = error; return reply.code(500).send({ error: 'server_error' }) })
  app.register(exchangePace) // not awaited: the routes below are added before it loads
  app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, async () => { ran++; return { ok: true } })
  app.get('/plain', async () => 'plain')
  await app.ready()
  const token = () => app.inject({ method: 'POST', url: '/token', payload: { client_id: 'c' } })
  t.same([(await token()).statusCode, (await token()).statusCode], [500, 500], 'neither request served, rate or no rate')
  t.equal(ran, 0, 'the handler never ran')
  t.match(handled, { message: /^exchangepace: route POST \/token declares config.pace but was added before exchangepace loaded, so it is not paced/ }, 'the app\'s error handler is told why')
  t.same(errors.filter(line => line.route === 'POST /token').length, 1, 'logged at error once, naming the route')
  t.equal((await app.inject('/plain')).statusCode, 200, 'a route without a pace is served as ever')
  t.same(app.pace.names(), [])
})

t.test('routes added before the plugin loaded, none of them paced: they and the later paced routes are served as ever', async t => {
  const { app, errors } = loggedApp(t)
  app.get('/early', async () => 'early')
  await app.register(exchangePace)
  app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, ok)
  await app.ready()
  t.equal((await app.inject('/early')).statusCode, 200)
  const token = () => app.inject({ method: 'POST', url: '/token', payload: { client_id: 'c' } })
  t.same([(await token()).statusCode, (await token()).statusCode], [200, 429], 'the paced route added after it is paced')
  t.same(errors, [])
})

t.test('registered before any route, the plugin adds no hook to the routes it does not pace', async t => {
  for (const early of [false, true]) {
    const app = Fastify()
    t.teardown(() => app.close())
    if (early) app.get('/early', ok)
    await app.register(exchangePace)
    app.get('/plain', ok)
    await app.ready()
    const hooks = app.printRoutes({ includeHooks: true, commonPrefix: false })
    t.equal(hooks.includes('refuseUnseenRoute'), early, early ? 'a route was there before it: the guard is added' : 'no route before it: no hook at all')
  }
})
