import t from 'tap'
import { readFileSync } from 'node:fs'
import { createPrivateKey } from 'node:crypto'
import { freePort } from '../helpers/port.js'
import { floodOfMadeUpIds, spendSourceBudget, type SendGuess } from '../helpers/made-up-ids.js'
import * as client from 'openid-client'
import type { FastifyInstance } from 'fastify'
import { needsNode } from '../helpers/node.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

/**
 * examples/oidc-provider.js over real HTTP, driven by openid-client (and by fetch where a request
 * must be one openid-client would not send): oidc-provider answers as it does unpaced, and
 * exchangepace reads each exchange's outcome from its answers. The clock is injected; nothing
 * waits for a refill. oidc-provider 9 supports Node 22 and later only.
 */

const skip = needsNode(22)

interface Served { app: FastifyInstance, issuer: string, clock: { t: number } }

async function serve (t: TapTest): Promise<Served> {
  const { buildServer } = await import('../../examples/oidc-provider.js')
  const port = await freePort()
  const issuer = `http://127.0.0.1:${port}/oidc`
  const clock = { t: 0 }
  const app: FastifyInstance = await buildServer({ issuer, now: () => clock.t })
  t.teardown(() => app.close())
  await app.listen({ port, host: '127.0.0.1' })
  return { app, issuer, clock }
}

async function configFor (issuer: string, id: string, auth: client.ClientAuth, metadata: Partial<client.ClientMetadata> = {}): Promise<client.Configuration> {
  return await client.discovery(new URL(issuer), id, metadata, auth, { execute: [client.allowInsecureRequests] })
}

const form = (pairs: Record<string, string>) => ({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(pairs).toString() })

