import t from 'tap'
import { createPrivateKey, sign } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { FastifyInstance } from 'fastify'
import { buildServer } from '../../examples/server.js'

/**
 * The example server's other endpoints: the device grant (RFC 8628) paced by device_code at the
 * interval it hands out and refused with slow_down; PAR (RFC 9126), introspection (RFC 7662) and
 * revocation (RFC 7009), each paced by the declared client id as the token endpoint is, with every
 * client authentication method exchangepace reads. Time is the server's injected clock.
 */

const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
const form = { 'content-type': 'application/x-www-form-urlencoded' }
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`
const KEY = createPrivateKey({ key: JSON.parse(readFileSync(new URL('../fixtures/analytics-key.json', import.meta.url), 'utf8')), format: 'jwk' })

/** A client assertion of `analytics` (private_key_jwt), with `claims` over the valid ones. */
function assertion (claims: Record<string, unknown> = {}, key = KEY): string {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const input = `${b64({ alg: 'ES256' })}.${b64({ iss: 'analytics', sub: 'analytics', aud: 'https://as.example', exp: Math.floor(Date.now() / 1000) + 60, ...claims })}`
  return `${input}.${sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`
}

interface Server {
  app: FastifyInstance
  /** Moves the server's clock to `ms`. */
  at: (ms: number) => void
  post: (url: string, payload: Record<string, string>, headers?: Record<string, string>, remoteAddress?: string) => ReturnType<FastifyInstance['inject']>
  rows: (name: string) => number
}

async function server (tt: typeof t, logLines?: string[]): Promise<Server> {
  let time = 0
  const logger = logLines === undefined ? false : { level: 'debug', stream: { write: (line: string) => { logLines.push(line) } } }
  const app = buildServer({ now: () => time, logger })
  tt.teardown(() => app.close())
  await app.ready()
  return {
    app,
    at: ms => { time = ms },
    post: (url, payload, headers = {}, remoteAddress = '127.0.0.1') => app.inject({ method: 'POST', url, remoteAddress, headers: { ...form, ...headers }, payload: new URLSearchParams(payload).toString() }),
    rows: name => app.pace.get(name)!.size
  }
}

/** A device that asked for its codes at time 0. */
async function device (s: Server) {
  const response = await s.post('/device_authorization', { client_id: 'tv', scope: 'profile' })
  t.equal(response.statusCode, 200)
  const codes = response.json()
  const poll = (deviceCode = codes.device_code as string) => s.post('/token', { grant_type: DEVICE_GRANT, client_id: 'tv', device_code: deviceCode })
  return { codes, poll }
}

t.test('a device polling at its interval gets authorization_pending, then its token', async t => {
  const s = await server(t)
  const { codes, poll } = await device(s)
  t.match(codes, { device_code: String, user_code: /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/, verification_uri: 'https://as.example/device', expires_in: 600, interval: 5 })
  const pending = await poll()
  t.equal(pending.statusCode, 400)
  t.equal(pending.json().error, 'authorization_pending')
  t.equal(pending.headers.ratelimit, '"/token#source";r=49;t=1, "/token#device_code";r=0;t=5, "/token#client+source:rejected";r=5;t=0, "/token#source:rejected";r=100;t=0', 'the device reads its own quotas')
  s.at(5000)
  t.equal((await poll()).json().error, 'authorization_pending')
  const approved = await s.post('/device', { user_code: codes.user_code.toLowerCase() })
  t.same(approved.json(), { approved: true, scope: 'profile' })
  s.at(10_000)
  const issued = await poll()
  t.equal(issued.statusCode, 200)
  t.match(issued.json(), { access_token: String, token_type: 'Bearer', scope: 'profile' })
  s.at(15_000)
  t.equal((await poll()).json().error, 'invalid_grant', 'a device code gives one token')
  t.equal(s.rows('/token#client'), 0, "the device's polls never touched its public client's pace")
  t.equal(s.rows('/token#device_code'), 1, 'the one device polled')
})

t.test('a device polling faster gets slow_down and nothing else changes', async t => {
  const s = await server(t)
  const { codes, poll } = await device(s)
  await poll()
  const counts = () => s.app.pace.names().map(name => [name, s.app.pace.counts(name)])
  const before = counts()
  s.at(2000)
  const fast = await poll()
  t.equal(fast.statusCode, 400)
  t.same(fast.json(), { error: 'slow_down', error_description: 'poll no more often than the interval, now 5 seconds longer' })
  t.equal(fast.headers['retry-after'], '3')
  const after = counts()
  const changed = after.filter(([name, c], i) => JSON.stringify(c) !== JSON.stringify(before[i][1])).map(([name]) => name)
  t.same(changed, ['/token#device_code', '/token#source'], 'the device pace counts a refusal; the source pace, as ever, the request; nothing else moved')
  t.same(s.app.pace.counts('/token#device_code'), { granted: 1, refused: 1, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })

  s.at(7000)
  const still = await poll()
  t.same(still.json().error, 'slow_down', 'its interval is 10 s now: a poll 7 s after the last one is too soon')
  s.at(15_000)
  t.equal((await poll()).json().error, 'authorization_pending', 'the interval grew once more (15 s), and 15 s have passed')
  await s.post('/device', { user_code: codes.user_code })
  s.at(30_000)
  t.equal((await poll()).statusCode, 200, 'still pending until approved, then the token')
})

t.test('a stranger guessing device codes is bounded by the source pace', async t => {
  const logged: string[] = []
  const s = await server(t, logged)
  const answers: number[] = []
  for (let i = 0; i < 60; i++) {
    const guess = await s.post('/token', { grant_type: DEVICE_GRANT, client_id: 'tv', device_code: `guess-${i}` }, {}, '203.0.113.9')
    answers.push(guess.statusCode)
    if (guess.statusCode === 400) t.equal(guess.json().error, 'invalid_grant')
  }
  t.same(answers, [...Array(50).fill(400), ...Array(10).fill(429)], '50 a second from one address, then 429')
  t.ok(logged.some(line => line.includes('/token#source')), 'the refusals are logged')
  t.notOk(logged.some(line => line.includes('guess-')), 'no device code is in a log line')
  t.equal(s.rows('/token#client+source:rejected'), 0, 'a wrong device code is not a failed client authentication')
  const { poll } = await device(s)
  t.equal((await poll()).json().error, 'authorization_pending', 'a device at another address polls on')
})

t.test('the device grant refuses what RFC 8628 refuses', async t => {
  const s = await server(t)
  const { codes, poll } = await device(s)
  const missing = await s.post('/token', { grant_type: DEVICE_GRANT, client_id: 'tv' })
  t.same(missing.json().error, 'invalid_request')
  const otherClient = await s.post('/token', { grant_type: DEVICE_GRANT, client_id: 'analytics', client_assertion_type: JWT_BEARER, client_assertion: assertion(), device_code: codes.device_code })
  t.equal(otherClient.json().error, 'unauthorized_client', 'analytics may not use the device grant')
  s.at(600_000)
  t.equal((await poll()).json().error, 'expired_token')
  s.at(605_000)
  t.equal((await poll()).json().error, 'invalid_grant', 'an expired code is forgotten')
  const late = await s.post('/device', { user_code: codes.user_code })
  t.equal(late.statusCode, 400, 'nor can it be approved')
  const wrongScope = await s.post('/device_authorization', { client_id: 'tv', scope: 'admin' })
  t.equal(wrongScope.json().error, 'invalid_scope')
  const wrongClient = await s.post('/device_authorization', {}, { authorization: basic('reporting', 'reporting-secret') })
  t.equal(wrongClient.json().error, 'unauthorized_client')
  const stranger = await s.post('/device_authorization', { client_id: 'tv', client_secret: 'x' })
  t.equal(stranger.statusCode, 401, 'a public client has no secret to present')
  const defaultScope = await s.post('/device_authorization', { client_id: 'tv' })
  t.equal(defaultScope.statusCode, 200)
})

t.test("another client's device code is invalid_grant", async t => {
  const s = await server(t)
  const { codes } = await device(s)
  const CLIENTS = (await import('../../examples/client-auth.js')).CLIENTS
  CLIENTS.set('radio', { grantTypes: [DEVICE_GRANT], scopes: ['profile'], redirectUris: [] })
  t.teardown(() => { CLIENTS.delete('radio') })
  const response = await s.post('/token', { grant_type: DEVICE_GRANT, client_id: 'radio', device_code: codes.device_code })
  t.equal(response.json().error, 'invalid_grant')
})

t.test('user codes are guessed at ten per address per ten minutes', async t => {
  const s = await server(t)
  const answers = []
  for (let i = 0; i < 11; i++) answers.push((await s.post('/device', { user_code: `BCDF-GHJ${i}` })).statusCode)
  t.same(answers, [...Array(10).fill(400), 429])
  const { codes } = await device(s)
  t.equal((await s.post('/device', { user_code: codes.user_code }, {}, '198.51.100.7')).statusCode, 200, 'the user at another address approves')
})

/** The three ways a client authenticates, each for a confidential client of the example. */
const METHODS: Array<[string, string, Record<string, string>, Record<string, string>]> = [
  ['client_secret_basic', 'webapp', {}, { authorization: basic('webapp', 'webapp-secret') }],
  ['client_secret_post', 'webapp', { client_id: 'webapp', client_secret: 'webapp-secret' }, {}],
  ['private_key_jwt', 'analytics', { client_assertion_type: JWT_BEARER, client_assertion: assertion() }, {}]
]
const WRONG: Array<[string, string, Record<string, string>, Record<string, string>]> = [
  ['client_secret_basic', 'webapp', {}, { authorization: basic('webapp', 'guess') }],
  ['client_secret_post', 'webapp', { client_id: 'webapp', client_secret: 'guess' }, {}],
  ['private_key_jwt', 'analytics', { client_assertion_type: JWT_BEARER, client_assertion: assertion({ exp: 1 }) }, {}]
]

for (const [route, pace, payload] of [
  ['/par', '/par#client', { response_type: 'code', state: 's' }],
  ['/introspect', '/introspect#client', { token: 'unknown' }],
  ['/revoke', '/revoke#client', { token: 'unknown' }]
] as const) {
  t.test(`${route} reads the declared client id as the token endpoint does, with each authentication method`, async t => {
    const s = await server(t)
    for (const [method, , body, headers] of METHODS) {
      const response = await s.post(route, { ...payload, ...body }, headers)
      t.ok(response.statusCode < 300, `${method}: ${response.statusCode}`)
      t.match(response.headers['ratelimit-policy'], `"${pace}"`, `${method}: the client reads its own quota on an accepted request`)
    }
    t.equal(s.rows(pace), 2, 'webapp and analytics each spent')
    for (const [method, id, body, headers] of WRONG) {
      const response = await s.post(route, { ...payload, ...body }, headers, '203.0.113.9')
      t.equal(response.statusCode, 401, method)
      t.equal(response.json().error, 'invalid_client', method)
      t.notOk(String(response.headers['ratelimit-policy']).includes(`"${pace}"`), `${method}: a stranger does not read ${id}'s quota`)
    }
    t.same(s.app.pace.counts(pace), { granted: 6, refused: 0, refunded: 3, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 }, 'every failed authentication was refunded to the client it named')
    t.equal(s.rows(`${route}#client+source:rejected`), 2, "the guesser's failures are its own, per id it named")
    const conflicting = await s.post(route, { ...payload, client_id: 'analytics' }, { authorization: basic('webapp', 'webapp-secret') })
    t.equal(conflicting.statusCode, 400, 'two declared ids are a 400 before the handler')
  })
}

