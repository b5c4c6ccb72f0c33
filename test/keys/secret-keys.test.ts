import t from 'tap'
import { createHash } from 'node:crypto'
import Fastify, { LogController, type FastifyInstance } from 'fastify'
import formbody from '@fastify/formbody'
import exchangePace, { RedisStore, secretKey as exported, type PaceEvent, type PaceRouteOptions } from '../../lib/index.js'
import { bearerKey, deviceCodeKey, secretKey } from '../../lib/keys/secrets.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Keys made of secrets: `key: 'device_code'` and `key: 'bearer'`. The secret is hashed before it
 * becomes a key, and only the hash reaches a row, a Redis key, a log line or an event.
 */

const DEVICE_CODE = 'GmRhmhcxhwAzkoEqiMEg_DnyEysNkuNhszIySk9eS'
const TOKEN = 'mF_9.B5f-4.1JqM'

/** The first 32 hex digits (128 bits) of SHA-256, in base64url: computed apart from the code under test. */
const expectedKey = (secret: string): string => Buffer.from(createHash('sha256').update(secret).digest('hex').slice(0, 32), 'hex').toString('base64url')

t.test('a secret key is 128 bits of its SHA-256, base64url, the same on every call', async t => {
  t.equal(secretKey(DEVICE_CODE), expectedKey(DEVICE_CODE))
  t.equal(secretKey(DEVICE_CODE).length, 22)
  t.not(secretKey('a'), secretKey('b'))
  t.equal(exported, secretKey, 'exported for key functions of secrets of the application\'s own')
})

t.test('device_code: read from the body once, as a string; absent or empty takes nothing', async t => {
  t.equal(deviceCodeKey({ device_code: DEVICE_CODE }), secretKey(DEVICE_CODE))
  t.equal(deviceCodeKey({ device_code: '' }), undefined)
  t.equal(deviceCodeKey({}), undefined)
  t.equal(deviceCodeKey(undefined), undefined)
  t.equal(deviceCodeKey(Buffer.from('device_code=x')), undefined)
  t.throws(() => deviceCodeKey({ device_code: ['a', 'b'] }), { name: 'InvalidRequest', message: 'device_code is repeated' })
  t.throws(() => deviceCodeKey({ device_code: 42 }), { name: 'InvalidRequest', message: 'device_code must be a string' })
})

t.test('bearer: the Authorization header or the body access_token, never both', async t => {
  t.equal(bearerKey(`Bearer ${TOKEN}`, undefined), secretKey(TOKEN))
  t.equal(bearerKey(`bearer ${TOKEN}==`, {}), secretKey(`${TOKEN}==`), 'the scheme is case-insensitive; b64token may end in =')
  t.equal(bearerKey(undefined, { access_token: TOKEN }), secretKey(TOKEN))
  t.equal(bearerKey('Basic YTpi', { access_token: TOKEN }), secretKey(TOKEN), 'another scheme is not a bearer token')
  t.equal(bearerKey(undefined, {}), undefined)
  t.equal(bearerKey('Basic YTpi', undefined), undefined)
  t.throws(() => bearerKey('Bearer', undefined), { name: 'InvalidRequest', message: 'the Bearer token is malformed' })
  t.throws(() => bearerKey('Bearer a b', undefined), { name: 'InvalidRequest', message: 'the Bearer token is malformed' })
  t.throws(() => bearerKey(`Bearer ${TOKEN}`, { access_token: TOKEN }), { name: 'InvalidRequest', message: 'the request presents a bearer token in the header and in the body' })
  t.throws(() => bearerKey(undefined, { access_token: [TOKEN, TOKEN] }), { name: 'InvalidRequest', message: 'access_token is repeated' })
})

interface Seen {
  app: FastifyInstance
  events: PaceEvent[]
  /** Every log line, as written. */
  log: string[]
}

/** An app with `pace` on POST /poll and GET /userinfo, its events and its log, at time 0. */
async function app (tt: TapTest, pace: PaceRouteOptions | PaceRouteOptions[], options: Record<string, unknown> = {}): Promise<Seen> {
  const events: PaceEvent[] = []
  const log: string[] = []
  const fastify = Fastify({
    logger: { level: 'debug', stream: { write: (line: string) => { log.push(line) } } },
    logController: new LogController({ disableRequestLogging: true })
  })
  tt.teardown(() => fastify.close())
  await fastify.register(formbody)
  await fastify.register(exchangePace, { now: () => 0, onEvent: event => { events.push(event) }, ...options })
  const handler = async (request: { pace: { held: Array<{ key: string }> } | null }) => ({ keys: request.pace.held.map(held => held.key) })
  fastify.post('/poll', { config: { pace } }, handler)
  fastify.route({ method: ['GET', 'POST'], url: '/userinfo', config: { pace }, handler })
  await fastify.ready()
  return { app: fastify, events, log }
}