t.test('client_credentials through openid-client: tokens at the client\'s rate, with the quota headers', { skip }, async t => {
  const { issuer } = await serve(t)
  const reporting = await configFor(issuer, 'reporting', client.ClientSecretBasic('reporting-secret'))
  const billing = await configFor(issuer, 'billing', client.ClientSecretPost('billing-secret'))
  const headers: Headers[] = []
  reporting[client.customFetch] = async (url, options) => {
    const response = await fetch(url, options as RequestInit)
    headers.push(response.headers)
    return response
  }
  const first = await client.clientCredentialsGrant(reporting, { scope: 'reports:read' })
  t.type(first.access_token, 'string')
  t.match(headers[0].get('ratelimit'), /"token";r=4;t=1/)
  t.type((await client.clientCredentialsGrant(billing, { scope: 'invoices:read' })).access_token, 'string', 'client_secret_post: the body reached oidc-provider whole')
  for (let i = 0; i < 4; i++) await client.clientCredentialsGrant(reporting, { scope: 'reports:read' })
  await t.rejects(client.clientCredentialsGrant(reporting, { scope: 'reports:read' }), { name: 'ResponseBodyError', status: 429, error: 'temporarily_unavailable' })
  const analyticsKey = createPrivateKey({ key: JSON.parse(readFileSync('test/fixtures/analytics-key.json', 'utf8')), format: 'jwk' })
  const analytics = await configFor(issuer, 'analytics', client.PrivateKeyJwt({ key: await crypto.subtle.importKey('jwk', analyticsKey.export({ format: 'jwk' }), { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign']) }, { [client.modifyAssertion]: () => {} }))
  t.type((await client.clientCredentialsGrant(analytics, { scope: 'reports:read' })).access_token, 'string', 'private_key_jwt: the assertion verified by oidc-provider')
})

t.test('a guesser is refused after five wrong secrets, refunded to the client it names; the client keeps its rate', { skip }, async t => {
  const { app, issuer } = await serve(t)
  const guesser = await configFor(issuer, 'billing', client.ClientSecretPost('guess'))
  for (let i = 0; i < 5; i++) await t.rejects(client.clientCredentialsGrant(guesser), { status: 401, error: 'invalid_client' })
  const sixth = await fetch(`${issuer}/token`, form({ grant_type: 'client_credentials', client_id: 'billing', client_secret: 'guess' }))
  t.equal(sixth.status, 429, 'its failure budget spent: refused before oidc-provider checks the secret')
  t.ok(Number(sixth.headers.get('retry-after')) > 700)
  t.equal(app.pace.get('token')!.size, 0, 'the named client\'s pace was refunded each time')
  t.equal(app.pace.counts('token').refunded, 5)
})

t.test('strangers naming a client leave the client\'s pace whole and no row in it', { skip }, async t => {
  const { app, issuer } = await serve(t)
  for (let i = 0; i < 4; i++) {
    const stranger = await fetch(`${issuer}/token`, form({ grant_type: 'client_credentials', client_id: 'reporting', client_secret: 'wrong' }))
    t.equal(stranger.status, 401)
  }
  t.equal(app.pace.get('token')!.size, 0)
  const reporting = await configFor(issuer, 'reporting', client.ClientSecretBasic('reporting-secret'))
  for (let i = 0; i < 5; i++) await client.clientCredentialsGrant(reporting)
  t.equal(app.pace.counts('token').refused, 0)
})

/** A wrong secret under `clientId`, over HTTP: every request comes from 127.0.0.1 (`from`). */
const guessAt = (issuer: string): SendGuess => async clientId => {
  const response = await fetch(`${issuer}/token`, form({ grant_type: 'client_credentials', client_id: clientId, client_secret: 'guess' }))
  return { status: response.status, retryAfter: Number(response.headers.get('retry-after')), body: await response.text() }
}

t.test('a flood of made-up ids leaves no row keyed by a client id (isClient reads the clients oidc-provider serves), a row for its address', { skip }, async t => {
  const { app, issuer } = await serve(t)
  await floodOfMadeUpIds(t, app, guessAt(issuer), { sources: ['127.0.0.1'], perSource: 20, isClient: true })
})

t.test('an address is refused after 100 failures a day, whatever ids they name', { skip }, async t => {
  const { issuer, clock } = await serve(t)
  await spendSourceBudget(t, guessAt(issuer), ms => { clock.t += ms }, '127.0.0.1')
})

t.test('the device grant: an interval handed out, polls answered authorization_pending, a faster one 400 slow_down', { skip }, async t => {
  const { issuer, clock } = await serve(t)
  const tv = await configFor(issuer, 'tv', client.None())
  const authorization = await client.initiateDeviceAuthorization(tv, { scope: 'openid profile' })
  t.equal(authorization.interval, 5, 'RFC 8628 section 3.2: the interval')
  const poll = async () => await fetch(`${issuer}/token`, form({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', client_id: 'tv', device_code: authorization.device_code }))
  const first = await poll()
  t.same([first.status, (await first.json()).error], [400, 'authorization_pending'])
  const sooner = await poll()
  t.same([sooner.status, (await sooner.json()).error], [400, 'slow_down'])
  t.equal(sooner.headers.get('retry-after'), '5')
  clock.t += 5000
  const later = await poll()
  t.same([later.status, (await later.json()).error], [400, 'authorization_pending'], 'a poll after the interval reaches oidc-provider')
})

t.test('authorization, PAR, introspection, revocation and userinfo are paced too', { skip }, async t => {
  const { app, issuer } = await serve(t)
  const reporting = await configFor(issuer, 'reporting', client.ClientSecretBasic('reporting-secret'))
  const { access_token: token } = await client.clientCredentialsGrant(reporting, { scope: 'reports:read' })
  const introspection = await client.tokenIntrospection(reporting, token)
  t.equal(introspection.active, true)
  await client.tokenRevocation(reporting, token)
  t.equal(app.pace.counts('introspection').granted, 1)
  t.equal(app.pace.counts('revocation').granted, 1)
  const wrong = await fetch(`${issuer}/token/introspection`, form({ token, client_id: 'reporting', client_secret: 'wrong' }))
  t.equal(wrong.status, 401)
  t.equal(app.pace.counts('introspection').refunded, 1, 'a stranger\'s introspection is refunded')
  const webapp = await configFor(issuer, 'webapp', client.ClientSecretBasic('webapp-secret'))
  const par = await client.buildAuthorizationUrlWithPAR(webapp, { redirect_uri: 'https://webapp.example/callback', scope: 'openid', code_challenge: await client.calculatePKCECodeChallenge(client.randomPKCECodeVerifier()), code_challenge_method: 'S256' })
  t.match(par.searchParams.get('request_uri'), /^urn:ietf:params:oauth:request_uri:/)
  t.equal(app.pace.counts('par').granted, 1)
  const authorize = await fetch(par, { redirect: 'manual' })
  t.equal(authorize.status, 303, 'the authorization endpoint hands the user to sign-in')
  t.equal(authorize.headers.get('ratelimit-policy'), '"authorization";q=10;w=1')
  const userinfo = await fetch(`${issuer}/me`, { headers: { authorization: 'Bearer made-up' } })
  t.equal(userinfo.status, 401)
  t.match(userinfo.headers.get('ratelimit'), /"userinfo-failures";r=19/, 'an invalid token spends the source\'s failure budget')
  const discovery = await fetch(`${issuer}/.well-known/openid-configuration`)
  t.equal(discovery.headers.get('ratelimit-policy'), null, 'discovery: the provider mounted with @fastify/middie, unpaced')
  t.equal((await fetch(`${issuer}/nothing`)).status, 404, 'a path the provider does not serve')
})

t.test('the example\'s store, account lookup and error page answer as oidc-provider\'s contracts ask', { skip }, async t => {
  const { memoryAdapter, findAccount, renderError } = await import('../../examples/oidc-provider.js')
  const Adapter = memoryAdapter()
  const codes = new Adapter('DeviceCode')
  await codes.upsert('d1', { userCode: 'ABCD-EFGH', grantId: 'g1' }, 600)
  await codes.upsert('d2', { uid: 'u2' })
  t.same(await codes.findByUserCode('ABCD-EFGH'), { userCode: 'ABCD-EFGH', grantId: 'g1' })
  t.same(await codes.findByUid('u2'), { uid: 'u2' })
  t.equal(await codes.findByUserCode('NONE-NONE'), undefined)
  t.equal(await codes.findByUid('none'), undefined)
  await codes.consume('d1')
  await codes.consume('none')
  t.type((await codes.find('d1')).consumed, 'number')
  await codes.revokeByGrantId('g1')
  t.equal(await codes.find('d1'), undefined, 'revoked with its grant')
  await codes.destroy('d2')
  t.equal(await codes.find('d2'), undefined)
  await codes.upsert('d3', {}, -1)
  t.equal(await codes.find('d3'), undefined, 'expired')
  const account = await findAccount({}, 'alice')
  t.same([account.accountId, await account.claims()], ['alice', { sub: 'alice' }])
  const ctx: { type?: string, body?: unknown } = {}
  await renderError(ctx, { error: 'invalid_request' })
  t.same(ctx, { type: 'json', body: { error: 'invalid_request' } })
})
