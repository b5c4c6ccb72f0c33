import t from 'tap'
import { rmSync } from 'node:fs'
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import exchangePace, { InvalidRequest, type PaceRouteOptions } from '../../lib/index.js'
import { basic, build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Keys through HTTP: the declared client id (Basic, body client_id, client_assertion sub), the
 * source address, custom key functions; every malformed declaration is a 400 invalid_request that
 * reserves and stores nothing.
 */

const b64url = (text: string): string => Buffer.from(text).toString('base64url')
const jwt = (claims: unknown): string => `${b64url('{"alg":"RS256"}')}.${b64url(JSON.stringify(claims))}.c2ln`

/** A token route paced per client at 10/s whose handler echoes what the request holds. */
async function tokenApp (tt: TapTest, options: Record<string, unknown> = {}, pace: PaceRouteOptions | PaceRouteOptions[] = { perSecond: 10, key: 'client', spend: 'accepted' }): Promise<{ app: FastifyInstance, handled: () => number }> {
  let handled = 0
  const app = await build(tt, { now: () => 0, ...options }, app => {
    app.post('/token', { config: { pace } }, async (request) => {
      handled++
      return { keys: request.pace.held.map(held => held.key) }
    })
  })
  return { app, handled: () => handled }
}

interface Case {
  name: string
  authorization?: string
  /** A form body as pairs, or a JSON body as an object. */
  body?: Array<[string, string]> | Record<string, unknown>
  description: string
}

function send (app: FastifyInstance, { authorization, body }: Pick<Case, 'authorization' | 'body'>) {
  const auth = authorization === undefined ? {} : { authorization }
  if (body === undefined || Array.isArray(body)) {
    const { payload, headers } = form(...(body as Array<[string, string]> | undefined ?? []))
    return app.inject({ method: 'POST', url: '/token', payload, headers: { ...headers, ...auth } })
  }
  return app.inject({ method: 'POST', url: '/token', payload: JSON.stringify(body), headers: { 'content-type': 'application/json', ...auth } })
}

const BAD: Case[] = [
  { name: 'Basic and body name different clients', authorization: basic('alice', 's'), body: [['client_id', 'bob']], description: 'the request declares conflicting client ids' },
  { name: 'body and assertion name different clients', body: [['client_id', 'alice'], ['client_assertion', jwt({ sub: 'bob' })]], description: 'the request declares conflicting client ids' },
  { name: 'Basic and assertion name different clients', authorization: basic('alice', 's'), body: [['client_assertion', jwt({ sub: 'bob' })]], description: 'the request declares conflicting client ids' },
  { name: 'client_id repeated', body: [['client_id', 'alice'], ['client_id', 'alice']], description: 'client_id is repeated' },
  { name: 'client_assertion_type repeated', body: [['client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'], ['client_assertion_type', 'x'], ['client_assertion', jwt({ sub: 'a' })]], description: 'client_assertion_type is repeated' },
  { name: 'client_assertion repeated', body: [['client_assertion', jwt({ sub: 'a' })], ['client_assertion', jwt({ sub: 'a' })]], description: 'client_assertion is repeated' },
  { name: 'client_id a number (JSON)', body: { client_id: 42 }, description: 'client_id must be a string' },
  { name: 'client_id null (JSON)', body: { client_id: null }, description: 'client_id must be a string' },
  { name: 'client_id an array (JSON)', body: { client_id: ['alice'] }, description: 'client_id is repeated' },
  { name: 'client_id an object (JSON)', body: { client_id: { id: 'alice' } }, description: 'client_id must be a string' },
  { name: 'client_id longer than 255', body: [['client_id', 'x'.repeat(256)]], description: 'client_id is longer than 255 characters' },
  { name: 'client_id with a control character', body: [['client_id', 'ali\u0000ce']], description: 'client_id contains non-printable characters' },
  { name: 'client_id with a C1 control character', body: [['client_id', 'ali\u0085ce']], description: 'client_id contains non-printable characters' },
  { name: 'client_id with DEL', body: [['client_id', 'ali\u007fce']], description: 'client_id contains non-printable characters' },
  { name: 'Basic not base64', authorization: 'Basic !!!!', description: 'Basic credentials are not valid base64' },
  { name: 'Basic base64 without padding', authorization: `Basic ${Buffer.from('alice:s').toString('base64').replace(/=+$/, '')}`, description: 'Basic credentials are not valid base64' },
  { name: 'Basic with nothing after it', authorization: 'Basic', description: 'Basic credentials are not valid base64' },
  { name: 'Basic with only spaces after it', authorization: 'Basic   ', description: 'Basic credentials are not valid base64' },
  { name: 'Basic without a colon', authorization: `Basic ${Buffer.from('alice').toString('base64')}`, description: 'Basic credentials lack the ":" between client id and secret' },
  { name: 'Basic with a bad percent-encoding', authorization: `Basic ${Buffer.from('al%zzice:s').toString('base64')}`, description: 'the Basic client id has a malformed percent-encoding' },
  { name: 'Basic with an empty id', authorization: `Basic ${Buffer.from(':secret').toString('base64')}`, description: 'the Basic client id must not be empty' },
  { name: 'Basic with an encoded control character', authorization: `Basic ${Buffer.from('al%01ice:s').toString('base64')}`, description: 'the Basic client id contains non-printable characters' },
  { name: 'Basic id longer than 255', authorization: basic('y'.repeat(256), 's'), description: 'the Basic client id is longer than 255 characters' },
  { name: 'assertion not a JWT', body: [['client_assertion', 'not-a-jwt']], description: 'client_assertion is not a JWT' },
  { name: 'assertion with a non-base64url payload', body: [['client_assertion', 'a.b+c.d']], description: 'client_assertion is not a JWT' },
  { name: 'assertion payload not JSON', body: [['client_assertion', `a.${b64url('sub=alice')}.c`]], description: 'client_assertion has an unreadable payload' },
  { name: 'assertion without sub', body: [['client_assertion', jwt({ iss: 'alice' })]], description: 'client_assertion has no string sub claim' },
  { name: 'assertion with a numeric sub', body: [['client_assertion', jwt({ sub: 7 })]], description: 'client_assertion has no string sub claim' },
  { name: 'assertion payload null', body: [['client_assertion', jwt(null)]], description: 'client_assertion has no string sub claim' },
  { name: 'assertion not a string (JSON)', body: { client_assertion: 5 }, description: 'client_assertion must be a single string' },
  { name: 'assertion sub longer than 255', body: [['client_assertion', jwt({ sub: 'z'.repeat(256) })]], description: 'the client_assertion sub is longer than 255 characters' }
]

t.test('every malformed declaration is a 400 invalid_request, not cached, that reserves and stores nothing', async t => {
  const { app, handled } = await tokenApp(t)
  for (const bad of BAD) {
    const response = await send(app, bad)
    t.equal(response.statusCode, 400, bad.name)
    t.same(response.json(), { error: 'invalid_request', error_description: bad.description }, bad.name)
    t.equal(response.headers['cache-control'], 'no-store', bad.name)
    t.equal(response.headers.pragma, 'no-cache', bad.name)
    t.equal(response.headers.ratelimit, undefined, bad.name)
  }
  t.equal(handled(), 0, 'the handler never ran')
  t.equal(app.pace.get('/token')!.size, 0, 'nothing stored')
})

t.test('the 400 keeps its OAuth body whatever response schema the route declares for its own errors', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/stripped', {
      config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } },
      schema: { response: { 400: { type: 'object', properties: { message: { type: 'string' } } } } }
    }, async () => ({ ok: true }))
    app.post('/required', {
      config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } },
      schema: { response: { '4xx': { type: 'object', required: ['statusCode'], properties: { statusCode: { type: 'number' } } } } }
    }, async () => ({ ok: true }))
  })
  for (const url of ['/stripped', '/required']) {
    const response = await app.inject({ method: 'POST', url, ...form(['client_id', 'a'], ['client_id', 'b']) })
    t.equal(response.statusCode, 400, url)
    t.equal(response.headers['content-type'], 'application/json; charset=utf-8', url)
    t.same(response.json(), { error: 'invalid_request', error_description: 'client_id is repeated' }, url)
  }
})

