// An OAuth 2.0 authorization server built on @node-oauth/oauth2-server, paced by exchangepace.
//
//   POST /token       client_credentials and authorization_code (with PKCE), the client
//                     authenticated with client_secret_basic or client_secret_post
//   GET  /authorize   the authorization endpoint of the code flow
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

const { OAuthError, Request, Response } = OAuth2Server

/**
 * The token endpoint's paces, as the README recommends them. Each rate is per replica.
 * - a failure budget per (declared client id, source address), spent only by exchanges the library
 *   rejected: 5 an hour, so guessing a client's secret is slow, and the client, calling from its
 *   own addresses, never meets a guesser's budget;
 * - per declared client id, spent only by exchanges the library accepted: a request that fails
 *   client authentication gives its unit back to the id it named;
 * - per source address, spent by every request: a ceiling on what one address can try.
 */
const TOKEN_ENDPOINT_PACES = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 5, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' }
]

/** The authorization endpoint's pace: per source address, every request counts. */
const AUTHORIZATION_ENDPOINT_PACES = [
  { perSecond: 10, key: 'source', spend: 'every' }
]

/**
 * The registered clients, all confidential. Their ids and secrets are made of letters, digits,
 * '-', '.', '_' and '~' (openid-client form-encodes some of these: see `decodedBasic`). A real
 * server keeps hashed secrets in a database.
 */
const CLIENTS = new Map([
  ['reporting-service', { id: 'reporting-service', secret: 'rep-s3cret_2026.v1~', grants: ['client_credentials'], scopes: ['reports:read'], redirectUris: [] }],
  ['webapp', { id: 'webapp', secret: 'web-s3cret_2026.v1~', grants: ['authorization_code'], scopes: ['profile'], redirectUris: ['https://webapp.example/callback'] }]
])

/** Compared against when the client id is unknown, so that an unknown id costs as long as a wrong secret. */
const NO_SECRET = randomBytes(32)

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

/**
 * The server, not yet listening. `options.now` is handed to exchangepace (a monotonic clock in
 * milliseconds; tests pass their own), `options.logger` to Fastify.
 */
export function buildServer (options = {}) {
  const { logger = false, now } = options
  const app = Fastify({ logger })
  app.register(formbody)
  app.register(exchangePace, now === undefined ? {} : { now })
  app.register(routes)
  return app
}

/** True when this file is the program node was started with. */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

if (isMain(import.meta.url)) {
  const { PORT: port = '3000' } = process.env
  const app = buildServer({ logger: true })
  await app.listen({ host: '127.0.0.1', port: Number(port) })
  const base = `http://127.0.0.1:${app.server.address().port}`
  console.log(`\n@node-oauth/oauth2-server paced by exchangepace on ${base}; try:\n
curl -i -u reporting-service:rep-s3cret_2026.v1~ -d grant_type=client_credentials ${base}/token\n`)
}
