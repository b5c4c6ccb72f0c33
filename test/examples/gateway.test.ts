import t from 'tap'
import http from 'node:http'
import { readFileSync } from 'node:fs'
import { createPrivateKey } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import * as client from 'openid-client'
import type { FastifyInstance } from 'fastify'
import { needsNode } from '../helpers/node.js'
import { freePort } from '../helpers/port.js'
import { floodOfMadeUpIds, spendSourceBudget, type SendGuess } from '../helpers/made-up-ids.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

/**
 * examples/gateway.js over real HTTP, in front of oidc-provider started unpaced (its default
 * endpoint paths), driven by openid-client and fetch. The upstream needs Node 22 or later.
 */

const skip = needsNode(22)

interface Served { gateway: FastifyInstance, base: string, issuer: string, clock: { t: number } }

/**
 * oidc-provider unpaced and the gateway in front of it, given the upstream's client ids
 * (`isClient`, examples/client-auth.js's CLIENTS, which oidc-provider serves) as the recommended
 * set-up is, or not given them (`registry: false`).
 */
async function serve (t: TapTest, { registry = true } = {}): Promise<Served> {
  const { provider } = await import('../../examples/oidc-provider.js')
  const { buildGateway } = await import('../../examples/gateway.js')
  const { CLIENTS } = await import('../../examples/client-auth.js')
  const port = await freePort()
  const issuer = `http://127.0.0.1:${port}`
  const upstream = http.createServer(provider(issuer).callback())
  await new Promise<void>(resolve => upstream.listen(port, '127.0.0.1', resolve))
  t.teardown(() => new Promise(resolve => upstream.close(resolve)))
  const clock = { t: 0 }
  const isClient = registry ? (id: string) => CLIENTS.has(id) : undefined
  const gateway: FastifyInstance = await buildGateway({ upstream: issuer, now: () => clock.t, trustProxy: '127.0.0.1', isClient })
  t.teardown(() => gateway.close())
  await gateway.listen({ port: 0, host: '127.0.0.1' })
  const base = `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`
  return { gateway, base, issuer, clock }
}

/** openid-client's view of the server through the gateway: the upstream's issuer, the gateway's endpoints. */
function configFor (served: Served, id: string, auth: client.ClientAuth): client.Configuration {
  const { base, issuer } = served
  const config = new client.Configuration({
    issuer,
    token_endpoint: `${base}/token`,
    device_authorization_endpoint: `${base}/device/auth`,
    introspection_endpoint: `${base}/token/introspection`,
    revocation_endpoint: `${base}/token/revocation`,
    pushed_authorization_request_endpoint: `${base}/request`,
    authorization_endpoint: `${base}/auth`
  }, id, undefined, auth)
  client.allowInsecureRequests(config)
  return config
}