t.test('a malformed declaration gives back what an earlier pace of the same hook took', async t => {
  const { app } = await tokenApp(t, {}, [
    { name: 'tenant', perSecond: 1, key: () => 'tenant-a', spend: 'accepted' },
    { name: 'client', perSecond: 10, key: 'client', spend: 'accepted' }
  ])
  for (let i = 0; i < 3; i++) t.equal((await send(app, { body: [['client_id', 'a'], ['client_id', 'b']] })).statusCode, 400)
  t.equal(app.pace.get('tenant')!.size, 0)
  t.equal((await send(app, { body: [['client_id', 'a']] })).statusCode, 200, 'the tenant\'s single unit is still there')
})

t.test('maxKeyLength bounds every declared id', async t => {
  const { app } = await tokenApp(t, { maxKeyLength: 8 })
  t.equal((await send(app, { body: [['client_id', '12345678']] })).statusCode, 200)
  const long = await send(app, { body: [['client_id', '123456789']] })
  t.same(long.json(), { error: 'invalid_request', error_description: 'client_id is longer than 8 characters' })
  t.equal((await send(app, { authorization: basic('123456789', 's') })).json().error_description, 'the Basic client id is longer than 8 characters')
})

t.test('the declared id is read from Basic, the body or an assertion, and one value is one key', async t => {
  const { app } = await tokenApp(t)
  const cases: Array<[Pick<Case, 'authorization' | 'body'>, string[]]> = [
    [{ authorization: basic('alice', 's') }, ['alice']],
    [{ authorization: basic('my client!', 's') }, ['my client!']], // '+' and percent-decoding (RFC 6749 2.3.1)
    [{ authorization: `Basic ${Buffer.from('a+b%2Bc:s').toString('base64')}` }, ['a b+c']],
    [{ authorization: `bAsIc ${Buffer.from('alice:s').toString('base64')}` }, ['alice']], // the scheme is case-insensitive
    [{ authorization: basic('alice', 's'), body: [['client_id', 'alice']] }, ['alice']],
    [{ body: [['client_id', 'bob']] }, ['bob']],
    [{ body: { client_id: 'carol' } }, ['carol']],
    [{ body: [['client_assertion', jwt({ sub: 'dave', iss: 'dave' })]] }, ['dave']],
    [{ body: [['client_id', 'erin'], ['client_assertion', jwt({ sub: 'erin' })]] }, ['erin']],
    [{ authorization: 'Bearer abc.def', body: [['client_id', 'frank']] }, ['frank']], // another scheme is not a declaration
    [{ authorization: 'Basicfoo', body: [['client_id', 'gina']] }, ['gina']],
    [{ authorization: `Basic ${Buffer.from('hank:50%off').toString('base64')}` }, ['hank']], // the secret is the handler's to decode
    [{ body: [['client_id', 'ivan'], ['client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer'], ['client_assertion', 'PHNhbWw-']] }, ['ivan']], // SAML: client_id names the client
    [{ body: [['client_id', 'judy'], ['client_assertion', 'eyJhbGciOiJkaXIifQ..aXY.Y2lwaGVy.dGFn']] }, ['judy']], // an encrypted JWT hides its sub
    [{ body: [['grant_type', 'client_credentials']] }, []], // none declared: nothing reserved
    [{}, []],
    // A parameter sent empty counts as absent (RFC 6749 section 3.1).
    [{ body: [['client_id', '']] }, []],
    [{ authorization: basic('kate', 's'), body: [['client_id', '']] }, ['kate']],
    [{ body: [['client_id', 'leo'], ['client_assertion', '']] }, ['leo']],
    [{ body: [['client_assertion_type', ''], ['client_assertion', jwt({ sub: 'mia' })]] }, ['mia']] // as if the type were absent: a JWT
  ]
  for (const [request, keys] of cases) {
    const response = await send(app, request)
    t.equal(response.statusCode, 200, JSON.stringify(request))
    t.same(response.json(), { keys }, JSON.stringify(request))
  }
})

