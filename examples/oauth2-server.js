// An OAuth 2.0 authorization server built on @node-oauth/oauth2-server, paced by exchangepace.
//
//   POST /token       client_credentials and authorization_code (with PKCE), the client
//                     authenticated with client_secret_basic or client_secret_post
//   GET  /authorize   the authorization endpoint of the code flow
//   /admin/paces      the operator's routes: inspect, reset and block a key of a pace, behind a
//                     bearer token of their own (ADMIN_TOKEN)
//
// The library knows nothing of Fastify: a small adapter hands it the request and sends what it
// answered. The paces are in TOKEN_ENDPOINT_PACES and AUTHORIZATION_ENDPOINT_PACES; the token
// handler tells exchangepace whether the library authenticated the client (docs/oauth2-server.md).
// Run it with `node examples/oauth2-server.js`; PORT changes the port.

import { AsyncLocalStorage } from 'node:async_hooks'
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import OAuth2Server from '@node-oauth/oauth2-server'
import basicAuth from 'basic-auth'
import exchangePace from 'exchangepace'
import { fleetFromEnv } from './fleet.js'

const { OAuthError, Request, Response } = OAuth2Server

/**
 * The token endpoint's paces, as the README recommends them. Each rate is per replica.
 * - a failure budget per (declared client id, source address), spent only by exchanges the library
 *   rejected: 5 an hour, so guessing a client's secret is slow, and the client, calling from its
 *   own addresses, never meets a guesser's budget;
 * - a failure budget per source address, whatever id a failure names: 100 a day. A client id that
 *   names no client (isClient, at registration) spends only this one, so a flood of made-up ids
 *   leaves a row per address, not per id;
 * - per declared client id, spent only by exchanges the library accepted: a request that fails
 *   client authentication gives its unit back to the id it named;
 * - per source address, spent by every request: a ceiling on what one address can try.
 */
const TOKEN_ENDPOINT_PACES = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { limit: 100, window: 86400, key: 'source', spend: 'rejected' },
  // A client's own rate, from its registration (the registry below): at once, no lookup elsewhere.
  { perSecond: 5, key: 'client', spend: 'accepted', rateOf: id => CLIENTS.get(id)?.rate },
  { perSecond: 50, key: 'source', spend: 'every' }
]

/** The authorization endpoint's pace: per source address, every request counts. */
const AUTHORIZATION_ENDPOINT_PACES = [
  { perSecond: 10, key: 'source', spend: 'every' }
]

/**
 * The registered clients, all confidential. Their ids and secrets are made of letters, digits,
 * '-', '.', '_' and '~' (openid-client form-encodes some of these: see `decodedBasic`). A real
 * server keeps hashed secrets in a database. `rate`: the client's own exchanges per second (the
 * token endpoint's `rateOf`), when it has one.
 */
const CLIENTS = new Map([
  ['reporting-service', { id: 'reporting-service', secret: 'rep-s3cret_2026.v1~', grants: ['client_credentials'], scopes: ['reports:read'], redirectUris: [] }],
  ['webapp', { id: 'webapp', secret: 'web-s3cret_2026.v1~', grants: ['authorization_code'], scopes: ['profile'], redirectUris: ['https://webapp.example/callback'] }]
])

/** Compared against when the client id is unknown, so that an unknown id costs as long as a wrong secret. */
const NO_SECRET = randomBytes(32)

/**
 * The operator's credential for /admin, when ADMIN_TOKEN does not give one. A real server takes it
 * from its secret store, and serves /admin on an internal address only.
 */
const DEMO_ADMIN_TOKEN = 'admin-s3cret-change-me'

/**
 * The admin routes' own pace: 5 wrong tokens an hour per source address, so that guessing the
 * operator's token is slow; the operator's own requests (accepted) are refunded.
 */
const ADMIN_PACES = [
  { limit: 5, window: 3600, key: 'source', spend: 'rejected', name: '/admin#source:rejected' }
]

/** The signed-in user of the authorization endpoint. A real server signs the user in and asks for consent. */
const DEMO_USER = { id: 'demo-user' }

/**
 * The token request the library is answering, for its model: `authenticated` turns true when the
 * model's getClient has found the client and its secret. getClient receives ids, not the request,
 * hence the async context.
 */
const exchanges = new AsyncLocalStorage()