const poll = (app: FastifyInstance, code: string) => app.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'urn:ietf:params:oauth:grant-type:device_code'], ['device_code', code]) })

t.test('a device code keys its own bucket by its hash; the code is in no row, event or log line', async t => {
  const { app: fastify, events, log } = await app(t, { limit: 1, window: 5, key: 'device_code', spend: 'every' })
  const first = await poll(fastify, DEVICE_CODE)
  t.equal(first.statusCode, 200)
  t.same(first.json().keys, [secretKey(DEVICE_CODE)], 'the ticket holds the hash')
  t.equal(first.headers.ratelimit, '"/poll";r=0;t=5', "the device's own quota is shown to it")
  t.equal((await poll(fastify, 'another-device')).statusCode, 200, 'another code, another bucket')
  const second = await poll(fastify, DEVICE_CODE)
  t.equal(second.statusCode, 429)
  t.equal(second.headers['retry-after'], '5')
  t.same(events.map(event => [event.type, event.keyKind, event.key]), [['refused', 'device_code', secretKey(DEVICE_CODE)]])
  t.ok(log.some(line => line.includes(secretKey(DEVICE_CODE))), 'the refusal is logged with the hash')
  t.notOk(log.some(line => line.includes(DEVICE_CODE)), 'and never with the code')
  t.equal(fastify.pace.get('/poll')!.size, 2)
  const noCode = await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'client_credentials']) })
  t.same(noCode.json().keys, [], 'a request without a device_code takes nothing')
})

t.test('a bearer token keys by its hash, from the header or the body; malformed ones are 400', async t => {
  const { app: fastify, events, log } = await app(t, [
    { perSecond: 2, key: 'bearer', spend: 'accepted' },
    { perSecond: 100, key: 'source', spend: 'every' }
  ])
  const viaHeader = await fastify.inject({ method: 'GET', url: '/userinfo', headers: { authorization: `Bearer ${TOKEN}` } })
  t.same(viaHeader.json().keys, ['127.0.0.1', secretKey(TOKEN)])
  t.equal(viaHeader.headers['ratelimit-policy'], '"/userinfo#source";q=100;w=1, "/userinfo#bearer";q=2;w=1')
  const viaBody = await fastify.inject({ method: 'POST', url: '/userinfo', ...form(['access_token', TOKEN]) })
  t.same(viaBody.json().keys, ['127.0.0.1', secretKey(TOKEN)], 'one token, one bucket, whichever way it comes')
  t.equal((await fastify.inject({ method: 'GET', url: '/userinfo', headers: { authorization: `Bearer ${TOKEN}` } })).statusCode, 429)
  const both = await fastify.inject({ method: 'POST', url: '/userinfo', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/x-www-form-urlencoded' }, payload: `access_token=${TOKEN}` })
  t.equal(both.statusCode, 400)
  t.same(both.json(), { error: 'invalid_request', error_description: 'the request presents a bearer token in the header and in the body' })
  t.same(events.map(event => [event.type, event.key]), [['refused', secretKey(TOKEN)], ['invalid', undefined]])
  t.notOk(log.some(line => line.includes(TOKEN)), 'the token is in no log line')
})

t.test('exceptGrantTypes: a pace takes nothing from requests of the grant types it excepts', async t => {
  const { app: fastify } = await app(t, [
    { perSecond: 5, key: 'client', spend: 'accepted', exceptGrantTypes: ['urn:ietf:params:oauth:grant-type:device_code'] },
    { limit: 1, window: 5, key: 'device_code', spend: 'every' },
    { perSecond: 50, key: 'source', spend: 'every', exceptGrantTypes: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'], name: 'grants-per-source' }
  ])
  const credentials = await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'client_credentials'], ['client_id', 'tv']) })
  t.same(credentials.json().keys, ['tv', '127.0.0.1'])
  const device = await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'urn:ietf:params:oauth:grant-type:device_code'], ['client_id', 'tv'], ['device_code', DEVICE_CODE]) })
  t.same(device.json().keys, [secretKey(DEVICE_CODE)], 'the device poll spends neither the client nor the per-grant source pace')
  const refresh = await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'refresh_token'], ['client_id', 'tv']) })
  t.same(refresh.json().keys, ['tv'])
  const none = await fastify.inject({ method: 'POST', url: '/poll', ...form(['client_id', 'tv'], ['grant_type', '']) })
  t.same(none.json().keys, ['tv', '127.0.0.1'], 'leaving grant_type out escapes no pace')
  const repeated = await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'client_credentials'], ['grant_type', 'refresh_token'], ['client_id', 'tv']) })
  t.equal(repeated.statusCode, 400)
  t.same(repeated.json(), { error: 'invalid_request', error_description: 'grant_type is repeated' })
  const number = await fastify.inject({ method: 'POST', url: '/poll', headers: { 'content-type': 'application/json' }, payload: '{"grant_type": 1}' })
  t.same(number.json(), { error: 'invalid_request', error_description: 'grant_type must be a string' })
  const unread = await fastify.inject({ method: 'GET', url: '/userinfo', headers: { 'x-forwarded-for': '1.2.3.4' } })
  t.same(unread.json().keys, ['127.0.0.1'], 'no body: no grant type, every pace applies')
})