t.test('a request declaring no client id has request.pace, holding nothing, and costs nothing', async t => {
  let seen: unknown
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
      seen = { held: request.pace.held, outcome: request.pace.outcome, settled: request.pace.settled }
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  for (let i = 0; i < 3; i++) t.equal((await app.inject({ method: 'POST', url: '/token', ...form(['grant_type', 'client_credentials']) })).statusCode, 401)
  t.same(seen, { held: [], outcome: 'accepted', settled: false })
  t.equal(app.pace.get('/token')!.size, 0)
})

t.test('a body the form parser does not read (a Buffer) declares nothing but Basic', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.addContentTypeParser('application/octet-stream', { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
    app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, async (request) => request.pace.held.map(h => h.key))
  })
  const headers = { 'content-type': 'application/octet-stream' }
  t.same((await app.inject({ method: 'POST', url: '/token', payload: 'client_id=x', headers })).json(), [])
  t.same((await app.inject({ method: 'POST', url: '/token', payload: 'client_id=x', headers: { ...headers, authorization: basic('alice', 's') } })).json(), ['alice'])
})

t.test('a custom key function: undefined takes nothing, a bad key is a 400, a throw or a value that is no key is a 500', async t => {
  const key = (request: FastifyRequest): string | undefined => {
    const tenant = request.headers['x-tenant']
    if (tenant === 'throw') throw new Error('key store down')
    if (tenant === 'invalid') throw new InvalidRequest('x-tenant is unknown')
    if (tenant === 'number') return 5 as unknown as string
    if (tenant === 'null') return null as unknown as string
    if (tenant === 'object') return { tenant: 'acme' } as unknown as string
    if (tenant === 'promise') return Promise.resolve('acme') as unknown as string
    if (tenant === 'rejected') return Promise.reject(new InvalidRequest('x-tenant is unknown')) as unknown as string
    return tenant as string | undefined
  }
  const lines: Array<Record<string, unknown>> = []
  const app = await build(t, { now: () => 0, maxKeyLength: 10 }, app => {
    app.post('/token', {
      config: {
        pace: [
          { name: 'client', perSecond: 1, key: 'client', spend: 'accepted' },
          { name: 'tenant', perSecond: 5, key, spend: 'accepted' }
        ]
      }
    }, async (request) => request.pace.held.map(h => `${h.name}:${h.key}`))
  }, { logger: capture(lines) })
  const post = (tenant?: string) => app.inject({
    method: 'POST',
    url: '/token',
    payload: 'client_id=alice',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(tenant === undefined ? {} : { 'x-tenant': tenant }) }
  })
  const cases: Array<[string, number, unknown]> = [
    ['', 400, { error: 'invalid_request', error_description: 'the key of pace "tenant" must not be empty' }],
    ['number', 500, undefined],
    ['null', 500, undefined],
    ['object', 500, undefined],
    ['promise', 500, undefined],
    ['rejected', 500, undefined],
    ['a'.repeat(11), 400, { error: 'invalid_request', error_description: 'the key of pace "tenant" is longer than 10 characters' }],
    ['invalid', 400, { error: 'invalid_request', error_description: 'x-tenant is unknown' }],
    ['throw', 500, undefined]
  ]
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
  process.on('unhandledRejection', onUnhandled)
  t.teardown(() => { process.off('unhandledRejection', onUnhandled) })
  for (const [tenant, status, body] of cases) {
    const response = await post(tenant)
    t.equal(response.statusCode, status, tenant)
    if (body !== undefined) t.same(response.json(), body, tenant)
    if (status === 500) t.equal(response.headers.ratelimit, undefined, 'the client unit given back is not shown either')
  }
  const returned = (what: string): string => `exchangepace: route POST /token: the key function of pace "tenant" returned ${what}; it must return a string or undefined`
  t.same(lines.map(line => (line.err as { message: string }).message), [
    returned('a number'),
    returned('null'),
    returned('an object'),
    returned('a Promise (key functions run synchronously: read the key from the request, or resolve it in an earlier hook)'),
    returned('a Promise (key functions run synchronously: read the key from the request, or resolve it in an earlier hook)'),
    'key store down'
  ], 'a value that is no key is logged as the server\'s error, naming the route and the pace')
  await new Promise(resolve => setImmediate(resolve))
  t.same(unhandled, [], 'a Promise that rejects after the 500 is not left unhandled (Node would end the process)')
  t.equal(app.pace.get('client')!.size, 0, 'each failure gave the client unit back')
  t.equal(app.pace.get('tenant')!.size, 0)
  const none = await post()
  t.same(none.json(), ['client:alice'], 'undefined: nothing taken from the tenant pace')
  t.equal(app.pace.get('tenant')!.size, 0)
})

