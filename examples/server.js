// An example OAuth 2.0 authorization server paced by exchangepace; docs/endpoints.md says why each
// endpoint is paced the way it is.
//
//   POST /token       client_credentials, and the device_code grant (RFC 8628), paced per grant
//                     (tokenPaces below): a failure budget per declared client id and source
//                     address (5 failed authentications an hour) and one per source address
//                     (100 a day, which alone counts a made-up client id), exchanges per declared client
//                     id (5/s, refunded when authentication fails; not the device's polls), polls
//                     per device_code (one per 5 s interval, refused with 400 slow_down), and per
//                     source address (50/s, every request counts)
//   GET  /authorize   the authorization endpoint, paced per source address (10/s)
//   POST /par         pushed authorization requests (RFC 9126), paced like the token endpoint
//   POST /introspect  token introspection (RFC 7662), per declared client id (100/s)
//   POST /revoke      token revocation (RFC 7009), per declared client id (10/s)
//   POST /device_authorization, POST /device   the device grant's other two steps (device-flow.js)
//   GET  /openapi.json
//
// Clients authenticate with client_secret_basic, client_secret_post or private_key_jwt, or name
// themselves with client_id alone when public (client-auth.js). It uses the package the way an
// application would: `import exchangePace from 'exchangepace'`. Run it with `npm start` (or
// `node examples/server.js`); PORT changes the port.

import { randomBytes } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import swagger from '@fastify/swagger'
import exchangePace from 'exchangepace'
import { authenticateClient, CLIENTS, DEVICE_GRANT, sendOAuth } from './client-auth.js'
import { DEVICE_INTERVAL, deviceFlow } from './device-flow.js'
import { fleetFromEnv } from './fleet.js'

const oauthError = {
  type: 'object',
  properties: { error: { type: 'string' }, error_description: { type: 'string' } },
  required: ['error']
}

/** How long an access token lives, in seconds; a pushed authorization request, in seconds. */
const TOKEN_LIFETIME = 3600
const REQUEST_URI_LIFETIME = 60
const REQUEST_URI_PREFIX = 'urn:ietf:params:oauth:request_uri:'

/**
 * One server's state, on its monotonic clock `now` (ms): the access tokens it issued (a real server
 * keeps them in a database, or signs them), the pushed authorization requests, the device grant.
 */
function serverState (now) {
  const tokens = new Map()
  const issue = (clientId, scopes) => {
    const accessToken = randomBytes(24).toString('base64url')
    tokens.set(accessToken, { clientId, scope: scopes.join(' '), expiresAt: now() + TOKEN_LIFETIME * 1000 })
    return { access_token: accessToken, token_type: 'Bearer', expires_in: TOKEN_LIFETIME, scope: scopes.join(' ') }
  }
  return { now, tokens, issue, pushed: new Map(), devices: deviceFlow(now, issue) }
}

/**
 * POST /token. Client authentication comes first (client-auth.js) and marks the exchange rejected
 * when it fails, which gives the unit back to the client id it named. Once the client has
 * authenticated, its own mistakes (a missing or unsupported grant_type, a scope it does not have)
 * stay spent.
 */
function token (state, request, reply) {
  const body = request.body
  const authenticated = authenticateClient(request, reply)
  if (authenticated === null) return reply
  const { id, client } = authenticated
  if (body.grant_type === undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'grant_type is required' })
  if (body.grant_type !== 'client_credentials' && body.grant_type !== DEVICE_GRANT) return sendOAuth(reply, 400, { error: 'unsupported_grant_type', error_description: 'this server issues tokens for client_credentials and the device grant' })
  if (!client.grantTypes.includes(body.grant_type)) return sendOAuth(reply, 400, { error: 'unauthorized_client', error_description: `${id} may not use ${body.grant_type}` })
  if (body.grant_type === DEVICE_GRANT) return state.devices.pollToken(request, reply, authenticated)
  const scopes = body.scope === undefined ? client.scopes : body.scope.split(' ').filter(Boolean)
  if (scopes.some(scope => !client.scopes.includes(scope))) return sendOAuth(reply, 400, { error: 'invalid_scope', error_description: `${id} may request ${client.scopes.join(' ')}` })
  return sendOAuth(reply, 200, state.issue(id, scopes))
}

/**
 * The client and redirect URI an authorization request names, or an error answered here, not
 * redirected (RFC 6749 section 4.1.2.1: never redirect to an unchecked URI).
 */
