import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { buildServer, curlLines } from '../../examples/server.js'

/**
 * The example authorization server's OAuth behaviour (RFC 6749): which failures refund the client's
 * unit (client authentication) and which stay spent (an authenticated client's own mistakes).
 */

const form = { 'content-type': 'application/x-www-form-urlencoded' }
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`

async function server (tt: typeof t) {
  const app = buildServer({ now: () => 0 })
  tt.teardown(() => app.close())
  await app.ready()
  const token = (headers: Record<string, string>, payload: string) => app.inject({ method: 'POST', url: '/token', headers, payload })
  const clientRows = () => app.pace.get('/token#client')!.size
  return { app, token, clientRows }
}

t.test('client_secret_basic and client_secret_post both get a token, and spend', async t => {
  const { token, clientRows } = await server(t)
  const viaBasic = await token({ ...form, authorization: basic('reporting', 'reporting-secret') }, 'grant_type=client_credentials')
  t.equal(viaBasic.statusCode, 200)
  t.match(viaBasic.json(), { access_token: String, token_type: 'Bearer', expires_in: 3600, scope: 'reports:read' })
  t.equal(viaBasic.headers['cache-control'], 'no-store')
  const viaPost = await token(form, 'grant_type=client_credentials&client_id=billing&client_secret=billing-secret&scope=invoices:read')
  t.equal(viaPost.statusCode, 200)
  t.equal(viaPost.json().scope, 'invoices:read')
  t.equal(clientRows(), 2)
})

t.test('every failure of client authentication is refunded and leaves no row', async t => {
  const { app, token, clientRows } = await server(t)
  const cases: Array<[string, Record<string, string>, string, number, string]> = [
    ['a wrong Basic secret', { ...form, authorization: basic('reporting', 'guess') }, 'grant_type=client_credentials', 401, 'invalid_client'],
    ['a Basic secret that does not decode', { ...form, authorization: basic('reporting', '100%') }, 'grant_type=client_credentials', 401, 'invalid_client'],
    ['a wrong posted secret', form, 'grant_type=client_credentials&client_id=reporting&client_secret=guess', 401, 'invalid_client'],
    ['a posted id without a secret', form, 'grant_type=client_credentials&client_id=reporting', 401, 'invalid_client'],
    ['an unknown client', form, 'grant_type=client_credentials&client_id=nobody&client_secret=x', 401, 'invalid_client'],
    ['a client assertion', form, 'grant_type=client_credentials&client_assertion_type=jwt&client_assertion=e30.eyJzdWIiOiJyZXBvcnRpbmcifQ.x', 401, 'invalid_client'],
    ['two authentication methods', { ...form, authorization: basic('reporting', 'reporting-secret') }, 'grant_type=client_credentials&client_secret=reporting-secret', 400, 'invalid_request'],
    ['no client id at all', form, 'grant_type=client_credentials', 401, 'invalid_client']
  ]
  for (const [what, headers, payload, statusCode, error] of cases) {
    const response = await token(headers, payload)
    t.equal(response.statusCode, statusCode, what)
    t.equal(response.json().error, error, what)
    // The caller's own quotas only: its address's ceiling and failure budget, and its failure
    // budget for the id it named when that id names a client (isClient).
    const failures = (headers.authorization !== undefined || /client_id=/.test(payload)) && !/client_id=nobody/.test(payload) ? ', "/token#client+source:rejected";q=5;w=3600' : ''
    t.equal(response.headers['ratelimit-policy'], `"/token#source";q=50;w=1${failures}, "/token#source:rejected";q=100;w=86400`, `${what}: only the caller's own quotas are shown`)
  }
  t.equal(clientRows(), 0)
  t.equal(app.pace.get('/token#client+source:rejected')!.size, 1, 'the failures naming a client are kept per id and address: reporting\'s; nobody, named by no client, has no row')
  t.equal(app.pace.get('/token#source:rejected')!.size, 1, 'every failure is counted for its address')
})

t.test('a guesser gets five wrong secrets an hour from one address; the client, from its own, keeps its rate', async t => {
  const { app } = await server(t)
  const from = (address: string, secret: string) => app.inject({ method: 'POST', url: '/token', remoteAddress: address, headers: { ...form, authorization: basic('reporting', secret) }, payload: 'grant_type=client_credentials' })
  const guesses = []
  for (let i = 0; i < 7; i++) guesses.push((await from('203.0.113.9', `guess-${i}`)).statusCode)
  t.same(guesses, [...Array(5).fill(401), 429, 429])
  const refused = await from('203.0.113.9', 'reporting-secret')
  t.equal(refused.statusCode, 429, 'even the right secret: the budget is spent before credentials are checked')
  t.equal(refused.headers['retry-after'], '720', 'one failure back every 12 minutes')
  const client = []
  for (let i = 0; i < 6; i++) client.push((await from('198.51.100.7', 'reporting-secret')).statusCode)
  t.same(client, [200, 200, 200, 200, 200, 429], 'its own 5 a second')
})

t.test('a failed Basic authentication is a 401 with a Basic challenge', async t => {
  const { token } = await server(t)
  const response = await token({ ...form, authorization: basic('reporting', 'guess') }, 'grant_type=client_credentials')
  t.match(response.headers['www-authenticate'], /^Basic realm=/)
  const posted = await token(form, 'grant_type=client_credentials&client_id=reporting&client_secret=guess')
  t.equal(posted.headers['www-authenticate'], undefined)
})