t.test('a custom key with a control character is a 400', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/r', { config: { pace: { perSecond: 1, key: (request) => (request.query as Record<string, string>).k, spend: 'every' } } }, async () => ({ ok: true }))
  })
  const response = await app.inject({ url: '/r?k=a%07b' })
  t.same(response.json(), { error: 'invalid_request', error_description: 'the key of pace "/r" contains non-printable characters' })
})

t.test('source keys: IPv4 as is, IPv4-mapped IPv6 as IPv4, IPv6 grouped by its /64', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async (request) => ({ key: request.pace.held[0].key }))
  })
  const keyOf = async (remoteAddress: string): Promise<string> => (await app.inject({ url: '/authorize', remoteAddress })).json().key
  t.equal(await keyOf('192.0.2.7'), '192.0.2.7')
  t.equal(await keyOf('::ffff:192.0.2.8'), '192.0.2.8')
  t.equal(await keyOf('2001:db8:1:2::1'), '2001:db8:1:2::/64')
  t.equal(await keyOf('2001:db8:1:2:ffff:ffff:ffff:ffff'), '2001:db8:1:2::/64')
  t.equal(await keyOf('2001:db8:1:3::1'), '2001:db8:1:3::/64')
  t.equal(await keyOf('fe80::1%eth0'), 'fe80:0:0:0::/64')
  // Two addresses of one /64 share a bucket of 2: the third request of the /64 is refused.
  const statuses = []
  for (const address of ['2001:db8:9:9::1', '2001:db8:9:9::2', '2001:db8:9:9:abcd::3']) {
    statuses.push((await app.inject({ url: '/authorize', remoteAddress: address })).statusCode)
  }
  t.same(statuses, [200, 200, 429])
  t.equal((await app.inject({ url: '/authorize', remoteAddress: '2001:db8:9:a::1' })).statusCode, 200, 'the next /64 has its own')
})