function authorizationTarget ({ client_id: clientId, redirect_uri: redirectUri }) {
  const client = clientId === undefined ? undefined : CLIENTS.get(clientId)
  if (client === undefined || client.redirectUris.length === 0) return { error: 'client_id does not name a client that uses this endpoint' }
  // redirect_uri may be left out only when the client registered exactly one (RFC 6749 section 3.1.2.3).
  const target = redirectUri ?? (client.redirectUris.length === 1 ? client.redirectUris[0] : undefined)
  if (target === undefined || !client.redirectUris.includes(target)) return { error: 'redirect_uri is not registered for this client' }
  return { client, target }
}

/**
 * GET /authorize, with its parameters in the query or pushed before (request_uri, RFC 9126). An
 * unknown client or a redirect URI it did not register is answered here; every other error goes
 * back to the client's redirect URI. A real server would authenticate the user and ask for
 * consent before issuing the code; this example issues it at once.
 */
function authorize (state, request, reply) {
  let params = request.query
  if (params.request_uri !== undefined) {
    const pushed = state.pushed.get(params.request_uri)
    state.pushed.delete(params.request_uri)
    if (pushed === undefined || pushed.expiresAt <= state.now() || pushed.params.client_id !== params.client_id) {
      return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'request_uri is unknown, used or expired' })
    }
    params = pushed.params
  }
  const { client, target, error } = authorizationTarget(params)
  if (error !== undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: error })

  const { response_type: responseType, scope, state: clientState } = params
  const back = new URL(target)
  if (responseType === undefined) {
    back.searchParams.set('error', 'invalid_request')
  } else if (responseType !== 'code') {
    back.searchParams.set('error', 'unsupported_response_type')
  } else if (scope !== undefined && scope.split(' ').some(s => s !== '' && !client.scopes.includes(s))) {
    back.searchParams.set('error', 'invalid_scope')
  } else {
    back.searchParams.set('code', randomBytes(16).toString('base64url'))
  }
  if (clientState !== undefined) back.searchParams.set('state', clientState)
  return reply.header('cache-control', 'no-store').redirect(back.href, 302)
}

/**
 * POST /par (RFC 9126): an authenticated client pushes its authorization request and gets a
 * request_uri to send the user's browser to /authorize with. Its client and redirect URI are
 * checked now.
 */
function pushAuthorization (state, request, reply) {
  const authenticated = authenticateClient(request, reply)
  if (authenticated === null) return reply
  const { client_secret: _secret, client_assertion: _assertion, client_assertion_type: _type, request_uri: requestUri, ...params } = request.body
  if (requestUri !== undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'request_uri may not be pushed' })
  params.client_id = authenticated.id
  const { error } = authorizationTarget(params)
  if (error !== undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: error })
  const uri = `${REQUEST_URI_PREFIX}${randomBytes(24).toString('base64url')}`
  state.pushed.set(uri, { params, expiresAt: state.now() + REQUEST_URI_LIFETIME * 1000 })
  return sendOAuth(reply, 201, { request_uri: uri, expires_in: REQUEST_URI_LIFETIME })
}

/**
 * POST /introspect (RFC 7662): a confidential client (a resource server) asks whether a token is
 * active. A public client may not ask: anyone can name one.
 */
function introspect (state, request, reply) {
  const authenticated = authenticateClient(request, reply)
  if (authenticated === null) return reply
  if (authenticated.client.secret === undefined && authenticated.client.jwk === undefined) {
    return sendOAuth(reply, 403, { error: 'unauthorized_client', error_description: 'public clients may not introspect tokens' })
  }
  const subject = state.tokens.get(request.body.token)
  if (subject === undefined || subject.expiresAt <= state.now()) return sendOAuth(reply, 200, { active: false })
  return sendOAuth(reply, 200, { active: true, client_id: subject.clientId, scope: subject.scope, token_type: 'Bearer' })
}

/**
 * POST /revoke (RFC 7009): a client revokes a token issued to it. An unknown token is answered
 * 200 too (section 2.2); a token of another client is refused.
 */
function revoke (state, request, reply) {
  const authenticated = authenticateClient(request, reply)
  if (authenticated === null) return reply
  const subject = state.tokens.get(request.body.token)
  if (subject !== undefined && subject.clientId !== authenticated.id) {
    return sendOAuth(reply, 400, { error: 'unauthorized_client', error_description: 'the token was issued to another client' })
  }
  state.tokens.delete(request.body.token)
  return reply.code(200).header('cache-control', 'no-store').send()
}

/**
 * Errors answered the OAuth way. The client's (schema validation, and Fastify's own 4xx: a body
 * that is not JSON, too large, of a media type no parser reads) are invalid_request with their
 * status; the rest are a logged server_error. On /token the client pace was not reserved yet for
 * any of the client's (they come before preHandler); the per-source paces were.
 */