t.test('client assertions are checked the way RFC 7523 asks', async t => {
  const s = await server(t)
  const other = createPrivateKey({ key: { kty: 'EC', crv: 'P-256', x: 'f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU', y: 'x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0', d: 'jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI' }, format: 'jwk' })
  const cases: Array<[string, Record<string, string>]> = [
    ['signed by another key', { client_assertion_type: JWT_BEARER, client_assertion: assertion({}, other) }],
    ['for another audience', { client_assertion_type: JWT_BEARER, client_assertion: assertion({ aud: ['https://elsewhere.example'] }) }],
    ['expired', { client_assertion_type: JWT_BEARER, client_assertion: assertion({ exp: 1 }) }],
    ['issued by another', { client_assertion_type: JWT_BEARER, client_assertion: assertion({ iss: 'webapp' }) }],
    ['of a client without a key', { client_assertion_type: JWT_BEARER, client_assertion: assertion({ iss: 'webapp', sub: 'webapp' }) }],
    ['of another type', { client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer', client_assertion: 'PHNhbWw+', client_id: 'analytics' }],
    ['encrypted', { client_assertion_type: JWT_BEARER, client_assertion: 'a.b.c.d.e', client_id: 'analytics' }]
  ]
  for (const [index, [what, body]] of cases.entries()) {
    // Each from its own address: analytics' failure budget per address is five an hour.
    const response = await s.post('/token', { grant_type: 'client_credentials', ...body }, {}, `203.0.113.${index}`)
    t.equal(response.statusCode, 401, what)
    t.equal(response.json().error, 'invalid_client', what)
  }
  const audienceList = await s.post('/token', { grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion({ aud: ['https://as.example', 'https://as.example/token'] }) })
  t.equal(audienceList.statusCode, 200, 'an audience list naming the issuer')
  const two = await s.post('/token', { grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion() }, { authorization: basic('analytics', 'x') })
  t.same(two.json(), { error: 'invalid_request', error_description: 'use one client authentication method' })
  t.equal(s.rows('/token#client'), 1, 'only the accepted exchange spent')
})

t.test('a public client names itself and may use no confidential grant', async t => {
  const s = await server(t)
  const credentials = await s.post('/token', { grant_type: 'client_credentials', client_id: 'tv' })
  t.equal(credentials.json().error, 'unauthorized_client')
  const unknown = await s.post('/token', { grant_type: 'client_credentials', client_id: 'nobody' })
  t.equal(unknown.statusCode, 401)
  const introspection = await s.post('/introspect', { client_id: 'tv', token: 'x' })
  t.equal(introspection.statusCode, 403)
  t.equal(introspection.json().error, 'unauthorized_client')
})

t.test('a pushed authorization request is used once, by its client, before it expires', async t => {
  const s = await server(t)
  const push = (body: Record<string, string>) => s.post('/par', { client_id: 'webapp', client_secret: 'webapp-secret', response_type: 'code', ...body })
  const authorize = (query: string) => s.app.inject({ method: 'GET', url: `/authorize?${query}` })
  const pushed = await push({ state: 'p1', scope: 'profile' })
  t.equal(pushed.statusCode, 201)
  const { request_uri: uri, expires_in: expiresIn } = pushed.json()
  t.match(uri, /^urn:ietf:params:oauth:request_uri:[\w-]+$/)
  t.equal(expiresIn, 60)
  const query = (requestUri: string, clientId = 'webapp') => new URLSearchParams({ client_id: clientId, request_uri: requestUri }).toString()
  const redirected = await authorize(query(uri))
  t.equal(redirected.statusCode, 302)
  t.match(redirected.headers.location, /^https:\/\/webapp\.example\/callback\?code=[\w-]+&state=p1$/)
  t.equal((await authorize(query(uri))).statusCode, 400, 'used once')
  const other = (await push({})).json().request_uri
  t.equal((await authorize(query(other, 'mobile'))).statusCode, 400, 'by its own client only')
  const late = (await push({})).json().request_uri
  s.at(60_000)
  t.same((await authorize(query(late))).json(), { error: 'invalid_request', error_description: 'request_uri is unknown, used or expired' })
  t.equal((await push({ request_uri: 'urn:x' })).statusCode, 400, 'a request_uri may not be pushed')
  const unregistered = await push({ redirect_uri: 'https://evil.example/' })
  t.same(unregistered.json(), { error: 'invalid_request', error_description: 'redirect_uri is not registered for this client' })
  const noRedirects = await s.post('/par', { response_type: 'code' }, { authorization: basic('reporting', 'reporting-secret') })
  t.equal(noRedirects.statusCode, 400)
})

t.test('introspection says whether a token is active; revocation ends it', async t => {
  const s = await server(t)
  const issued = (await s.post('/token', { grant_type: 'client_credentials' }, { authorization: basic('reporting', 'reporting-secret') })).json().access_token
  const introspect = (token: string) => s.post('/introspect', { token }, { authorization: basic('billing', 'billing-secret') })
  t.same((await introspect(issued)).json(), { active: true, client_id: 'reporting', scope: 'reports:read', token_type: 'Bearer' })
  t.same((await introspect('unknown')).json(), { active: false })
  const byOther = await s.post('/revoke', { token: issued }, { authorization: basic('billing', 'billing-secret') })
  t.equal(byOther.statusCode, 400, "a client may not revoke another's token")
  t.equal(byOther.json().error, 'unauthorized_client')
  const revoked = await s.post('/revoke', { token: issued }, { authorization: basic('reporting', 'reporting-secret') })
  t.equal(revoked.statusCode, 200)
  t.same((await introspect(issued)).json(), { active: false })
  const expiring = (await s.post('/token', { grant_type: 'client_credentials' }, { authorization: basic('reporting', 'reporting-secret') })).json().access_token
  s.at(3_600_000)
  t.same((await introspect(expiring)).json(), { active: false }, 'an expired token is not active')
  const missing = await s.post('/introspect', {}, { authorization: basic('billing', 'billing-secret') })
  t.equal(missing.statusCode, 400, 'token is required')
})
