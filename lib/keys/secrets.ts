import { createHash } from 'node:crypto'
import { InvalidRequest } from './parse.js'

/**
 * Keys made of secrets: a device code (RFC 8628) or a bearer token (RFC 6750). The secret itself
 * never becomes a key: it is hashed here, and only the hash reaches a pace's row, a Redis key, a
 * log line or an event. Nothing here knows about buckets or Fastify.
 */

/**
 * The key of a secret: the first 16 bytes (128 bits) of its SHA-256, in base64url (22 characters).
 * Unkeyed, so that every replica sharing a store hashes one secret to one key; the secrets hashed
 * are random values of at least 128 bits (RFC 6749 section 10.10, RFC 8628 section 5.2), which no
 * one can recover from the hash by trying candidates (docs/design.md, Decisions).
 */
export function secretKey (secret: string): string {
  return createHash('sha256').update(secret).digest().subarray(0, 16).toString('base64url')
}

/** RFC 6750 section 2.1: `Bearer` and a b64token. */
const BEARER = /^bearer(?: |$)/i
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/

/**
 * The hashed `device_code` of a device access token request (RFC 8628 section 3.4), or undefined
 * when the body carries none (sent empty counts as absent, as RFC 6749 section 3.1 asks). A
 * repeated or non-string device_code is an InvalidRequest.
 */
export function deviceCodeKey (body: unknown): string | undefined {
  const code = bodyParameter(body, 'device_code')
  return code === undefined ? undefined : secretKey(code)
}

/**
 * The hashed bearer token a request presents (RFC 6750): the `Authorization: Bearer` header or the
 * form body's `access_token`; undefined when it presents none. A malformed header, a repeated or
 * non-string parameter, or a token in both places (section 2: a client uses one method) is an
 * InvalidRequest. The query's `access_token` (section 2.3) is not read.
 */
export function bearerKey (authorization: string | undefined, body: unknown): string | undefined {
  const posted = bodyParameter(body, 'access_token')
  if (authorization === undefined || !BEARER.test(authorization)) return posted === undefined ? undefined : secretKey(posted)
  const token = authorization.slice('bearer'.length).trim()
  if (!B64TOKEN.test(token)) throw new InvalidRequest('the Bearer token is malformed')
  if (posted !== undefined) throw new InvalidRequest('the request presents a bearer token in the header and in the body')
  return secretKey(token)
}

/** A body parameter given once as a non-empty string; undefined when absent or empty. */
function bodyParameter (body: unknown, name: string): string | undefined {
  if (body === null || typeof body !== 'object' || Buffer.isBuffer(body)) return undefined
  const value = (body as Record<string, unknown>)[name]
  if (value === undefined || value === '') return undefined
  if (Array.isArray(value)) throw new InvalidRequest(`${name} is repeated`)
  if (typeof value !== 'string') throw new InvalidRequest(`${name} must be a string`)
  return value
}
