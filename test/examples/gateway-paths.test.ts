import t from 'tap'
import http from 'node:http'
import { readFileSync } from 'node:fs'
import { runInThisContext } from 'node:vm'
import type { AddressInfo } from 'node:net'
import type { FastifyInstance } from 'fastify'
import { buildGateway, HYDRA_PATHS, keycloakPaths, OIDC_PROVIDER_PATHS } from '../../examples/gateway.js'
import { floodOfMadeUpIds, spendSourceBudget, type SendGuess } from '../helpers/made-up-ids.js'
import type { TapTest } from '../helpers/shared-behaviour.js'
import type { OutcomeOf } from '../../lib/index.js'

/**
 * examples/gateway.js in front of an upstream that answers what it received (its method, path and
 * body, as bytes): the paths of Keycloak and Hydra, the body byte for byte, every upstream header
 * and status back, the outcome from the upstream's answer. Runs on every Node (no oidc-provider).
 */

interface Received { method: string, url: string, body: string, headers: http.IncomingHttpHeaders }

async function echo (t: TapTest, answer: (received: Received, res: http.ServerResponse) => void): Promise<string> {
  const upstream = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', chunk => chunks.push(chunk))
    req.on('end', () => answer({ method: req.method!, url: req.url!, body: Buffer.concat(chunks).toString('latin1'), headers: req.headers }, res))
  })
  await new Promise<void>(resolve => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise(resolve => upstream.close(resolve)))
  return `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
}

interface GatewayOptions { paths?: Record<string, string>, outcomeOf?: OutcomeOf, isClient?: (id: string) => boolean, now?: () => number }

async function gatewayTo (t: TapTest, upstream: string, { paths, outcomeOf, isClient, now = () => 0 }: GatewayOptions = {}): Promise<FastifyInstance> {
  const gateway: FastifyInstance = await buildGateway({ upstream, paths, now, outcomeOf, isClient })
  t.teardown(() => gateway.close())
  return gateway
}

const echoed = (received: Received, res: http.ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' })
  res.end(JSON.stringify(received))
}

t.test('Keycloak\'s and Hydra\'s endpoint paths are forwarded as they are, the body byte for byte', async t => {
  const upstream = await echo(t, echoed)
  // Percent-encodings in an order and case no re-encoding would keep, and a client assertion.
  const body = 'grant_type=client_credentials&client_id=billing&client_secret=b%69lling%2dsecret+%7e&scope=a%20b'
  for (const paths of [keycloakPaths('acme'), HYDRA_PATHS]) {
    const gateway = await gatewayTo(t, upstream, { paths })
    const response = await gateway.inject({ method: 'POST', url: paths.token, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: body })
    const received = response.json() as Received
    t.same([received.method, received.url, received.body], ['POST', paths.token, body])
    t.equal(response.headers['x-upstream'], 'yes', 'the upstream\'s headers come back')
    t.match(response.headers.ratelimit, /"token";r=4;t=1/)
    const authorize = await gateway.inject({ method: 'GET', url: `${paths.authorization}?client_id=webapp` })
    t.same((authorize.json() as Received).url, `${paths.authorization}?client_id=webapp`)
  }
  t.equal(keycloakPaths('acme').token, '/realms/acme/protocol/openid-connect/token')
})

t.test('the outcome is read from the upstream\'s answer: a 401 or a 400 invalid_client refunds the client named', async t => {
  const answers = new Map<string, [number, object]>([
    ['wrong', [401, { error: 'invalid_client' }]],
    ['wrong-400', [400, { error: 'invalid_client' }]],
    ['mistake', [400, { error: 'invalid_grant' }]]
  ])
  const upstream = await echo(t, (received, res) => {
    const [status, body] = answers.get(new URLSearchParams(received.body).get('client_secret')!)!
    res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
    res.end(JSON.stringify(body))
  })
  const gateway = await gatewayTo(t, upstream)
  const ask = async (secret: string) => await gateway.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `grant_type=client_credentials&client_id=billing&client_secret=${secret}` })
  for (const secret of ['wrong', 'wrong-400']) {
    const response = await ask(secret)
    t.same([response.statusCode, response.json()], [answers.get(secret)![0], { error: 'invalid_client' }])
    t.equal(response.headers['cache-control'], 'no-store')
    t.equal(gateway.pace.get('token')!.size, 0, `${secret}: refunded`)
  }
  await ask('mistake')
  t.equal(gateway.pace.get('token')!.size, 1, 'an authenticated client\'s own mistake stays spent')
})

/** An upstream answering every request `status` with the JSON `body`, as a server's source writes it. */
async function answering (t: TapTest, status: number, body: object): Promise<string> {
  return await echo(t, (_received, res) => {
    res.writeHead(status, { 'content-type': 'application/json' })
    res.end(JSON.stringify(body))
  })
}

const tokenForm = (paths: Record<string, string>, payload: string) => ({ method: 'POST' as const, url: paths.token, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload })

t.test('Keycloak\'s and Hydra\'s answers to a wrong secret, as their sources write them, refund the client named by default', async t => {
  const answers = [
    // keycloak/keycloak ClientIdAndSecretAuthenticator.java, reportFailedAuth
    { paths: keycloakPaths('acme'), status: 401, body: { error: 'unauthorized_client', error_description: 'Invalid client or Invalid client credentials' } },
    // ory/fosite ErrInvalidClient (errors.go), from client_authentication.go on a secret that does not match
    { paths: HYDRA_PATHS, status: 401, body: { error: 'invalid_client', error_description: 'Client authentication failed (e.g., unknown client, no client authentication included, or unsupported authentication method).' } }
  ]
  for (const { paths, status, body } of answers) {
    const gateway = await gatewayTo(t, await answering(t, status, body), { paths })
    const response = await gateway.inject(tokenForm(paths, 'grant_type=client_credentials&client_id=billing&client_secret=wrong'))
    t.same([response.statusCode, response.json()], [status, body], 'the answer comes back as it was')
    t.same([gateway.pace.counts('token').refunded, gateway.pace.get('token')!.size], [1, 0], `${body.error}: refunded to the client named`)
  }
  // keycloak/keycloak TokenEndpoint: an authenticated client asking for a grant it may not use.
  const refused = await gatewayTo(t, await answering(t, 400, { error: 'unauthorized_client', error_description: 'Client not allowed for direct access grants' }), { paths: keycloakPaths('acme') })
  await refused.inject(tokenForm(keycloakPaths('acme'), 'grant_type=password&client_id=billing&client_secret=billing-secret&username=a&password=b'))
  t.same([refused.pace.counts('token').refunded, refused.pace.get('token')!.size], [0, 1], 'a 400 unauthorized_client is an exchange that took place')
})

/** The outcomeOf docs/gateway.md shows for Keycloak releases before keycloak#7391, evaluated as written there. */
function documentedOutcomeOf (): OutcomeOf {
  const doc = readFileSync(new URL('../../docs/gateway.md', import.meta.url), 'utf8')
  const source = /outcomeOf: (\(\{ statusCode, body \}, request\) =>[\s\S]*?'accepted')\n/.exec(doc)
  if (source === null) throw new Error('docs/gateway.md shows no outcomeOf')
  return runInThisContext(`(${source[1]})`) as OutcomeOf
}

t.test('an older Keycloak\'s failed client assertion, 400 unauthorized_client, is read with the outcomeOf of docs/gateway.md', async t => {
  const paths = keycloakPaths('acme')
  const upstream = await answering(t, 400, { error: 'unauthorized_client', error_description: 'Client authentication with signed JWT failed: Signature on JWT token failed validation' })
  // A private_key_jwt assertion naming billing (its signature is the upstream's to check).
  const jwt = [{ alg: 'RS256' }, { iss: 'billing', sub: 'billing' }].map(part => Buffer.from(JSON.stringify(part)).toString('base64url')).join('.') + '.c2ln'
  const assertion = `grant_type=client_credentials&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion=${jwt}`
  const unseen = await gatewayTo(t, upstream, { paths })
  await unseen.inject(tokenForm(paths, assertion))
  t.equal(unseen.pace.get('token')!.size, 1, 'by default, a 400 unauthorized_client is an exchange that took place')
  const gateway = await gatewayTo(t, upstream, { paths, outcomeOf: documentedOutcomeOf() })
  await gateway.inject(tokenForm(paths, assertion))
  t.same([gateway.pace.counts('token').refunded, gateway.pace.get('token')!.size], [1, 0], 'with outcomeOf, a failed client authentication')
  await gateway.inject(tokenForm(paths, 'grant_type=password&client_id=billing&client_secret=billing-secret&username=a&password=b'))
  t.equal(gateway.pace.get('token')!.size, 1, 'a 400 unauthorized_client to a request with no assertion stays spent')
})

t.test('a JSON body is forwarded byte for byte, and one that is not JSON is a 400 that never reaches the upstream', async t => {
  let reached = 0
  const upstream = await echo(t, (received, res) => { reached++; echoed(received, res) })
  const gateway = await gatewayTo(t, upstream)
  const body = '{ "client_id" : "billing",\n"client_secret": "b\\u0069lling" }'
  const response = await gateway.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/json' }, payload: body })
  t.equal((response.json() as Received).body, body, 'spaces and escapes as sent')
  const broken = await gateway.inject({ method: 'POST', url: '/token', headers: { 'content-type': 'application/json' }, payload: '{ "client_id": ' })
  t.equal(broken.statusCode, 400)
  t.equal(reached, 1, 'only the JSON one reached the upstream')
})

/** A wrong secret under `clientId` from `from`, through `gateway` by inject. */
const guessTo = (gateway: FastifyInstance): SendGuess => async (clientId, from) => {
  const response = await gateway.inject({ ...tokenForm(OIDC_PROVIDER_PATHS, `grant_type=client_credentials&client_id=${clientId}&client_secret=guess`), remoteAddress: from })
  return { status: response.statusCode, retryAfter: Number(response.headers['retry-after']), body: response.body }
}

/** The upstream's client ids, as the operator gives them to the gateway. */
const registry = new Set(['billing', 'reporting'])
const isClient = (id: string): boolean => registry.has(id)
const FLOODERS = ['192.0.2.1', '192.0.2.2', '2001:db8:1:2::1']

t.test('with the upstream\'s client ids, made-up ids leave no row keyed by a client id; without them, a pair row per id', async t => {
  const upstream = await answering(t, 401, { error: 'invalid_client' })
  for (const given of [true, false]) {
    const gateway = await gatewayTo(t, upstream, given ? { isClient } : {})
    await floodOfMadeUpIds(t, gateway, guessTo(gateway), { sources: FLOODERS, perSource: 10, isClient: given })
  }
})

t.test('the per-source failure budget refuses an address after 100 failures a day, whatever ids they name', async t => {
  const clock = { t: 0 }
  const gateway = await gatewayTo(t, await answering(t, 401, { error: 'invalid_client' }), { isClient, now: () => clock.t })
  await spendSourceBudget(t, guessTo(gateway), ms => { clock.t += ms }, FLOODERS[0])
  t.equal((await guessTo(gateway)('made-up', FLOODERS[1])).status, 401, 'another address still reaches the upstream')
  for (const path of [OIDC_PROVIDER_PATHS.par, OIDC_PROVIDER_PATHS.introspection, OIDC_PROVIDER_PATHS.revocation]) {
    const elsewhere = await gateway.inject({ ...tokenForm({ token: path }, 'client_id=billing&client_secret=guess&token=x'), remoteAddress: FLOODERS[0] })
    t.same([elsewhere.statusCode, /source-failures/.test(elsewhere.body)], [429, true], `${path}: the same budget, spent at the token endpoint`)
  }
})

t.test('a client missing from the ids the gateway was given is paced by its address alone', async t => {
  const gateway = await gatewayTo(t, await echo(t, echoed), { isClient: id => id === 'reporting' })
  const ask = async (id: string) => (await gateway.inject(tokenForm(OIDC_PROVIDER_PATHS, `grant_type=client_credentials&client_id=${id}&client_secret=${id}-secret`))).statusCode
  const statuses = []
  for (let i = 0; i < 6; i++) statuses.push(await ask('billing'))
  t.same(statuses, Array(6).fill(200), 'billing, not in the set: its rate of 5 a second is not kept')
  t.equal(gateway.pace.get('token')!.size, 0)
  for (let i = 0; i < 5; i++) await ask('reporting')
  t.equal(await ask('reporting'), 429, 'reporting, in the set: the sixth in a second is refused')
})