const form = (pairs: Record<string, string>, from = '127.0.0.1') => ({ method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': from }, body: new URLSearchParams(pairs).toString() })

/** The guesser's address, as the gateway's proxy (127.0.0.1, trusted) forwards it. */
const GUESSER = '203.0.113.7'

t.test('client_secret_basic, client_secret_post and private_key_jwt verify upstream through the gateway, at the client\'s rate', { skip }, async t => {
  const served = await serve(t)
  const headers: Headers[] = []
  const billing = configFor(served, 'billing', client.ClientSecretPost('billing-secret'))
  billing[client.customFetch] = async (url, options) => {
    const response = await fetch(url, options as RequestInit)
    headers.push(response.headers)
    return response
  }
  t.type((await client.clientCredentialsGrant(billing, { scope: 'invoices:read' })).access_token, 'string')
  t.equal(headers[0].get('cache-control'), 'no-store', 'the upstream\'s headers come back')
  t.match(headers[0].get('ratelimit'), /"token";r=4;t=1/, 'with the quota headers')
  const reporting = configFor(served, 'reporting', client.ClientSecretBasic('reporting-secret'))
  t.type((await client.clientCredentialsGrant(reporting)).access_token, 'string')
  const analyticsKey = createPrivateKey({ key: JSON.parse(readFileSync('test/fixtures/analytics-key.json', 'utf8')), format: 'jwk' })
  const key = await crypto.subtle.importKey('jwk', analyticsKey.export({ format: 'jwk' }), { name: 'ECDSA', namedCurve: 'P-256' }, false, ['sign'])
  const analytics = configFor(served, 'analytics', client.PrivateKeyJwt(key))
  t.type((await client.clientCredentialsGrant(analytics, { scope: 'reports:read' })).access_token, 'string', 'the assertion arrived byte for byte')
  for (let i = 0; i < 4; i++) await client.clientCredentialsGrant(billing)
  await t.rejects(client.clientCredentialsGrant(billing), { name: 'ResponseBodyError', status: 429, error: 'temporarily_unavailable' })
})

t.test('a guesser is refused after five wrong secrets, each refunded to the client it names', { skip }, async t => {
  const served = await serve(t)
  const { gateway, base } = served
  for (let i = 0; i < 5; i++) {
    const wrong = await fetch(`${base}/token`, form({ grant_type: 'client_credentials', client_id: 'billing', client_secret: 'guess' }, GUESSER))
    t.equal(wrong.status, 401, 'the upstream\'s status comes back')
  }
  const sixth = await fetch(`${base}/token`, form({ grant_type: 'client_credentials', client_id: 'billing', client_secret: 'guess' }, GUESSER))
  t.equal(sixth.status, 429)
  t.equal(gateway.pace.counts('token').refunded, 5)
  t.equal(gateway.pace.get('token')!.size, 0)
  const billing = configFor(served, 'billing', client.ClientSecretPost('billing-secret'))
  for (let i = 0; i < 5; i++) await client.clientCredentialsGrant(billing)
  t.equal(gateway.pace.counts('token').refused, 0, 'the real client keeps its rate')
})

/** A wrong secret under `clientId` from `from`, through the gateway over HTTP. */
const guessThrough = (base: string): SendGuess => async (clientId, from) => {
  const response = await fetch(`${base}/token`, form({ grant_type: 'client_credentials', client_id: clientId, client_secret: 'guess' }, from))
  return { status: response.status, retryAfter: Number(response.headers.get('retry-after')), body: await response.text() }
}

/** Three forwarded addresses: two IPv4, one IPv6 /64. */
const FLOODERS = [GUESSER, '198.51.100.20', '2001:db8:1:2::1']

t.test('with the upstream\'s client ids, a flood of made-up ids leaves no row keyed by a client id, a row per address', { skip }, async t => {
  const { gateway, base } = await serve(t)
  await floodOfMadeUpIds(t, gateway, guessThrough(base), { sources: FLOODERS, perSource: 10, isClient: true })
})

t.test('without them, each made-up id keeps a row in the pair\'s failure budget', { skip }, async t => {
  const { gateway, base } = await serve(t, { registry: false })
  await floodOfMadeUpIds(t, gateway, guessThrough(base), { sources: FLOODERS, perSource: 10, isClient: false })
})

t.test('an address is refused after 100 failures a day, whatever ids they name', { skip }, async t => {
  const { base, clock } = await serve(t)
  await spendSourceBudget(t, guessThrough(base), ms => { clock.t += ms }, GUESSER)
  const billing = await fetch(`${base}/token`, form({ grant_type: 'client_credentials', client_id: 'billing', client_secret: 'billing-secret' }, '198.51.100.20'))
  t.equal(billing.status, 200, 'another address is served')
})

t.test('the device grant through the gateway: polls faster than the interval are answered 400 slow_down', { skip }, async t => {
  const served = await serve(t)
  const tv = configFor(served, 'tv', client.None())
  const authorization = await client.initiateDeviceAuthorization(tv, { scope: 'openid' })
  const poll = async () => await fetch(`${served.base}/token`, form({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', client_id: 'tv', device_code: authorization.device_code }))
  const direct = async () => (await (await fetch(`${served.issuer}/token`, form({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', client_id: 'tv', device_code: authorization.device_code }))).json()).error
  t.same([await direct(), await direct(), await direct()], Array(3).fill('authorization_pending'), 'oidc-provider unpaced never answers slow_down')
  t.equal((await (await poll()).json()).error, 'authorization_pending')
  t.equal((await (await poll()).json()).error, 'slow_down')
  served.clock.t += 5000
  t.equal((await (await poll()).json()).error, 'authorization_pending')
})

t.test('introspection, revocation, PAR and authorization are forwarded and paced', { skip }, async t => {
  const served = await serve(t)
  const { gateway, base } = served
  const reporting = configFor(served, 'reporting', client.ClientSecretBasic('reporting-secret'))
  const { access_token: token } = await client.clientCredentialsGrant(reporting)
  t.equal((await client.tokenIntrospection(reporting, token)).active, true)
  await client.tokenRevocation(reporting, token)
  t.same([gateway.pace.counts('introspection').granted, gateway.pace.counts('revocation').granted], [1, 1])
  const webapp = configFor(served, 'webapp', client.ClientSecretBasic('webapp-secret'))
  const par = await client.buildAuthorizationUrlWithPAR(webapp, { redirect_uri: 'https://webapp.example/callback', scope: 'openid', code_challenge: await client.calculatePKCECodeChallenge(client.randomPKCECodeVerifier()), code_challenge_method: 'S256' })
  t.equal(gateway.pace.counts('par').granted, 1)
  const authorize = await fetch(par, { redirect: 'manual' })
  t.equal(authorize.status, 303)
  t.equal(authorize.headers.get('ratelimit-policy'), '"authorization";q=10;w=1')
  t.equal(new URL(base).host, par.host)
})

t.test('a JSON body goes upstream as it came; one that does not parse is answered 400 by the gateway', { skip }, async t => {
  const { base } = await serve(t)
  const json = await fetch(`${base}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ grant_type: 'client_credentials', client_id: 'billing', client_secret: 'billing-secret' }) })
  t.same([json.status, (await json.json()).error], [400, 'invalid_request'], 'oidc-provider reads forms only, and says so')
  const broken = await fetch(`${base}/token`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' })
  t.equal(broken.status, 400)
})