t.test("an authenticated client's own mistakes stay spent", async t => {
  const { token, clientRows } = await server(t)
  const cases: Array<[string, string, string, string]> = [
    ['no grant_type', 'client_id=reporting&client_secret=reporting-secret', 'invalid_request', 'reporting'],
    ['another grant type', 'grant_type=password&client_id=reporting&client_secret=reporting-secret', 'unsupported_grant_type', 'reporting'],
    ['a grant the client may not use', 'grant_type=client_credentials&client_id=webapp&client_secret=webapp-secret', 'unauthorized_client', 'webapp'],
    ['a scope the client may not have', 'grant_type=client_credentials&client_id=billing&client_secret=billing-secret&scope=admin', 'invalid_scope', 'billing']
  ]
  for (const [what, payload, error] of cases) {
    const response = await token(form, payload)
    t.equal(response.statusCode, 400, what)
    t.equal(response.json().error, error, what)
  }
  t.equal(clientRows(), 3, 'reporting, webapp and billing each spent')
})

t.test('schema validation failures are OAuth invalid_request answers', async t => {
  const { token } = await server(t)
  const repeated = await token(form, 'grant_type=client_credentials&client_id=a&client_id=b')
  t.equal(repeated.statusCode, 400)
  t.match(repeated.json(), { error: 'invalid_request', error_description: /client_id/ })
  const noBody = await token({}, '')
  t.equal(noBody.statusCode, 400)
  t.equal(noBody.json().error, 'invalid_request')
})

t.test('a body Fastify cannot read is the client\'s error: invalid_request with its status, nothing spent from the client', async t => {
  const { token, clientRows } = await server(t)
  const cases: Array<[Record<string, string>, string, number]> = [
    [{ 'content-type': 'application/json' }, '{"client_id": "reporting"', 400],
    [{ 'content-type': 'application/xml' }, '<client_id>reporting</client_id>', 415],
    [{ ...form, authorization: basic('reporting', 'x') }, 'grant_type=client_credentials&'.padEnd(2_000_000, 'a'), 413]
  ]
  for (const [headers, payload, status] of cases) {
    const response = await token(headers, payload)
    t.equal(response.statusCode, status, headers['content-type'])
    t.equal(response.json().error, 'invalid_request')
  }
  t.equal(clientRows(), 0)
})

t.test('an unexpected error is a server_error', async t => {
  const app = buildServer({ now: () => 0 })
  t.teardown(() => app.close())
  app.addHook('preHandler', async () => { throw new Error('boom') })
  const response = await app.inject({ method: 'GET', url: '/authorize?client_id=webapp' })
  t.equal(response.statusCode, 500)
  t.same(response.json(), { error: 'server_error', error_description: 'the server could not complete the request' })
})

t.test('the authorization endpoint answers through the redirect URI', async t => {
  const { app } = await server(t)
  const authorize = (query: string) => app.inject({ method: 'GET', url: `/authorize?${query}` })
  const redirected: Array<[string, RegExp]> = [
    ['response_type=code&client_id=webapp&state=s1', /^https:\/\/webapp\.example\/callback\?code=[\w-]+&state=s1$/],
    ['response_type=code&client_id=mobile&redirect_uri=com.example.mobile%3A%2Fcallback', /^com\.example\.mobile:\/callback\?code=[\w-]+$/],
    ['response_type=code&client_id=webapp&redirect_uri=https%3A%2F%2Fwebapp.example%2Fcallback&scope=profile', /\?code=[\w-]+$/],
    ['client_id=webapp&state=s2', /\?error=invalid_request&state=s2$/],
    ['response_type=token&client_id=webapp', /\?error=unsupported_response_type$/],
    ['response_type=code&client_id=webapp&scope=admin', /\?error=invalid_scope$/]
  ]
  for (const [query, location] of redirected) {
    const response = await authorize(query)
    t.equal(response.statusCode, 302, query)
    t.match(response.headers.location, location, query)
  }
})

t.test('an unknown client or an unregistered redirect URI is answered here, not redirected', async t => {
  const { app } = await server(t)
  const authorize = (query: string) => app.inject({ method: 'GET', url: `/authorize?${query}` })
  for (const query of ['response_type=code', 'response_type=code&client_id=nobody', 'response_type=code&client_id=reporting', 'response_type=code&client_id=webapp&redirect_uri=https%3A%2F%2Fevil.example%2F', 'response_type=code&client_id=mobile']) {
    const response = await authorize(query)
    t.equal(response.statusCode, 400, `${query}: answered here, not redirected`)
    t.equal(response.json().error, 'invalid_request')
  }
})

t.test('npm start listens and prints curl lines', async t => {
  const script = fileURLToPath(new URL('../../examples/server.js', import.meta.url))
  const child = spawn(process.execPath, [script], { env: { ...process.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'ignore'] })
  t.teardown(() => { child.kill() })
  let output = ''
  for await (const chunk of child.stdout) {
    output += String(chunk)
    if (output.includes('/openapi.json\n')) break
  }
  const base = /server on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)![1]
  t.ok(output.includes(curlLines(base).join('\n')))
  const response = await fetch(`${base}/token`, { method: 'POST', headers: { ...form, authorization: basic('reporting', 'reporting-secret') }, body: 'grant_type=client_credentials' })
  t.equal(response.status, 200)
})