function oauthErrorHandler (error, _request, reply) {
  const statusCode = error.validation !== undefined ? 400 : error.statusCode ?? 500
  if (statusCode < 500) return sendOAuth(reply, statusCode, { error: 'invalid_request', error_description: error.message })
  reply.log.error(error)
  return sendOAuth(reply, statusCode, { error: 'server_error', error_description: 'the server could not complete the request' })
}

/**
 * The paces of an endpoint where clients authenticate, as the README recommends them for the
 * token endpoint. The failure budget comes first: a guesser whose budget is spent is refused
 * before it touches the client's own pace.
 */
function clientPaces (perClient, perSource) {
  return [
    // Failed client authentications per (declared client id, source address): five, then one
    // every 12 minutes, so guessing a secret is slow (docs/benchmarks.md, the guessing part), and
    // the real client, calling from its own addresses, never meets the guesser's budget.
    { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
    // Failed client authentications per source address, whatever id they name: 100 a day. A
    // made-up client id (isClient below) spends only this, so made-up ids leave a row per source.
    { limit: 100, window: 86400, key: 'source', spend: 'rejected' },
    // Requests per declared client id: only those of authenticated clients spend, so a stranger
    // naming a client cannot spend its pace.
    { perSecond: perClient, key: 'client', spend: 'accepted' },
    // A ceiling per source address on every request, whatever it names.
    { perSecond: perSource, key: 'source', spend: 'every' }
  ]
}

/** The token endpoint's paces for client_credentials, as the README recommends them (the benchmarks' too). */
export const TOKEN_PACES = clientPaces(5, 50)

/**
 * The token endpoint's paces, per grant: TOKEN_PACES, and a device's polls paced by its
 * device_code at the interval handed out. The polls do not spend their client's pace: a device
 * client is public (anyone can name it) and all its devices share its id. `slowDown` shapes the
 * device pace's refusal (device-flow.js).
 */
export function tokenPaces (slowDown) {
  const [failures, sourceFailures, exchanges, ceiling] = TOKEN_PACES
  return [
    // Polls per device code: one per interval, answered 400 slow_down when faster (RFC 8628
    // section 3.5). Every poll counts: a pending answer is an answer. First, so that a poll too
    // soon takes nothing from the paces after it.
    { limit: 1, window: DEVICE_INTERVAL, key: 'device_code', spend: 'every', refusal: slowDown },
    failures,
    sourceFailures,
    // A client registered with a rate of its own (client-auth.js) gets it: `rateOf` answers at once.
    { ...exchanges, exceptGrantTypes: [DEVICE_GRANT], rateOf: id => CLIENTS.get(id)?.rate },
    ceiling
  ]
}

/** A form body of string parameters: a repeated one is a 400 invalid_request (RFC 6749 section 3.1). */
function formBody (properties, required = []) {
  const strings = Object.fromEntries(Object.entries(properties).map(([name, description]) => [name, description === '' ? { type: 'string' } : { type: 'string', description }]))
  return { type: 'object', properties: strings, required }
}

/** The ways a client authenticates, as body parameters (Basic is a header). */
const CLIENT_AUTH = { client_id: '', client_secret: '', client_assertion: 'private_key_jwt: a JWT signed by the client', client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer' }
const INVALID_CLIENT = { description: 'invalid_client: client authentication failed (the client\'s unit is refunded; the failure is counted against the client id and source address)', ...oauthError }
const AUTHENTICATION = 'The client authenticates with HTTP Basic (client_secret_basic), client_id and client_secret in the body (client_secret_post) or a signed client_assertion (private_key_jwt); a public client names itself with client_id.'

function routes (state) {
  return async function oauthRoutes (app) {
    app.setErrorHandler(oauthErrorHandler)

    app.post('/token', {
      config: { pace: tokenPaces(state.devices.slowDown) },
      schema: {
        summary: 'Token endpoint',
        description: `Issues access tokens for the client_credentials grant (RFC 6749 section 4.4) and the device grant (RFC 8628 section 3.4). ${AUTHENTICATION}`,
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ grant_type: `client_credentials or ${DEVICE_GRANT}`, ...CLIENT_AUTH, scope: 'Space-separated scopes; default: all the client may request', device_code: 'The device grant: the code /device_authorization gave' }),
        response: {
          200: {
            description: 'An access token',
            type: 'object',
            properties: { access_token: { type: 'string' }, token_type: { type: 'string' }, expires_in: { type: 'integer' }, scope: { type: 'string' } },
            required: ['access_token', 'token_type', 'expires_in']
          },
          400: { description: 'invalid_request, unsupported_grant_type, unauthorized_client, invalid_scope; for the device grant authorization_pending, slow_down (a poll sooner than the interval), expired_token or invalid_grant', ...oauthError },
          401: INVALID_CLIENT
        }
      }
    }, (request, reply) => token(state, request, reply))

    app.get('/authorize', {
      config: { pace: { perSecond: 10, key: 'source', spend: 'every' } },
      schema: {
        summary: 'Authorization endpoint',
        description: 'Starts the authorization code flow (RFC 6749 section 4.1) and redirects back to the client with a code or an error. The parameters come in the query, or were pushed to /par (request_uri with client_id).',
        querystring: formBody({ response_type: 'code', client_id: '', redirect_uri: '', scope: '', state: '', request_uri: 'From /par' }),
        response: {
          302: {
            description: 'Back to the redirect URI with code (or error) and state',
            type: 'null',
            headers: { location: { type: 'string', description: 'The redirect URI with the answer in its query' } }
          },
          400: { description: 'Unknown client, unregistered redirect URI, or an unknown request_uri: not redirected', ...oauthError }
        }
      }
    }, (request, reply) => authorize(state, request, reply))

    app.post('/par', {
      config: { pace: clientPaces(20, 50) },
      schema: {
        summary: 'Pushed authorization request endpoint (RFC 9126)',
        description: `Takes an authorization request's parameters and returns a request_uri for /authorize. ${AUTHENTICATION}`,
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ ...CLIENT_AUTH, response_type: 'code', redirect_uri: '', scope: '', state: '', request_uri: 'Not allowed here' }),
        response: {
          201: { description: 'The request_uri', type: 'object', properties: { request_uri: { type: 'string' }, expires_in: { type: 'integer' } }, required: ['request_uri', 'expires_in'] },
          400: { description: 'invalid_request: an unknown client, an unregistered redirect URI, a pushed request_uri', ...oauthError },
          401: INVALID_CLIENT
        }
      }
    }, (request, reply) => pushAuthorization(state, request, reply))

    app.post('/introspect', {
      config: { pace: clientPaces(100, 200) },
      schema: {
        summary: 'Token introspection endpoint (RFC 7662)',
        description: `Says whether a token is active. ${AUTHENTICATION} Public clients may not introspect.`,
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ ...CLIENT_AUTH, token: 'The token to introspect', token_type_hint: '' }, ['token']),
        response: {
          200: { description: 'Whether the token is active, and if so whose', type: 'object', properties: { active: { type: 'boolean' }, client_id: { type: 'string' }, scope: { type: 'string' }, token_type: { type: 'string' } }, required: ['active'] },
          401: INVALID_CLIENT,
          403: { description: 'unauthorized_client: a public client', ...oauthError }
        }
      }
    }, (request, reply) => introspect(state, request, reply))

    app.post('/revoke', {
      config: { pace: clientPaces(10, 50) },
      schema: {
        summary: 'Token revocation endpoint (RFC 7009)',
        description: `Revokes a token issued to the client. ${AUTHENTICATION}`,
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ ...CLIENT_AUTH, token: 'The token to revoke', token_type_hint: '' }, ['token']),
        response: {
          200: { description: 'Revoked, or unknown', type: 'null' },
          400: { description: 'unauthorized_client: the token was issued to another client', ...oauthError },
          401: INVALID_CLIENT
        }
      }
    }, (request, reply) => revoke(state, request, reply))

    app.post('/device_authorization', {
      // A device client is public: anyone can name it, so it is paced by source, and a
      // confidential one's failed authentications by its pair.
      config: { pace: [{ limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' }, { limit: 10, window: 60, key: 'source', spend: 'every' }] },
      schema: {
        summary: 'Device authorization endpoint (RFC 8628)',
        description: `Gives a device a device_code to poll /token with and a user code for its user. ${AUTHENTICATION}`,
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ ...CLIENT_AUTH, scope: '' }),
        response: {
          200: {
            description: 'The codes, and the interval to poll at',
            type: 'object',
            properties: Object.fromEntries(['device_code', 'user_code', 'verification_uri', 'verification_uri_complete', 'expires_in', 'interval'].map(name => [name, { type: name === 'expires_in' || name === 'interval' ? 'integer' : 'string' }]))
          },
          400: { description: 'unauthorized_client or invalid_scope', ...oauthError },
          401: INVALID_CLIENT
        }
      }
    }, (request, reply) => {
      const authenticated = authenticateClient(request, reply)
      return authenticated === null ? reply : state.devices.authorizeDevice(request, reply, authenticated)
    })

    app.post('/device', {
      // RFC 8628 section 5.1: user codes are short. Ten wrong ones per address per 10 minutes.
      config: { pace: { limit: 10, window: 600, key: 'source', spend: 'rejected' } },
      schema: {
        summary: 'Device verification: the user approves a user code',
        consumes: ['application/x-www-form-urlencoded'],
        body: formBody({ user_code: 'As the device shows it' }, ['user_code']),
        response: { 400: { description: 'No pending device has this user code', ...oauthError } }
      }
    }, state.devices.approve)

    app.get('/openapi.json', { schema: { hide: true } }, () => app.swagger())
  }
}

