import t from 'tap'
import type { AddressInfo } from 'node:net'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import * as client from 'openid-client'
import { buildServer } from '../../examples/oauth2-server.js'

/**
 * examples/oauth2-server.js, @node-oauth/oauth2-server behind exchangepace, driven over a real socket
 * by openid-client (and by fetch where a request must be one openid-client would not send). The
 * paces run on a clock the test moves: the token endpoint grants 5 per client id and 50 per source
 * address per second, the authorization endpoint 10 per source address.
 */

const REPORTING = { id: 'reporting-service', secret: 'rep-s3cret_2026.v1~' }
const WEBAPP = { id: 'webapp', secret: 'web-s3cret_2026.v1~', redirectUri: 'https://webapp.example/callback' }
const form = { 'content-type': 'application/x-www-form-urlencoded' }
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`

async function listening (tt: typeof t) {
  const clock = { ms: 0 }
  const app = buildServer({ now: () => clock.ms })
  tt.teardown(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
  /** openid-client's view of this server, for one client authenticating one way. */
  const configure = (id: string, secret: string, method: 'basic' | 'post') => {
    const authentication = method === 'basic' ? client.ClientSecretBasic(secret) : client.ClientSecretPost(secret)
    const config = new client.Configuration({ issuer: base, token_endpoint: `${base}/token`, authorization_endpoint: `${base}/authorize` }, id, undefined, authentication)
    client.allowInsecureRequests(config)
    return config
  }
  const token = (headers: Record<string, string>, body: string) => fetch(`${base}/token`, { method: 'POST', headers, body })
  /** How many tokens `config` gets right now, asking one at a time until refused. */
  const tokensLeft = async (config: client.Configuration) => {
    for (let granted = 0; ; granted++) {
      try {
        await client.clientCredentialsGrant(config)
      } catch (error) {
        if (error instanceof client.ResponseBodyError && error.status === 429) return granted
        throw error
      }
    }
  }
  /** How many more of these requests the client pace lets through right now, sending them until refused. */
  const spendsLeft = async (headers: Record<string, string>, body: string) => {
    for (let granted = 0; ; granted++) {
      if ((await token(headers, body)).status === 429) return granted
    }
  }
  const clientRows = () => app.pace.get('/token#client')!.size
  return { app, clock, base, configure, token, tokensLeft, spendsLeft, clientRows }
}

t.test('openid-client gets tokens at the client\'s rate, with client_secret_basic and client_secret_post', async t => {
  const { clock, configure, tokensLeft } = await listening(t)
  const viaBasic = configure(REPORTING.id, REPORTING.secret, 'basic')
  const viaPost = configure(REPORTING.id, REPORTING.secret, 'post')
  const sent: string[] = []
  viaBasic[client.customFetch] = (url, options) => {
    sent.push(Buffer.from(options.headers.authorization.slice('Basic '.length), 'base64').toString())
    return fetch(url, options)
  }
  const first = await client.clientCredentialsGrant(viaBasic)
  t.match(first, { token_type: 'bearer', expires_in: Number, scope: 'reports:read' })
  t.match(first.access_token, /^[0-9a-f]{64}$/)
  t.same(sent, ['reporting%2Dservice:rep%2Ds3cret%5F2026%2Ev1%7E'], 'openid-client form-encodes the Basic id and secret (RFC 6749 section 2.3.1), and the adapter decodes them for the library')
  t.equal(await tokensLeft(viaPost), 4, 'one second of the rate: 5 in all, one bucket for both methods')
  // From an empty bucket, one token every 200 ms and not one more.
  for (let step = 1; step <= 5; step++) {
    clock.ms = step * 200
    t.equal(await tokensLeft(step % 2 === 0 ? viaBasic : viaPost), 1, `at ${clock.ms} ms`)
  }
})

t.test('a burst above the rate is a 429 with Retry-After and an OAuth error body, which openid-client throws as ResponseBodyError', async t => {
  const { configure, token } = await listening(t)
  const config = configure(REPORTING.id, REPORTING.secret, 'basic')
  const results = await Promise.allSettled(Array.from({ length: 8 }, () => client.clientCredentialsGrant(config)))
  t.equal(results.filter(result => result.status === 'fulfilled').length, 5)
  const refusals = results.flatMap(result => result.status === 'rejected' ? [result.reason] : [])
  t.equal(refusals.length, 3)
  for (const error of refusals) {
    t.type(error, client.ResponseBodyError)
    // The client pace refuses, or, while the burst's units are still in flight, the failure budget
    // they hold (asked first) says so: a second either way, never the budget's 12 minutes.
    t.match(error, {
      name: 'ResponseBodyError',
      code: 'OAUTH_RESPONSE_BODY_ERROR',
      status: 429,
      error: 'temporarily_unavailable',
      error_description: /^Too many requests (for this \/token#client pace|in flight for this \/token#client\+source:rejected pace); retry after 1 second$/,
      cause: { error: 'temporarily_unavailable' }
    })
    t.equal(error.response.headers.get('retry-after'), '1', 'the Retry-After header, on the error\'s response')
  }

  const raw = await token({ ...form, authorization: basic(REPORTING.id, REPORTING.secret) }, 'grant_type=client_credentials')
  t.equal(raw.status, 429)
  t.equal(raw.headers.get('retry-after'), '1')
  t.equal(raw.headers.get('cache-control'), 'no-store')
  t.match(raw.headers.get('content-type'), /^application\/json/)
  t.equal(raw.headers.get('ratelimit-policy'), '"/token#source";q=50;w=1', 'only the source quota is shown')
  t.same(await raw.json(), { error: 'temporarily_unavailable', error_description: 'Too many requests for this /token#client pace; retry after 1 second' })
})

t.test('a made-up client id takes nothing from the paces keyed by a client id: its failure counts for its address alone', async t => {
  const { app, token } = await listening(t)
  for (let i = 0; i < 3; i++) {
    const response = await token({ ...form, authorization: basic(`made-up-${i}`, 'guess') }, 'grant_type=client_credentials')
    t.equal(response.status, 401)
  }
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 0, 'no pair row for a made-up id (isClient)')
  t.equal(app.pace.get('/token#client')!.size, 0)
  t.equal(app.pace.get('/token#source:rejected')!.size, 1, 'the failures counted for the address')
  t.equal(app.pace.get('/token#source:rejected')!.inspect('127.0.0.1').remaining, 97, 'three of its 100 a day')
})

t.test('a stranger with a wrong secret spends nothing of the real client\'s pace', async t => {
  const { configure, tokensLeft, clientRows } = await listening(t)
  const strangerBasic = configure(REPORTING.id, 'guessed-secret', 'basic')
  const strangerPost = configure(REPORTING.id, 'guessed-secret', 'post')
  // Four wrong secrets from one address: within the failure budget (5 an hour per client id and
  // address), so that the client, calling from the same loopback address, is not refused by it
  // here (the budget's own tests use addresses of their own).
  for (let i = 0; i < 2; i++) {
    // A 401 with a WWW-Authenticate challenge: openid-client throws the challenge, not the body.
    await t.rejects(client.clientCredentialsGrant(strangerBasic), {
      name: 'WWWAuthenticateChallengeError',
      status: 401,
      cause: [{ scheme: 'basic', parameters: { realm: 'Service' } }]
    })
    await t.rejects(client.clientCredentialsGrant(strangerPost), { name: 'ResponseBodyError', status: 400, error: 'invalid_client' })
  }
  t.equal(clientRows(), 0, 'four refunds leave no row')
  t.equal(await tokensLeft(configure(REPORTING.id, REPORTING.secret, 'basic')), 5, 'the client still has its full second')
})

t.test('naming the client without its secret leaves its pace untouched', async t => {
  const { clock, token, configure, tokensLeft, clientRows } = await listening(t)
  const verifier = client.randomPKCECodeVerifier()
  const cases: Array<[string, Record<string, string>, string, number, string]> = [
    ['its id without a secret', form, `grant_type=client_credentials&client_id=${REPORTING.id}`, 400, 'invalid_client'],
    ['its id with an empty secret', form, `grant_type=client_credentials&client_id=${REPORTING.id}&client_secret=`, 400, 'invalid_client'],
    ['its id in Basic with an empty secret', { ...form, authorization: basic(REPORTING.id, '') }, 'grant_type=client_credentials', 400, 'invalid_request'],
    ['a secret alone in Basic, its id in the body', { ...form, authorization: basic('', REPORTING.secret) }, `grant_type=client_credentials&client_id=${REPORTING.id}`, 400, 'invalid_request'],
    ['another id and secret in Basic, its id in the body', { ...form, authorization: basic('stranger', 'stranger-secret') }, `grant_type=client_credentials&client_id=${REPORTING.id}`, 400, 'invalid_request'],
    ['its id in a PKCE request, which the library asks about without a secret', form, `grant_type=authorization_code&client_id=${REPORTING.id}&code=x&code_verifier=${verifier}`, 400, 'invalid_client'],
    ['a Basic secret that does not decode', { ...form, authorization: basic(REPORTING.id, '100%') }, 'grant_type=client_credentials', 401, 'invalid_client'],
    ['a Basic id with a ":" once decoded', { ...form, authorization: basic(`${REPORTING.id}%3A`, REPORTING.secret) }, 'grant_type=client_credentials', 401, 'invalid_client'],
    ['its id and secret in a JSON body, which the library refuses', { 'content-type': 'application/json' }, JSON.stringify({ grant_type: 'client_credentials', client_id: REPORTING.id, client_secret: REPORTING.secret }), 400, 'invalid_request']
  ]
  for (const [what, headers, body, status, error] of cases) {
    const response = await token(headers, body)
    t.equal(response.status, status, what)
    t.equal((await response.json()).error, error, what)
    t.equal(clientRows(), 0, `${what}: no row`)
    // Each of these is a failure for the caller's (id, address) pair, and they all come from the
    // client's own loopback address: one failure back (12 minutes) before the next case.
    clock.ms += 720_000
  }
  t.equal(await tokensLeft(configure(REPORTING.id, REPORTING.secret, 'post')), 5, 'the client still has its full second')
})

t.test('a failed Basic authentication is a 401 with the library\'s Basic challenge; a failed post, a 400 without', async t => {
  const { token } = await listening(t)
  const viaBasic = await token({ ...form, authorization: basic(REPORTING.id, 'guess') }, 'grant_type=client_credentials')
  t.equal(viaBasic.status, 401)
  t.equal(viaBasic.headers.get('www-authenticate'), 'Basic realm="Service"')
  t.same(await viaBasic.json(), { error: 'invalid_client', error_description: 'Invalid client: client is invalid' })
  const viaPost = await token(form, `grant_type=client_credentials&client_id=${REPORTING.id}&client_secret=guess`)
  t.equal(viaPost.status, 400)
  t.equal(viaPost.headers.get('www-authenticate'), null)
})

t.test('an authenticated client\'s own mistakes stay spent', async t => {
  const { token, configure, tokensLeft } = await listening(t)
  const authorization = basic(REPORTING.id, REPORTING.secret)
  const cases: Array<[string, string, string]> = [
    ['no grant_type', 'scope=reports:read', 'invalid_request'],
    ['a grant_type that is not a name', 'grant_type=not%20a%20name', 'invalid_request'],
    ['a grant type the library does not know', 'grant_type=urn:example:unknown', 'unsupported_grant_type'],
    ['a grant type the client may not use', 'grant_type=authorization_code&code=x', 'unauthorized_client'],
    ['a scope the client does not have', 'grant_type=client_credentials&scope=admin', 'invalid_scope']
  ]
  for (const [what, body, error] of cases) {
    const response = await token({ ...form, authorization }, body)
    t.equal(response.status, 400, what)
    t.equal((await response.json()).error, error, what)
  }
  t.equal(await tokensLeft(configure(REPORTING.id, REPORTING.secret, 'basic')), 0, 'five mistakes spent the second')
})

t.test('the authorization code flow with PKCE, through openid-client', async t => {
  const { base, configure, spendsLeft } = await listening(t)
  const config = configure(WEBAPP.id, WEBAPP.secret, 'basic')
  const verifier = client.randomPKCECodeVerifier()
  const state = client.randomState()
  const authorizationUrl = client.buildAuthorizationUrl(config, {
    redirect_uri: WEBAPP.redirectUri,
    scope: 'profile',
    state,
    code_challenge: await client.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256'
  })
  t.equal(authorizationUrl.origin, base)
  const redirect = await fetch(authorizationUrl, { redirect: 'manual' })
  t.equal(redirect.status, 302)
  const callback = new URL(redirect.headers.get('location')!)
  const tokens = await client.authorizationCodeGrant(config, callback, { pkceCodeVerifier: verifier, expectedState: state })
  t.match(tokens, { token_type: 'bearer', scope: 'profile', refresh_token: String })

  // The code is spent: used again, it is the authenticated client's invalid_grant, and spends.
  await t.rejects(client.authorizationCodeGrant(config, callback, { pkceCodeVerifier: verifier, expectedState: state }), {
    name: 'ResponseBodyError', status: 400, error: 'invalid_grant'
  })
  const exchange = (code: string) => client.authorizationCodeGrant(config, new URL(`${WEBAPP.redirectUri}?code=${code}&state=${state}`), { pkceCodeVerifier: verifier, expectedState: state })
  await t.rejects(exchange('not-a-code'), { status: 400, error: 'invalid_grant' })
  const invalidGrant = `grant_type=authorization_code&code=x&redirect_uri=${encodeURIComponent(WEBAPP.redirectUri)}`
  t.equal(await spendsLeft({ ...form, authorization: basic(WEBAPP.id, WEBAPP.secret) }, invalidGrant), 2, 'the token and two invalid grants spent three')
})

t.test('the authorization endpoint counts every request from a source', async t => {
  const { base } = await listening(t)
  const authorize = (query: string) => fetch(`${base}/authorize?${query}`, { redirect: 'manual' })
  const answeredHere: Array<[string, string, string]> = [
    ['an unknown client', 'response_type=code&client_id=nobody&state=s', 'invalid_client'],
    ['a redirect URI the client did not register', 'response_type=code&client_id=webapp&state=s&redirect_uri=https%3A%2F%2Fevil.example%2F', 'invalid_client'],
    ['a repeated parameter', 'response_type=code&client_id=webapp&client_id=webapp&state=s', 'invalid_request']
  ]
  for (const [what, query, error] of answeredHere) {
    const response = await authorize(query)
    t.equal(response.status, 400, `${what}: answered here, not redirected`)
    t.equal((await response.json()).error, error, what)
  }
  const redirected: Array<[string, RegExp]> = [
    ['response_type=code&client_id=webapp&state=s1', /^https:\/\/webapp\.example\/callback\?code=[0-9a-f]{64}&state=s1$/],
    ['response_type=token&client_id=webapp&state=s2', /\?error=unsupported_response_type&error_description=[^&]+&state=s2$/],
    ['response_type=code&client_id=webapp&state=s3&scope=admin', /\?error=invalid_scope&error_description=[^&]+&state=s3$/]
  ]
  for (const [query, location] of redirected) {
    const response = await authorize(query)
    t.equal(response.status, 302, query)
    t.match(response.headers.get('location'), location, query)
  }
  const rest = await Promise.all(Array.from({ length: 5 }, (_, i) => authorize(`response_type=code&client_id=webapp&state=r${i}`)))
  t.same(rest.map(response => response.status).sort(), [302, 302, 302, 302, 429], 'ten in a second, errors included; the eleventh is refused')
  const refused = rest.find(response => response.status === 429)!
  t.equal(refused.headers.get('retry-after'), '1')
  t.equal((await refused.json()).error, 'temporarily_unavailable')
})

t.test('Fastify\'s own errors are OAuth error responses; a server error says nothing of its cause', async t => {
  const { token } = await listening(t)
  const repeated = await token(form, `grant_type=client_credentials&client_id=${REPORTING.id}&client_secret=a&client_secret=b`)
  t.equal(repeated.status, 400)
  t.match(await repeated.json(), { error: 'invalid_request', error_description: /client_secret/ })
  const unreadable = await token({ 'content-type': 'application/xml' }, '<client_id>reporting-service</client_id>')
  t.equal(unreadable.status, 415)
  t.equal((await unreadable.json()).error, 'invalid_request')

  const app = buildServer()
  t.teardown(() => app.close())
  app.addHook('onRequest', async () => { throw new Error('the database is down') })
  const failed = await app.inject({ method: 'POST', url: '/token', headers: form, payload: 'grant_type=client_credentials' })
  t.equal(failed.statusCode, 500)
  t.same(failed.json(), { error: 'server_error', error_description: 'the server could not complete the request' })
})

t.test('node examples/oauth2-server.js listens, issues tokens and answers its admin route', async t => {
  const script = fileURLToPath(new URL('../../examples/oauth2-server.js', import.meta.url))
  const adminToken = 'an-admin-token-of-the-test'
  const child = spawn(process.execPath, [script], { env: { ...process.env, PORT: '0', ADMIN_TOKEN: adminToken }, stdio: ['ignore', 'pipe', 'ignore'] })
  t.teardown(() => { child.kill() })
  let output = ''
  for await (const chunk of child.stdout) {
    output += String(chunk)
    if (output.includes('the admin token')) break
  }
  const base = /on (http:\/\/127\.0\.0\.1:\d+); try:/.exec(output)![1]
  const curl = /curl -i -u (\S+):(\S+) -d (\S+) (\S+)/.exec(output)!
  t.equal(curl[4], `${base}/token`)
  const response = await fetch(curl[4], { method: 'POST', headers: { ...form, authorization: basic(curl[1], curl[2]) }, body: curl[3] })
  t.equal(response.status, 200, 'the printed curl line gets a token')
  const adminCurl = /curl -H "authorization: Bearer \$ADMIN_TOKEN" -H 'content-type: application\/json' \\\n {2}-d '(\S+)' (\S+)/.exec(output)!
  t.equal(adminCurl[2], `${base}/admin/paces/inspect`)
  const inspected = await fetch(adminCurl[2], { method: 'POST', headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: adminCurl[1] })
  t.equal(inspected.status, 200, 'the printed admin line inspects, with the token from ADMIN_TOKEN')
  t.same(await inspected.json(), { pace: '/token#client+source:rejected', remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
})
