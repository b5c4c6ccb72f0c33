import t from 'tap'
import type { FastifyInstance, RouteOptions } from 'fastify'
import swagger from '@fastify/swagger'
import { Pace, type PaceBucket, type PaceStore } from '../../lib/index.js'
import { build, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * The per-replica statement in each paced route's schema: a sentence after the route's own
 * description, an `x-exchangepace` extension, and the 429 response, so that OpenAPI tooling shows
 * the rate, the key and its scope.
 */

type Schema = Record<string, unknown> & { description?: string, response?: Record<string, unknown> }

/** Builds the routes and returns every route's final schema by "METHOD url". */
async function schemas (tt: TapTest, routes: (app: FastifyInstance) => void, options: Record<string, unknown> = {}): Promise<{ app: FastifyInstance, seen: Map<string, Schema | undefined> }> {
  const seen = new Map<string, Schema | undefined>()
  const app = await build(tt, options, app => {
    app.addHook('onRoute', (route: RouteOptions) => { seen.set(`${String(route.method)} ${route.url}`, route.schema as Schema | undefined) })
    routes(app)
  })
  return { app, seen }
}

const CLIENT = { perSecond: 10, key: 'client', spend: 'accepted' } as const
const SENTENCE = 'Paced by exchangepace: 10 requests per second per declared client id (rejected exchanges are refunded). Each rate is per replica: N replicas admit up to N times it.'
const DEFAULT_429 = {
  description: 'Too many requests: the pace is spent (per replica). Retry after the Retry-After header, in seconds.',
  type: 'object',
  properties: { error: { type: 'string' }, error_description: { type: 'string' } },
  additionalProperties: true
}

t.test('the sentence follows the route\'s own description', async t => {
  const { seen } = await schemas(t, app => {
    app.post('/token', { config: { pace: CLIENT }, schema: { description: 'Issues tokens.' } }, async () => ({}))
  })
  t.equal(seen.get('POST /token')!.description, `Issues tokens. ${SENTENCE}`)
})

t.test('without a description of its own, or with an empty one, the route gets the sentence alone', async t => {
  const { seen } = await schemas(t, app => {
    app.post('/none', { config: { pace: CLIENT } }, async () => ({}))
    app.post('/empty', { config: { pace: CLIENT }, schema: { description: '' } }, async () => ({}))
    app.post('/other', { config: { pace: CLIENT }, schema: { summary: 'Other' } }, async () => ({}))
  })
  t.equal(seen.get('POST /none')!.description, SENTENCE)
  t.equal(seen.get('POST /empty')!.description, SENTENCE)
  t.equal(seen.get('POST /other')!.description, SENTENCE)
  t.equal(seen.get('POST /other')!.summary, 'Other', 'the rest of the schema is kept')
})

t.test('several paces: one clause each, in order, with the key and the spend', async t => {
  const { seen } = await schemas(t, app => {
    app.post('/token', {
      config: {
        pace: [
          CLIENT,
          { perSecond: 50, key: 'source', spend: 'every' },
          { name: 'tenants', perSecond: 2.5, key: () => 'x', spend: 'accepted' }
        ]
      }
    }, async () => ({}))
  })
  const schema = seen.get('POST /token')!
  t.equal(schema.description, 'Paced by exchangepace: 10 requests per second per declared client id (rejected exchanges are refunded); ' +
    '50 requests per second per source address (every request counts); 2.5 requests per second per custom key (rejected exchanges are refunded). ' +
    'Each rate is per replica: N replicas admit up to N times it.')
  t.same(schema['x-exchangepace'], {
    scope: 'per replica',
    paces: [
      { name: '/token#client', perSecond: 10, limit: 10, window: 1, key: 'declared client id', spend: 'accepted' },
      { name: '/token#source', perSecond: 50, limit: 50, window: 1, key: 'source address', spend: 'every' },
      { name: 'tenants', perSecond: 2.5, limit: 2.5, window: 1, key: 'custom key', spend: 'accepted' }
    ]
  })
})

t.test('the 429 response is added beside the route\'s own responses', async t => {
  const { seen } = await schemas(t, app => {
    app.post('/token', {
      config: { pace: CLIENT },
      schema: { response: { 200: { type: 'object', properties: { access_token: { type: 'string' } } } } }
    }, async () => ({}))
    app.post('/bare', { config: { pace: CLIENT } }, async () => ({}))
  })
  t.same(seen.get('POST /token')!.response, {
    200: { type: 'object', properties: { access_token: { type: 'string' } } },
    429: DEFAULT_429
  })
  t.same(seen.get('POST /bare')!.response, { 429: DEFAULT_429 })
})

t.test('a route that documents its own 429 keeps it', async t => {
  const own = { description: 'Slow down.', type: 'object', properties: { error: { type: 'string', enum: ['slow_down'] } } }
  const { seen } = await schemas(t, app => {
    app.post('/token', { config: { pace: CLIENT }, schema: { response: { 429: own } } }, async () => ({}))
  })
  t.same(seen.get('POST /token')!.response, { 429: own })
})

t.test('the route\'s own schema object is not modified', async t => {
  const schema = { description: 'Mine.', response: { 200: { type: 'object' } } }
  const frozen = JSON.stringify(schema)
  await schemas(t, app => {
    app.post('/token', { config: { pace: CLIENT }, schema }, async () => ({}))
  })
  t.equal(JSON.stringify(schema), frozen)
})

t.test('the HEAD route Fastify derives from a GET gets the sentence once, not twice', async t => {
  const { seen } = await schemas(t, app => {
    app.get('/authorize', { config: { pace: { perSecond: 3, key: 'source', spend: 'every' } }, schema: { description: 'Starts the flow.' } }, async () => ({}))
  })
  const sentence = 'Paced by exchangepace: 3 requests per second per source address (every request counts). Each rate is per replica: N replicas admit up to N times it.'
  t.equal(seen.get('GET /authorize')!.description, `Starts the flow. ${sentence}`)
  t.equal(seen.get('HEAD /authorize')!.description, `Starts the flow. ${sentence}`)
})

t.test('the 429 body is the errorResponseBuilder\'s as built, whatever response schemas the route has', async t => {
  const bodies = [
    { error: 'slow_down', error_description: 'later', extra: 1 },
    [{ error: 'slow_down' }],
    { error: { code: 1 } }
  ]
  for (const body of bodies) {
    const app = await build(t, { now: () => 0, errorResponseBuilder: () => body }, app => {
      app.get('/authorize', {
        config: { pace: { perSecond: 1, key: 'source', spend: 'every' } },
        schema: { response: { 200: { type: 'object', properties: { ok: { type: 'boolean' } } }, '4xx': { type: 'object', properties: { error: { type: 'string' } } } } }
      }, async () => ({ ok: true, hidden: 'not in the 200 schema' }))
    })
    t.same((await app.inject('/authorize')).json(), { ok: true }, 'the route\'s own answers go through its schema')
    const refused = await app.inject('/authorize')
    t.equal(refused.statusCode, 429)
    t.equal(refused.headers['content-type'], 'application/json; charset=utf-8')
    t.equal(refused.body, JSON.stringify(body))
  }
})

/** A serializer compiler like a Zod type provider's: it refuses any schema that is not its own kind. */
const zodLike = ({ schema }: { schema: unknown }) => {
  if ((schema as { zod?: unknown }).zod !== true) throw new Error('Invalid schema passed')
  return (data: unknown) => JSON.stringify(data)
}

t.test('a route under a serializer compiler of the app\'s own gets no 429 schema, and starts', async t => {
  for (const where of ['instance', 'route'] as const) {
    const app = await build(t, { now: () => 0 }, app => {
      app.register(async function routes (app) {
        if (where === 'instance') app.setSerializerCompiler(zodLike)
        app.addHook('onRoute', route => { t.equal(route.schema?.response, undefined, `${where}: no response schema added`) })
        app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } }, ...(where === 'route' ? { serializerCompiler: zodLike } : {}) }, async () => 'ok')
      })
    })
    const send = () => app.inject({ method: 'POST', url: '/token', payload: 'client_id=c', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    t.equal((await send()).statusCode, 200, `${where}: the app started`)
    const refused = await send()
    t.equal(refused.statusCode, 429)
    t.equal(refused.json().error, 'temporarily_unavailable', `${where}: the OAuth body`)
  }
})

