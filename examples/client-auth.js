// Client authentication for the example authorization server (examples/server.js), the three ways
// exchangepace reads a declared client id: client_secret_basic (HTTP Basic), client_secret_post
// (client_id and client_secret in the body) and private_key_jwt (a client_assertion JWT, RFC 7523,
// whose sub is the client id); and public clients, which name themselves with client_id alone.

import { createHash, createPublicKey, randomBytes, timingSafeEqual, verify } from 'node:crypto'

/** The issuer: the audience a client assertion must name. */
export const ISSUER = 'https://as.example'

/** The client assertion type of RFC 7523. */
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

export const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code'

/**
 * The registered clients. A real server keeps hashed secrets in a database; the point here is the
 * pace around the check, not the check. `tv` is public (no secret: RFC 8628's devices cannot keep
 * one); `analytics` authenticates with a signed assertion (its public key: the test holds the
 * private one, test/fixtures/analytics-key.json). `rate`: the client's own exchanges per second at
 * the token endpoint (its `rateOf`), when it has one.
 */
export const CLIENTS = new Map([
  ['reporting', { secret: 'reporting-secret', grantTypes: ['client_credentials'], scopes: ['reports:read'], redirectUris: [] }],
  ['billing', { secret: 'billing-secret', grantTypes: ['client_credentials'], scopes: ['invoices:read', 'invoices:write'], redirectUris: [] }],
  ['webapp', { secret: 'webapp-secret', grantTypes: ['authorization_code'], scopes: ['profile'], redirectUris: ['https://webapp.example/callback'] }],
  ['mobile', { secret: 'mobile-secret', grantTypes: ['authorization_code'], scopes: ['profile'], redirectUris: ['com.example.mobile:/callback', 'http://127.0.0.1:8400/callback'] }],
  ['tv', { grantTypes: [DEVICE_GRANT], scopes: ['profile'], redirectUris: [] }],
  ['analytics', {
    jwk: { kty: 'EC', crv: 'P-256', x: 'Dl4F6L5KQOCHaUpwdnYDaLjf04T53PAsL1F56LW-1DM', y: 'ryA01YJqTTQKh27o3zV7U9X_HP1Ivt8fcXW9DWEzLtQ' },
    grantTypes: ['client_credentials', 'authorization_code'],
    scopes: ['reports:read'],
    redirectUris: ['https://analytics.example/callback']
  }]
])

/** Compared against when the client id is unknown, so that an unknown id costs as long as a wrong secret. */
const NO_SECRET = randomBytes(32).toString('hex')

const BASIC_CHALLENGE = 'Basic realm="exchangepace example", charset="UTF-8"'

export function sendOAuth (reply, statusCode, body) {
  return reply.code(statusCode).header('cache-control', 'no-store').header('pragma', 'no-cache').send(body)
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
 * already answered 400 to a malformed header on a route paced by client id, so the base64 and the
 * colon are there and the id decodes; the secret it leaves to the handler, and it may not decode
 * (null).
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
  return timingSafeEqual(expected, given) && client?.secret !== undefined
}

/**
 * Whether `assertion` is a JWT signed with ES256 by `client`'s key whose iss and sub are `id`, whose
 * audience is this server and which has not expired (RFC 7523 section 3). exchangepace has read its
 * sub already, so it has three parts and a readable payload. A real server also refuses a `jti`
 * seen before.
 */
function assertionValid (client, id, assertion) {
  if (client?.jwk === undefined) return false
  const [header, payload, signature] = assertion.split('.')
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'))
  const audience = [claims.aud].flat()
  if (claims.iss !== id || !audience.includes(ISSUER) || !(claims.exp > Date.now() / 1000)) return false
  const key = createPublicKey({ key: client.jwk, format: 'jwk' })
  return verify('sha256', Buffer.from(`${header}.${payload}`), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(signature, 'base64url'))
}

/**
 * Authenticates the client of a request to the token, PAR, introspection, revocation or device
 * authorization endpoint: the client and its id, or null when it failed, after answering. Every way
 * the client can fail to authenticate marks the exchange rejected, which gives the unit back to
 * the client id it named: a caller without the credential cannot spend a client's pace.
 */
export function authenticateClient (request, reply) {
  const body = request.body
  const basic = basicCredentials(request.headers.authorization)
  const reject = (description) => {
    request.pace.outcome = 'rejected'
    if (basic !== undefined) reply.header('www-authenticate', BASIC_CHALLENGE)
    sendOAuth(reply, 401, { error: 'invalid_client', error_description: description })
    return null
  }
  const methods = [basic, body.client_secret, body.client_assertion].filter(given => given !== undefined)
  if (methods.length > 1) {
    request.pace.outcome = 'rejected'
    sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'use one client authentication method' })
    return null
  }
  const id = basic?.id ?? body.client_id
  if (body.client_assertion !== undefined) {
    if (body.client_assertion_type !== JWT_BEARER) return reject('client_assertion_type must be the JWT one (private_key_jwt)')
    // An encrypted assertion (JWE, five parts) declares no id to exchangepace; this server reads none.
    if (body.client_assertion.split('.').length !== 3) return reject('client_assertion must be a signed JWT')
    const subject = JSON.parse(Buffer.from(body.client_assertion.split('.')[1], 'base64url').toString('utf8')).sub
    const client = CLIENTS.get(subject)
    return assertionValid(client, subject, body.client_assertion) ? { id: subject, client } : reject('client authentication failed')
  }
  if (id === undefined) return reject('client authentication is required')
  const client = CLIENTS.get(id)
  // A public client names itself; it has no credential to present.
  if (methods.length === 0) return client !== undefined && client.secret === undefined && client.jwk === undefined ? { id, client } : reject('client authentication failed')
  // Anyone can send a secret that does not decode: it fails authentication like a wrong one, and
  // gives the unit back to the client it names.
  if (basic?.secret === null) return reject('client authentication failed')
  return secretMatches(client, basic?.secret ?? body.client_secret) ? { id, client } : reject('client authentication failed')
}
