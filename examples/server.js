// An example OAuth 2.0 authorization server paced by exchangepace.
//
//   POST /token       client_credentials, with client_secret_basic or client_secret_post,
//                     paced three ways (TOKEN_PACES below): per declared client id (5/s,
//                     refunded when authentication fails), a failure budget per declared
//                     client id and source address (5 failed authentications an hour),
//                     and per source address (50/s, every request counts)
//   GET  /authorize   the authorization endpoint, paced per source address (10/s)
//   GET  /openapi.json
//
// It uses the package the way an application would: `import exchangePace from 'exchangepace'`.
// Run it with `npm start` (or `node examples/server.js`); PORT changes the port.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import swagger from '@fastify/swagger'
import exchangePace from 'exchangepace'

/**
 * The registered clients. A real server keeps hashed secrets in a database; the point here is the
 * pace around the check, not the check.
 */
const CLIENTS = new Map([
  ['reporting', { secret: 'reporting-secret', grantTypes: ['client_credentials'], scopes: ['reports:read'], redirectUris: [] }],
  ['billing', { secret: 'billing-secret', grantTypes: ['client_credentials'], scopes: ['invoices:read', 'invoices:write'], redirectUris: [] }],
  ['webapp', { secret: 'webapp-secret', grantTypes: ['authorization_code'], scopes: ['profile'], redirectUris: ['https://webapp.example/callback'] }],
  ['mobile', { secret: 'mobile-secret', grantTypes: ['authorization_code'], scopes: ['profile'], redirectUris: ['com.example.mobile:/callback', 'http://127.0.0.1:8400/callback'] }]
])

/** Compared against when the client id is unknown, so that an unknown id costs as long as a wrong secret. */
const NO_SECRET = randomBytes(32).toString('hex')

const BASIC_CHALLENGE = 'Basic realm="exchangepace example", charset="UTF-8"'

const oauthError = {
  type: 'object',
  properties: { error: { type: 'string' }, error_description: { type: 'string' } },
  required: ['error']
}

/**
 * Form-urlencoded decoding of one Basic credential (RFC 6749 section 2.3.1): '+' is a space. Null
 * when a '%' is not followed by two hex digits.
 */
function formDecode (value) {
  try {
    return decodeURIComponent(value.replaceAll('+', ' '))
  } catch {
    return null
  }
}

/**
 * The client id and secret of an HTTP Basic header, or undefined without one. exchangepace has
 * already answered 400 to a malformed header on this route, so the base64 and the colon are there
 * and the id decodes; the secret it leaves to the handler, and it may not decode (null).
 */
function basicCredentials (authorization) {
  if (authorization === undefined || !/^basic /i.test(authorization)) return undefined
  const decoded = Buffer.from(authorization.slice(6).trim(), 'base64').toString('utf8')
  const colon = decoded.indexOf(':')
  return { id: formDecode(decoded.slice(0, colon)), secret: formDecode(decoded.slice(colon + 1)) }
}

/** Whether `secret` is the secret of `client`, in time that does not depend on where they differ. */
function secretMatches (client, secret) {
  const expected = createHash('sha256').update(client?.secret ?? NO_SECRET).digest()
  const given = createHash('sha256').update(secret).digest()
  return timingSafeEqual(expected, given) && client !== undefined
}

function sendOAuth (reply, statusCode, body) {
  return reply.code(statusCode).header('cache-control', 'no-store').header('pragma', 'no-cache').send(body)
}

/**
 * POST /token. Every way the client can fail to authenticate comes first and marks the exchange
 * rejected, which gives the unit back to the client id it named: a caller without the secret
 * cannot spend a client's pace. Once the client has authenticated, its own mistakes (a missing or
 * unsupported grant_type, a scope it does not have) stay spent.
 */
function token (request, reply) {
  const body = request.body
  const basic = basicCredentials(request.headers.authorization)

  const rejectClient = (description) => {
    request.pace.outcome = 'rejected'
    if (basic !== undefined) reply.header('www-authenticate', BASIC_CHALLENGE)
    return sendOAuth(reply, 401, { error: 'invalid_client', error_description: description })
  }

  if (basic !== undefined && body.client_secret !== undefined) {
    request.pace.outcome = 'rejected'
    return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'use one client authentication method, not both Basic and client_secret' })
  }
  if (body.client_assertion !== undefined) return rejectClient('this server supports client_secret_basic and client_secret_post only')
  const id = basic?.id ?? body.client_id
  if (id === undefined) return rejectClient('client authentication is required')
  // Anyone can send a secret that does not decode: it fails authentication like a wrong one, and
  // gives the unit back to the client it names.
  if (basic?.secret === null) return rejectClient('client authentication failed')
  const client = CLIENTS.get(id)
  if (!secretMatches(client, basic?.secret ?? body.client_secret ?? '')) return rejectClient('client authentication failed')

  // The client has authenticated: from here on the exchange counts against its pace.
  if (body.grant_type === undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'grant_type is required' })
  if (body.grant_type !== 'client_credentials') return sendOAuth(reply, 400, { error: 'unsupported_grant_type', error_description: 'this server issues tokens for client_credentials only' })
  if (!client.grantTypes.includes('client_credentials')) return sendOAuth(reply, 400, { error: 'unauthorized_client', error_description: `${id} may not use client_credentials` })
  const scopes = body.scope === undefined ? client.scopes : body.scope.split(' ').filter(Boolean)
  if (scopes.some(scope => !client.scopes.includes(scope))) return sendOAuth(reply, 400, { error: 'invalid_scope', error_description: `${id} may request ${client.scopes.join(' ')}` })

  return sendOAuth(reply, 200, {
    access_token: randomBytes(24).toString('base64url'),
    token_type: 'Bearer',
    expires_in: 3600,
    scope: scopes.join(' ')
  })
}