t.test('with a shared store the sentence and the extension state the store\'s scope', async t => {
  const store: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (_name: string, _rate: PaceBucket, local: Pace) => ({ reserve: async (key: string) => local.reserve(key) })
  }
  const { seen } = await schemas(t, app => {
    app.post('/token', { config: { pace: CLIENT } }, async () => ({}))
  }, { store })
  const schema = seen.get('POST /token')!
  t.equal(schema.description, 'Paced by exchangepace: 10 requests per second per declared client id (rejected exchanges are refunded). ' +
    'Each rate is shared by all replicas; while the store is unavailable, it holds per replica.')
  t.equal((schema['x-exchangepace'] as { scope: string }).scope, 'shared by all replicas')
  t.equal((schema.response as Record<string, { description: string }>)[429].description,
    'Too many requests: the pace is spent (shared by all replicas). Retry after the Retry-After header, in seconds.')
})

t.test('@fastify/swagger shows the sentence, the extension and the 429', async t => {
  const app = await build(t, {}, app => {
    app.register(swagger, { openapi: { info: { title: 'test', version: '1' } } })
    app.register(async function routes (app) {
      app.post('/token', { config: { pace: CLIENT }, schema: { description: 'Issues tokens.', response: { 200: { type: 'object' } } } }, async () => ({}))
      app.get('/plain', { schema: { description: 'Not paced.' } }, async () => ({}))
    })
  })
  const spec = app.swagger() as unknown as { paths: Record<string, Record<string, Record<string, unknown> & { responses: Record<string, unknown> }>> }
  const token = spec.paths['/token'].post
  t.equal(token.description, `Issues tokens. ${SENTENCE}`)
  t.same(token['x-exchangepace'], { scope: 'per replica', paces: [{ name: '/token', perSecond: 10, limit: 10, window: 1, key: 'declared client id', spend: 'accepted' }] })
  t.same(Object.keys(token.responses).sort(), ['200', '429'])
  t.equal(spec.paths['/plain'].get.description, 'Not paced.', 'an unpaced route is left as it is')
  t.notOk('x-exchangepace' in spec.paths['/plain'].get)
})