/** The client whose secret `secret` is, or undefined; in time that does not depend on where they differ. */
function authenticate (clientId, secret) {
  // No secret at all: the library asks without one for a PKCE request, and no client here is public.
  if (typeof secret !== 'string') return undefined
  const client = CLIENTS.get(clientId)
  const expected = client === undefined ? NO_SECRET : createHash('sha256').update(client.secret).digest()
  const given = createHash('sha256').update(secret).digest()
  return timingSafeEqual(expected, given) && client !== undefined ? client : undefined
}

/** The scopes granted for `requested` (undefined: every scope the client has), or false. */
function validateScope (_user, client, requested) {
  if (requested === undefined) return client.scopes
  return requested.every(scope => client.scopes.includes(scope)) ? requested : false
}

/**
 * The two models the library asks, sharing the codes issued. They differ in getClient: the
 * authorization endpoint only names the client (the library asks with a null secret), the token
 * endpoint authenticates it. Kept apart, a missing secret can never pass for authentication.
 */
function models () {
  // A real server keeps codes in a store that expires them; the library checks expiresAt.
  const codes = new Map()
  const authorization = {
    getClient: async (clientId) => CLIENTS.get(clientId) ?? null,
    validateScope,
    saveAuthorizationCode: async (code, client, user) => {
      const saved = { ...code, client, user }
      codes.set(code.authorizationCode, saved)
      return saved
    }
  }
  const token = {
    getClient: async (clientId, secret) => {
      const client = authenticate(clientId, secret)
      if (client === undefined) return null
      exchanges.getStore().authenticated = true
      return client
    },
    validateScope,
    getUserFromClient: async (client) => ({ id: client.id }),
    getAuthorizationCode: async (code) => codes.get(code) ?? null,
    revokeAuthorizationCode: async (code) => codes.delete(code.authorizationCode),
    saveToken: async (token, client, user) => ({ ...token, client, user })
  }
  return { authorization, token }
}

/** Form-urlencoded decoding (RFC 6749 appendix B): '+' is a space. Null when a '%' is not followed by two hex digits. */
function formDecode (value) {
  try {
    return decodeURIComponent(value.replaceAll('+', ' '))
  } catch {
    return null
  }
}

/**
 * The Authorization header as the library should read it. RFC 6749 section 2.3.1 has the client
 * form-encode its id and secret before Basic encodes them (openid-client sends '-' as '%2D'); the
 * library compares them undecoded and leaves decoding to the application
 * (node-oauth/node-oauth2-server#213). So Basic credentials are handed over decoded, as exchangepace
 * reads the id: the client the library authenticates is the one whose pace was taken. basic-auth,
 * the library's own parser, decides what is Basic. Credentials that do not decode, or an id that
 * holds a ':' once decoded (Basic cannot carry it), are handed over as they came: no client here
 * has a '%' in its id or secret, so the library answers invalid_client.
 */
function decodedBasic (authorization) {
  const credentials = basicAuth.parse(authorization)
  if (credentials === undefined) return authorization
  const id = formDecode(credentials.name)
  const secret = formDecode(credentials.pass)
  if (id === null || secret === null || id.includes(':')) return authorization
  return `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`
}

/** The library's Request for a Fastify request. */
function libraryRequest (request, headers) {
  return new Request({ method: request.method, headers, query: request.query, body: request.body })
}

/**
 * POST /token. The library authenticates the client (in the model's getClient) before anything
 * else it checks. When it gives up before that, the exchange did not take place, and the unit goes
 * back to the client id the request named: a caller without the secret cannot spend a client's
 * pace. Once the client has authenticated, its own mistakes (a grant or scope it may not use, a
 * code that is not valid) stay spent. The error goes on to the error handler.
 */
function tokenHandler (server) {
  return async function token (request, reply) {
    const exchange = { authenticated: false }
    const response = new Response()
    const headers = { ...request.headers, authorization: decodedBasic(request.headers.authorization) }
    try {
      await exchanges.run(exchange, () => server.token(libraryRequest(request, headers), response))
    } catch (error) {
      if (!exchange.authenticated) request.pace.outcome = 'rejected'
      // WWW-Authenticate, when a Basic authentication failed (RFC 6749 section 5.2).
      reply.headers(response.headers)
      throw error
    }
    return reply.code(response.status).headers(response.headers).send(response.body)
  }
}

/**
 * GET /authorize. Until the client and its redirect URI are known, the library throws without a
 * redirect, and the error is answered here (RFC 6749 section 4.1.2.1); after that it sends the
 * error back to the client's redirect URI, as it sends the code.
 */