t.test('ipv6Subnet chooses the grouping prefix', async t => {
  const app = await build(t, { now: () => 0, ipv6Subnet: 48 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async (request) => ({ key: request.pace.held[0].key }))
  })
  t.equal((await app.inject({ url: '/authorize', remoteAddress: '2001:db8:1:2::1' })).json().key, '2001:db8:1::/48')
  t.equal((await app.inject({ url: '/authorize', remoteAddress: '2001:db8:1:ffff::1' })).json().key, '2001:db8:1::/48')
})

/** A Fastify logger writing JSON lines into `lines`. */
function capture (lines: Array<Record<string, unknown>>) {
  return {
    level: 'warn',
    stream: new Writable({ write (chunk, _encoding, done) { lines.push(JSON.parse(String(chunk))); done() } })
  }
}

const TRUST_WARNING = /^exchangepace: trustProxy is true and a route is paced by source/

t.test('trustProxy: true with a source pace warns once, at ready, through Fastify\'s logger', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = await build(t, {}, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async () => ({ ok: true }))
    app.post('/token', { config: { pace: { perSecond: 2, key: 'source', spend: 'accepted' } } }, async () => ({ ok: true }))
  }, { trustProxy: true, logger: capture(lines) })
  const warnings = lines.filter(line => TRUST_WARNING.test(String(line.msg)))
  t.equal(warnings.length, 1)
  t.equal(warnings[0].level, 40)
  await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '203.0.113.9' } })
  t.equal(lines.filter(line => TRUST_WARNING.test(String(line.msg))).length, 1, 'not repeated per request')
})

t.test('under trustProxy: true, a forwarded source that is no valid key is a 400 invalid_request, and spends nothing', async t => {
  let handled = 0
  const app = await build(t, { maxKeyLength: 64 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async () => { handled++; return { ok: true } })
  }, { trustProxy: true })
  for (const forwarded of ['x'.repeat(65), 'proxy-7.internal']) {
    const response = await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': forwarded } })
    if (forwarded.length > 64) {
      t.equal(response.statusCode, 400)
      t.same(response.json(), { error: 'invalid_request', error_description: 'the source address is longer than 64 characters' })
    } else t.equal(response.statusCode, 200, 'a name that is no address is a key like any other')
  }
  t.equal(handled, 1)
  t.equal(app.pace.get('/authorize')!.size, 1, 'only the valid source holds a row')
})

t.test('the plugin registered inside an encapsulated context warns too', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ trustProxy: true, logger: capture(lines) })
  t.teardown(() => app.close())
  app.register(async function oauth (child) {
    await child.register(exchangePace)
    child.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async () => ({ ok: true }))
  })
  await app.ready()
  t.equal(lines.filter(line => TRUST_WARNING.test(String(line.msg))).length, 1)
})