t.test('a source pace that excepts grant types is reserved after the body is read', async t => {
  const { app: fastify } = await app(t, { perSecond: 1, key: 'source', spend: 'every', exceptGrantTypes: ['password'] })
  const unreadable = await fastify.inject({ method: 'POST', url: '/poll', headers: { 'content-type': 'application/json' }, payload: '{' })
  t.equal(unreadable.statusCode, 400)
  t.equal(fastify.pace.get('/poll')!.size, 0, 'a body that fails parsing reaches no pace that reads it')
  t.equal((await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'password']) })).statusCode, 200)
  t.equal((await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'client_credentials']) })).statusCode, 200)
  t.equal((await fastify.inject({ method: 'POST', url: '/poll', ...form(['grant_type', 'client_credentials']) })).statusCode, 429)
})

t.test('exceptGrantTypes and the new keys are checked when the route is added', async t => {
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register(exchangePace)
  for (const exceptGrantTypes of [[], 'client_credentials', [''], [1]]) {
    t.throws(() => fastify.post('/t', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted', exceptGrantTypes } as unknown as PaceRouteOptions } }, async () => 'ok'),
      { name: 'TypeError', message: /^exchangepace: route POST \/t: config\.pace\.exceptGrantTypes must be a non-empty array of grant_type values, got / })
  }
  t.throws(() => fastify.post('/t', { config: { pace: { perSecond: 1, key: 'token', spend: 'every' } as unknown as PaceRouteOptions } }, async () => 'ok'),
    { message: "exchangepace: route POST /t: config.pace.key must be 'client', 'source', ['client', 'source'], 'device_code', 'bearer' or a function (request) => string | undefined, got \"token\"" })
})

t.test('the route description names the hashed keys and the grant types', async t => {
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register(exchangePace)
  const descriptions = new Map<string, unknown>()
  fastify.addHook('onRoute', route => { descriptions.set(route.url, (route.schema as Record<string, unknown>).description) })
  fastify.post('/token', { config: { pace: [{ limit: 1, window: 5, key: 'device_code', spend: 'every' }, { perSecond: 5, key: 'client', spend: 'accepted', exceptGrantTypes: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'] }] } }, async () => 'ok')
  fastify.get('/userinfo', { config: { pace: { perSecond: 1, key: 'bearer', spend: 'every' } } }, async () => 'ok')
  t.equal(descriptions.get('/token'), 'Paced by exchangepace: 1 request per 5 seconds per device code (every request counts); 5 requests per second per declared client id except for grant_type urn:ietf:params:oauth:grant-type:device_code and refresh_token (rejected exchanges are refunded). Each rate is per replica: N replicas admit up to N times it.')
  t.match(descriptions.get('/userinfo'), /^Paced by exchangepace: 1 request per second per bearer token \(every request counts\)\./)
  await fastify.ready()
})

const redis = await redisOrSkip()
if (redis !== null) {
  t.test('through RedisStore, a Redis key holds the hash, never the secret', async t => {
    const prefix = uniquePrefix('secret-keys')
    const { app: fastify } = await app(t, [{ limit: 1, window: 5, key: 'device_code', spend: 'every' }, { perSecond: 3, key: 'bearer', spend: 'every', name: 'tokens' }], { store: new RedisStore({ client: redis, prefix, timeoutMs: 1000 }), now: undefined })
    t.equal((await poll(fastify, DEVICE_CODE)).statusCode, 200)
    t.equal((await fastify.inject({ method: 'GET', url: '/userinfo', headers: { authorization: `Bearer ${TOKEN}` } })).statusCode, 200)
    const keys = (await redis.keys(`${prefix}*`)).filter(key => key !== `${prefix}catalog`)
    t.equal(keys.length, 2)
    t.ok(keys.some(key => key.includes(secretKey(DEVICE_CODE))) && keys.some(key => key.includes(secretKey(TOKEN))), keys.join(' '))
    t.notOk(keys.some(key => key.includes(DEVICE_CODE) || key.includes(TOKEN)))
  })
}
