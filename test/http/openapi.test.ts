import t from 'tap'
import { buildServer } from '../../examples/server.js'

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'

/**
 * The example server's OpenAPI document, read back the way a client of the API would: every paced
 * route states its rate, its key, that the rate is per replica, and the 429 it may answer.
 */

interface Operation {
  description: string
  responses: Record<string, { description: string, content?: Record<string, { schema: { properties?: Record<string, unknown> } }> }>
  'x-exchangepace'?: { scope: string, paces: Array<{ name: string, perSecond: number, limit: number, window: number, key: string, spend: string }> }
}

/** The example server on a clock that never moves, and its document; closed when `tt` ends. */
async function openapi (tt: typeof t) {
  const app = buildServer({ now: () => 0 })
  tt.teardown(() => app.close())
  const response = await app.inject({ method: 'GET', url: '/openapi.json' })
  tt.equal(response.statusCode, 200)
  return { app, spec: response.json() as { paths: Record<string, Record<string, Operation>> } }
}

t.test('the token route states its five paces, their keys, and that they are per replica', async t => {
  const { spec } = await openapi(t)
  const token = spec.paths['/token'].post
  t.match(token.description, /^Issues access tokens for the client_credentials grant/, 'the route keeps its own description first')
  t.match(token.description, `5 requests per second per declared client id, or the client's registered rate except for grant_type ${DEVICE_GRANT} (rejected exchanges are refunded)`)
  t.match(token.description, '1 request per 5 seconds per device code (every request counts)')
  t.match(token.description, '50 requests per second per source address (every request counts)')
  t.match(token.description, '5 failed client authentications per hour per declared client id and source address (accepted exchanges are refunded)')
  t.match(token.description, '100 failed client authentications per day per source address (accepted exchanges are refunded)')
  t.match(token.description, 'per replica')
  t.same(token['x-exchangepace'], {
    scope: 'per replica',
    paces: [
      { name: '/token#device_code', perSecond: 0.2, limit: 1, window: 5, key: 'device code', spend: 'every' },
      { name: '/token#client+source:rejected', perSecond: 5 / 3600, limit: 5, window: 3600, key: 'declared client id and source address', spend: 'rejected' },
      { name: '/token#source:rejected', perSecond: 100 / 86400, limit: 100, window: 86400, key: 'source address', spend: 'rejected' },
      { name: '/token#client', perSecond: 5, limit: 5, window: 1, key: 'declared client id', spend: 'accepted', ownRates: true },
      { name: '/token#source', perSecond: 50, limit: 50, window: 1, key: 'source address', spend: 'every' }
    ]
  }, '@fastify/swagger copies the x- key of the route schema onto the operation')
})

t.test('the authorization route states its per-source pace, per replica', async t => {
  const { spec } = await openapi(t)
  const authorize = spec.paths['/authorize'].get
  t.match(authorize.description, /^Starts the authorization code flow/)
  t.match(authorize.description, '10 requests per second per source address (every request counts)')
  t.match(authorize.description, 'per replica')
  t.same(authorize['x-exchangepace'], {
    scope: 'per replica',
    paces: [{ name: '/authorize', perSecond: 10, limit: 10, window: 1, key: 'source address', spend: 'every' }]
  })
})

t.test('every paced route documents the 429 beside its own responses', async t => {
  const { spec } = await openapi(t)
  const routes = [
    ['/token', 'post', ['200', '400', '401']],
    ['/authorize', 'get', ['302', '400']],
    ['/par', 'post', ['201', '400', '401']],
    ['/introspect', 'post', ['200', '401', '403']],
    ['/revoke', 'post', ['200', '400', '401']],
    ['/device_authorization', 'post', ['200', '400', '401']],
    ['/device', 'post', ['400']]
  ] as const
  for (const [path, method, own] of routes) {
    const responses = spec.paths[path][method].responses
    t.same(Object.keys(responses).sort(), [...own, '429'].sort(), `${path} keeps its responses and adds 429`)
    t.match(responses['429'].description, /Too many requests.*per replica.*Retry-After/)
    t.ok(responses['429'].content?.['application/json'].schema.properties?.error, `${path}: the 429 body has an error member`)
  }
})

t.test('the document lists only the API routes', async t => {
  const { spec } = await openapi(t)
  t.same(Object.keys(spec.paths).sort(), ['/authorize', '/device', '/device_authorization', '/introspect', '/par', '/revoke', '/token'])
  t.same(Object.keys(spec.paths['/authorize']), ['get'], 'the HEAD route Fastify adds is not listed')
})

t.test('the 429 the document announces is the one the route answers', async t => {
  const { app } = await openapi(t)
  const basic = `Basic ${Buffer.from('reporting:reporting-secret').toString('base64')}`
  const ask = () => app.inject({
    method: 'POST',
    url: '/token',
    headers: { authorization: basic, 'content-type': 'application/x-www-form-urlencoded' },
    payload: 'grant_type=client_credentials'
  })
  for (let i = 0; i < 5; i++) t.equal((await ask()).statusCode, 200, `token ${i + 1} of 5 at one instant`)
  const refused = await ask()
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['cache-control'], 'no-store')
  t.match(refused.json(), { error: 'temporarily_unavailable', error_description: String })
})