t.test('trustProxy as a hop count with a source pace warns: this Fastify trusts no proxy for a number, so every client behind one shares its address', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = await build(t, {}, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async request => ({ ip: request.ip }))
  }, { trustProxy: 1, logger: capture(lines) } as Record<string, unknown>)
  const warnings = lines.filter(line => /^exchangepace: trustProxy is a hop count and a route is paced by source: Fastify 5\.12\.1 and later trust no proxy/.test(String(line.msg)))
  t.equal(warnings.length, 1)
  t.equal(warnings[0].level, 40)
  const response = await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '203.0.113.9' } })
  t.same(response.json(), { ip: '127.0.0.1' }, 'the forwarded address is not used: what the warning says')
})

t.test('no warning with trustProxy false, by address or by function, or without a source pace', async t => {
  const settings: Array<[Record<string, unknown>, PaceRouteOptions]> = [
    [{}, { perSecond: 2, key: 'source', spend: 'every' }],
    [{ trustProxy: '10.0.0.1' }, { perSecond: 2, key: 'source', spend: 'every' }],
    [{ trustProxy: () => false }, { perSecond: 2, key: 'source', spend: 'every' }],
    [{ trustProxy: true }, { perSecond: 2, key: 'client', spend: 'accepted' }],
    [{ trustProxy: 1 }, { perSecond: 2, key: 'client', spend: 'accepted' }],
    [{ trustProxy: 0 }, { perSecond: 2, key: 'source', spend: 'every' }] // no proxy at all
  ]
  for (const [server, pace] of settings) {
    const lines: Array<Record<string, unknown>> = []
    await build(t, {}, app => {
      app.get('/r', { config: { pace } }, async () => ({ ok: true }))
    }, { ...server, logger: capture(lines) })
    t.equal(lines.filter(line => /^exchangepace: trustProxy/.test(String(line.msg))).length, 0, JSON.stringify(server))
  }
})

t.test('on a Unix socket, where request.ip is undefined, requests share one source key, with one warning', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async (request) => ({ key: request.pace.held[0].key }))
  }, { logger: capture(lines) })
  const path = join(tmpdir(), `exchangepace-test-${process.pid}.sock`)
  rmSync(path, { force: true }) // left by an earlier run that crashed with the same pid
  await app.listen({ path })
  const get = () => new Promise<{ status: number, body: string }>((resolve, reject) => {
    http.get({ socketPath: path, path: '/authorize' }, response => {
      let body = ''
      response.on('data', chunk => { body += String(chunk) })
      response.on('end', () => resolve({ status: response.statusCode!, body }))
    }).on('error', reject)
  })
  const first = await get()
  t.equal(first.status, 200)
  t.same(JSON.parse(first.body), { key: 'unknown' })
  t.equal((await get()).status, 200)
  t.equal((await get()).status, 429, 'the third request in the same instant: one bucket of 2 for all of them')
  const warnings = lines.filter(line => /no source address/.test(String(line.msg)))
  t.equal(warnings.length, 1, 'warned once, not per request')
})

/** An authorize route paced by source at 1/s behind a proxy trusted by address, echoing its key. */
function behindProxy (tt: TapTest): Promise<FastifyInstance> {
  return build(tt, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 1, key: 'source', spend: 'every' } } }, async (request) => ({ key: request.pace.held[0].key }))
  }, { trustProxy: '127.0.0.1' })
}

t.test('with trustProxy, the source is the forwarded address a proxy wrote', async t => {
  const app = await behindProxy(t)
  const response = await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '198.51.100.4' } })
  t.same(response.json(), { key: '198.51.100.4' })
})

t.test('a forwarded address with a port (as some proxies write it) is keyed by the address: a new connection is no new bucket', async t => {
  const app = await behindProxy(t)
  const first = await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '198.51.100.4:50001' } })
  t.same(first.json(), { key: '198.51.100.4' })
  t.equal((await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '198.51.100.4:50002' } })).statusCode, 429)
  t.equal((await app.inject({ url: '/authorize', headers: { 'x-forwarded-for': '[2001:db8:1:2::7]:443' } })).json().key, '2001:db8:1:2::/64')
  t.equal(app.pace.get('/authorize')!.size, 2)
})