function authorizeHandler (server) {
  return async function authorize (request, reply) {
    const response = new Response()
    try {
      await server.authorize(libraryRequest(request, request.headers), response)
    } catch (error) {
      if (response.status !== 302) throw error
    }
    return reply.header('cache-control', 'no-store').redirect(response.get('location'), 302)
  }
}

function sendOAuth (reply, statusCode, body) {
  return reply.code(statusCode).header('cache-control', 'no-store').header('pragma', 'no-cache').send(body)
}

/**
 * Every error as an RFC 6749 error response. The library's errors carry their code as their name
 * and their status; Fastify's own 4xx (a schema not passed, a body it cannot read) are the client's
 * malformed request. A server error is logged, and its message (the library's may quote a model's
 * error) is not sent.
 */
function oauthErrorHandler (error, _request, reply) {
  const statusCode = error.validation !== undefined ? 400 : error.statusCode ?? 500
  if (statusCode >= 500) {
    reply.log.error(error)
    return sendOAuth(reply, statusCode, { error: 'server_error', error_description: 'the server could not complete the request' })
  }
  const code = error instanceof OAuthError ? error.name : 'invalid_request'
  return sendOAuth(reply, statusCode, { error: code, error_description: error.message })
}

/** Each parameter at most once (RFC 6749 section 3.1): a repeated one is an array, which fails the schema. */
const parameters = names => ({
  type: 'object',
  properties: Object.fromEntries(names.map(name => [name, { type: 'string' }]))
})

async function routes (app) {
  const { authorization, token } = models()
  app.setErrorHandler(oauthErrorHandler)
  app.post('/token', {
    config: { pace: TOKEN_ENDPOINT_PACES },
    schema: { body: parameters(['grant_type', 'client_id', 'client_secret', 'scope', 'code', 'redirect_uri', 'code_verifier']) }
  }, tokenHandler(new OAuth2Server({ model: token })))
  app.get('/authorize', {
    config: { pace: AUTHORIZATION_ENDPOINT_PACES },
    schema: { querystring: parameters(['response_type', 'client_id', 'redirect_uri', 'scope', 'state', 'code_challenge', 'code_challenge_method']) }
  }, authorizeHandler(new OAuth2Server({ model: authorization, authenticateHandler: { handle: () => DEMO_USER } })))
}

/** The digest of a token, for a comparison whose time does not depend on where two tokens differ. */
function digest (token) {
  return createHash('sha256').update(token).digest()
}

/** `Authorization: Bearer <token>` (RFC 6750 section 2.1), the scheme in any case, and nothing after the token. */
const BEARER = /^bearer +([\w\-.~+/]+=*)$/i

/**
 * The admin routes' guard, a route preHandler (so it runs after the pace's own): a request without
 * `Authorization: Bearer <the admin token>` is a 401 (RFC 6750) and spends the caller's failure
 * budget.
 */
function adminGuard (adminToken) {
  const expected = digest(adminToken)
  return async function guard (request, reply) {
    const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
    if (token !== undefined && timingSafeEqual(digest(token), expected)) return
    request.pace.outcome = 'rejected'
    reply.header('www-authenticate', 'Bearer realm="admin"')
    return sendOAuth(reply, 401, { error: 'invalid_token', error_description: 'the admin routes need the admin bearer token' })
  }
}

/**
 * The errors of the admin routes: exchangepace's TypeError for a request it cannot act on (an
 * unknown pace, parts that do not fit its key, a malformed address, a bad block length) is the
 * operator's mistake, a 400; anything else is handled as every other error.
 */
function adminErrorHandler (error, request, reply) {
  if (error instanceof TypeError && error.message.startsWith('exchangepace: ')) {
    return sendOAuth(reply, 400, { error: 'invalid_request', error_description: error.message })
  }
  return oauthErrorHandler(error, request, reply)
}

/** What the operator names: a pace, the key's parts as `fastify.pace` takes them, and a block's length. */
const OPERATED = {
  type: 'object',
  required: ['pace'],
  properties: {
    pace: { type: 'string' },
    client: { type: 'string' },
    source: { type: 'string' },
    key: { type: 'string' },
    seconds: { type: 'number' },
    by: { type: 'string', minLength: 1, maxLength: 200 }
  }
}

/**
 * A bucket as the admin routes answer it: `fastify.pace.inspect`'s figures, a block's end in ISO
 * 8601; for a client alone on a pair's pace, also the most held-back address and how many are.
 */