/**
 * GET /authorize. An unknown client or a redirect URI it did not register is answered here
 * (RFC 6749 section 4.1.2.1: never redirect to an unchecked URI); every other error goes back to
 * the client's redirect URI. A real server would authenticate the user and ask for consent before
 * issuing the code; this example issues it at once.
 */
function authorize (request, reply) {
  const { response_type: responseType, client_id: clientId, redirect_uri: redirectUri, scope, state } = request.query
  const client = clientId === undefined ? undefined : CLIENTS.get(clientId)
  if (client === undefined || client.redirectUris.length === 0) {
    return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'client_id does not name a client that uses this endpoint' })
  }
  // redirect_uri may be left out only when the client registered exactly one (RFC 6749 section 3.1.2.3).
  const target = redirectUri ?? (client.redirectUris.length === 1 ? client.redirectUris[0] : undefined)
  if (target === undefined || !client.redirectUris.includes(target)) {
    return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'redirect_uri is not registered for this client' })
  }

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
  if (state !== undefined) back.searchParams.set('state', state)
  return reply.header('cache-control', 'no-store').redirect(back.href, 302)
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
 * The token endpoint's paces, as the README recommends them. The failure budget comes first: a
 * guesser whose budget is spent is refused before it touches the client's own pace.
 */
export const TOKEN_PACES = [
  // Failed client authentications per (declared client id, source address): five, then one every
  // 12 minutes, so guessing a secret is slow (docs/benchmarks.md, the guessing part), and the real
  // client, calling from its own addresses, never meets the guesser's budget.
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  // Exchanges per declared client id: only accepted exchanges spend, so a stranger naming a client
  // cannot spend its pace.
  { perSecond: 5, key: 'client', spend: 'accepted' },
  // A ceiling per source address on every request, whatever it names.
  { perSecond: 50, key: 'source', spend: 'every' }
]

async function routes (app) {
  app.setErrorHandler(oauthErrorHandler)

  app.post('/token', {
    config: { pace: TOKEN_PACES },
    schema: {
      summary: 'Token endpoint',
      description: 'Issues access tokens for the client_credentials grant (RFC 6749 section 4.4). The client authenticates with HTTP Basic (client_secret_basic) or with client_id and client_secret in the body (client_secret_post).',
      consumes: ['application/x-www-form-urlencoded'],
      body: {
        type: 'object',
        properties: {
          grant_type: { type: 'string', description: 'client_credentials' },
          client_id: { type: 'string' },
          client_secret: { type: 'string' },
          scope: { type: 'string', description: 'Space-separated scopes; default: all the client may request' }
        }
      },
      response: {
        200: {
          description: 'An access token',
          type: 'object',
          properties: {
            access_token: { type: 'string' },
            token_type: { type: 'string' },
            expires_in: { type: 'integer' },
            scope: { type: 'string' }
          },
          required: ['access_token', 'token_type', 'expires_in']
        },
        400: { description: 'invalid_request, unsupported_grant_type, unauthorized_client or invalid_scope', ...oauthError },
        401: { description: 'invalid_client: client authentication failed (the client\'s unit is refunded; the failure is counted against the client id and source address)', ...oauthError }
      }
    }
  }, token)

  app.get('/authorize', {
    config: { pace: { perSecond: 10, key: 'source', spend: 'every' } },
    schema: {
      summary: 'Authorization endpoint',
      description: 'Starts the authorization code flow (RFC 6749 section 4.1) and redirects back to the client with a code or an error.',
      querystring: {
        type: 'object',
        properties: {
          response_type: { type: 'string', description: 'code' },
          client_id: { type: 'string' },
          redirect_uri: { type: 'string' },
          scope: { type: 'string' },
          state: { type: 'string' }
        }
      },
      response: {
        302: {
          description: 'Back to the redirect URI with code (or error) and state',
          type: 'null',
          headers: { location: { type: 'string', description: 'The redirect URI with the answer in its query' } }
        },
        400: { description: 'Unknown client or unregistered redirect URI: not redirected', ...oauthError }
      }
    }
  }, authorize)

  app.get('/openapi.json', { schema: { hide: true } }, () => app.swagger())
}

/**
 * The example server, not yet listening. `options.now` is handed to exchangepace (a monotonic
 * clock in milliseconds; tests pass their own), `options.logger` to Fastify.
 */
export function buildServer (options = {}) {
  const { logger = false, now } = options
  const app = Fastify({ logger })
  app.register(formbody)
  app.register(swagger, {
    openapi: {
      info: {
        title: 'exchangepace example authorization server',
        description: 'An OAuth 2.0 token and authorization endpoint, each paced by exchangepace. Every rate is per replica.',
        version: '1.0.0'
      }
    }
  })
  app.register(exchangePace, now === undefined ? {} : { now })
  app.register(routes)
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
  const { PORT: port = '3000' } = process.env
  const app = buildServer({ logger: true })
  await app.listen({ host: '127.0.0.1', port: Number(port) })
  const base = `http://127.0.0.1:${app.server.address().port}`
  console.log(`\nexample authorization server on ${base}; try:\n\n${curlLines(base).join('\n')}\n`)
}