/**
 * The example server, not yet listening. `options.now` is the monotonic clock in milliseconds
 * handed to exchangepace and read by the device grant and token lifetimes (tests pass their own;
 * default: `performance.now`), `options.store` (a RedisStore, to share the paces between replicas)
 * too; `options.logger` and `options.trustProxy` go to Fastify. Run as a fleet, it reads REDIS_URL
 * or REDIS_CLUSTER, and TRUST_PROXY (examples/fleet.js).
 */
export function buildServer (options = {}) {
  const { logger = false, now, store, trustProxy } = options
  const app = Fastify({ logger, trustProxy })
  app.register(formbody)
  app.register(swagger, {
    openapi: {
      info: {
        title: 'exchangepace example authorization server',
        description: `An OAuth 2.0 authorization server whose endpoints are each paced by exchangepace. Every rate is ${store === undefined ? 'per replica' : 'shared by all replicas (Redis)'}.`,
        version: '1.0.0'
      }
    }
  })
  // isClient: a declared id that names no registered client spends no pace keyed by the client id.
  app.register(exchangePace, { isClient: id => CLIENTS.has(id), now, store })
  app.register(routes(serverState(now ?? (() => performance.now()))))
  return app
}

/** Lines to paste into a shell once the server listens on `base`. */
export function curlLines (base) {
  return [
    '# a token with client_secret_basic',
    `curl -i -u reporting:reporting-secret -d grant_type=client_credentials ${base}/token`,
    '# a token with client_secret_post',
    `curl -i -d grant_type=client_credentials -d client_id=reporting -d client_secret=reporting-secret ${base}/token`,
    '# a wrong secret: 401 invalid_client, and the unit goes back to "reporting"',
    `curl -i -u reporting:guess -d grant_type=client_credentials ${base}/token`,
    '# 6 wrong secrets from one address: 5 answered 401, then 429 for 12 minutes (5 an hour)',
    `for i in $(seq 6); do curl -s -o /dev/null -w '%{http_code}\\n' -u reporting:guess-$i -d grant_type=client_credentials ${base}/token; done`,
    '# more than 5 a second for one client: 429 with Retry-After',
    `for i in 1 2 3 4 5 6 7; do curl -s -o /dev/null -w '%{http_code}\\n' -u reporting:reporting-secret -d grant_type=client_credentials ${base}/token; done`,
    '# the device grant: codes for a device, then its polls (400 authorization_pending; sooner than every 5 s, 400 slow_down)',
    `curl -i -d client_id=tv ${base}/device_authorization`,
    `curl -i -d grant_type=${DEVICE_GRANT} -d client_id=tv -d device_code=THE_DEVICE_CODE ${base}/token`,
    '# a pushed authorization request (RFC 9126): a request_uri for /authorize',
    `curl -i -u webapp:webapp-secret -d response_type=code -d state=xyz ${base}/par`,
    '# the authorization endpoint: a 302 back to the client',
    `curl -i '${base}/authorize?response_type=code&client_id=webapp&state=xyz'`,
    '# the OpenAPI document, with the pace of each route',
    `curl -s ${base}/openapi.json`
  ]
}

/** True when this file is the program node was started with (`node examples/server.js`). */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

if (isMain(import.meta.url)) {
  const { PORT: port = '3000', HOST: host = '127.0.0.1' } = process.env
  const fleet = fleetFromEnv(process.env)
  const app = buildServer({ logger: true, store: fleet.store, trustProxy: fleet.trustProxy })
  app.addHook('onClose', fleet.close)
  for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => { app.close() })
  await app.listen({ host, port: Number(port) })
  const base = `http://${host}:${app.server.address().port}`
  console.log(`\nexample authorization server on ${base}; try:\n\n${curlLines(base).join('\n')}\n`)
}