function inspected (pace, { remaining, retryAfterMs, fullInMs, blockedUntil, ...client }) {
  return { pace, remaining, retryAfterMs: Math.ceil(retryAfterMs), fullInMs: Math.ceil(fullInMs), blockedUntil: blockedUntil?.toISOString() ?? null, ...client }
}

/**
 * The operator's routes, each a call of `fastify.pace` (docs/operating.md). With a RedisStore they
 * act for every replica; without one, on this replica only.
 * - GET  /admin/paces          the pace names
 * - POST /admin/paces/inspect  { pace, client?, source?, key? }: what the key's bucket holds now (a
 *   client alone on a failure budget's pace: its most held-back address, and how many are held back)
 *   (reset and block take `by`, the operator's name, for the log line and the audit trail; default:
 *   the request's address)
 * - POST /admin/paces/reset    the same: the bucket full again, a block lifted; answers the bucket after
 * - POST /admin/paces/block    the same and { seconds }: nothing granted to the key until then
 */
async function adminRoutes (app, { adminToken }) {
  app.setErrorHandler(adminErrorHandler)
  const route = { config: { pace: ADMIN_PACES }, preHandler: adminGuard(adminToken) }
  const operated = { ...route, schema: { body: OPERATED } }
  const who = ({ client, source, key }) => ({ client, source, key })
  // The operator, for the log line and the audit trail: the name the request gives, or its address.
  const by = request => ({ by: request.body.by ?? `admin route from ${request.ip}` })
  app.get('/admin/paces', route, async () => ({ paces: app.pace.names() }))
  app.post('/admin/paces/inspect', operated, async request => {
    const { pace } = request.body
    return inspected(pace, await app.pace.inspect(pace, who(request.body)))
  })
  app.post('/admin/paces/reset', operated, async request => {
    const { pace } = request.body
    await app.pace.reset(pace, who(request.body), by(request))
    const { client, source, key } = request.body
    // A client alone on a failure budget's pace: every address of it was reset; what is left is a list.
    if (client !== undefined && source === undefined && key === undefined && app.pace.names().includes(pace) && pace.includes('client+source')) {
      return { pace, client, heldBack: await app.pace.list(pace, { client }) }
    }
    return inspected(pace, await app.pace.inspect(pace, who(request.body)))
  })
  app.post('/admin/paces/block', operated, async request => {
    const { pace, seconds } = request.body
    const until = await app.pace.block(pace, who(request.body), seconds, by(request))
    return { pace, blockedUntil: until.toISOString() }
  })
}

/**
 * The server, not yet listening. `options.now` (a monotonic clock in milliseconds; tests pass
 * their own) and `options.store` (a RedisStore, to share the paces between replicas) are handed to
 * exchangepace, `options.logger` and `options.trustProxy` to Fastify; `options.adminToken` guards
 * /admin. Run as a fleet, it reads REDIS_URL or REDIS_CLUSTER, and TRUST_PROXY (examples/fleet.js).
 */
export function buildServer (options = {}) {
  const { logger = false, now, store, trustProxy, adminToken = DEMO_ADMIN_TOKEN } = options
  const app = Fastify({ logger, trustProxy })
  app.register(formbody)
  app.register(exchangePace, { now, store, isClient: id => CLIENTS.has(id) })
  app.register(routes)
  app.register(adminRoutes, { adminToken })
  return app
}

/** True when this file is the program node was started with. */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

if (isMain(import.meta.url)) {
  const { PORT: port = '3000', HOST: host = '127.0.0.1' } = process.env
  const fleet = fleetFromEnv(process.env)
  const app = buildServer({ logger: true, adminToken: process.env.ADMIN_TOKEN, store: fleet.store, trustProxy: fleet.trustProxy })
  app.addHook('onClose', fleet.close)
  for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => { app.close() })
  await app.listen({ host, port: Number(port) })
  const base = `http://${host}:${app.server.address().port}`
  console.log(`\n@node-oauth/oauth2-server paced by exchangepace on ${base}; try:\n
curl -i -u reporting-service:rep-s3cret_2026.v1~ -d grant_type=client_credentials ${base}/token
curl -H "authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' \\
  -d '{"pace":"/token#client+source:rejected","client":"reporting-service","source":"127.0.0.1"}' ${base}/admin/paces/inspect
(without ADMIN_TOKEN in its environment, the server takes the admin token ${DEMO_ADMIN_TOKEN})\n`)
}
