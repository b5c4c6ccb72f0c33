import { isIPv4, isIPv6 } from 'node:net'

/**
 * Key extraction: from a request's parts to the string a pace is keyed by. Nothing here knows about
 * buckets or Fastify; the plugin hands in the header, the body and the address.
 *
 * A request whose declared identity cannot be read unambiguously is refused whole (`InvalidRequest`,
 * answered 400 invalid_request) rather than guessed at: a guess would let a stranger choose which
 * bucket to spend, or let one request spend none.
 */

/** The request is malformed in a way the client must fix; `message` is the OAuth error_description. */
export class InvalidRequest extends Error {
  override readonly name = 'InvalidRequest'
}

/** Control characters (C0, DEL, C1): never part of a printable identifier. */
const CONTROL = /\p{Cc}/u
/** Canonical base64 (RFC 4648 section 4), padding included, as RFC 7617 requires. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
/** base64url without padding, as JWS compact serialisation uses (RFC 7515 section 2). */
const BASE64URL = /^[A-Za-z0-9_-]*$/
/** The Basic scheme, case-insensitive, with or without credentials after it (a bare "Basic" is malformed, not absent). */
const BASIC = /^basic(?: |$)/i

/**
 * Checks a key a pace will store: a non-empty string of at most `maxLength` characters with no
 * control characters. `what` names the key's source in the error. Returns the key unchanged.
 */
export function checkKey (key: unknown, what: string, maxLength: number): string {
  if (typeof key !== 'string') throw new InvalidRequest(`${what} must be a string`)
  if (key.length === 0) throw new InvalidRequest(`${what} must not be empty`)
  if (key.length > maxLength) throw new InvalidRequest(`${what} is longer than ${maxLength} characters`)
  if (CONTROL.test(key)) throw new InvalidRequest(`${what} contains non-printable characters`)
  return key
}

/** Form-urlencoded decoding of one value (RFC 6749 appendix B): '+' is a space, then percent-decoding. */
function formDecode (value: string, what: string): string {
  try {
    return decodeURIComponent(value.replaceAll('+', ' '))
  } catch {
    throw new InvalidRequest(`${what} has a malformed percent-encoding`)
  }
}

/**
 * The client id of an HTTP Basic `Authorization` header (RFC 6749 section 2.3.1), or undefined when
 * the header is absent or uses another scheme. Malformed Basic credentials (the id's encoding
 * included; the secret is not read) are an InvalidRequest.
 */
export function basicClientId (authorization: string | undefined): string | undefined {
  if (authorization === undefined || !BASIC.test(authorization)) return undefined
  const encoded = authorization.slice('basic'.length).trim()
  if (encoded.length === 0 || !BASE64.test(encoded)) throw new InvalidRequest('Basic credentials are not valid base64')
  const decoded = Buffer.from(encoded, 'base64').toString('utf8')
  const colon = decoded.indexOf(':')
  if (colon === -1) throw new InvalidRequest('Basic credentials lack the ":" between client id and secret')
  // The secret is the handler's to read: it names no bucket, and many clients send it unencoded.
  return formDecode(decoded.slice(0, colon), 'the Basic client id')
}

/** The client assertion type of RFC 7523: a JWT whose `sub` is the client id. */
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

/**
 * The `sub` claim of a client assertion JWT (RFC 7523 section 3), decoded but not verified: it only
 * names the bucket, and the handler verifies the signature before accepting the exchange. An
 * encrypted JWT (JWE, five parts) hides its claims: it declares no id, and undefined is returned.
 */
export function assertionSubject (assertion: unknown): string | undefined {
  if (typeof assertion !== 'string') throw new InvalidRequest('client_assertion must be a single string')
  const parts = assertion.split('.')
  if (parts.length === 5) return undefined
  if (parts.length !== 3 || !BASE64URL.test(parts[1])) throw new InvalidRequest('client_assertion is not a JWT')
  let claims: unknown
  try {
    claims = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8'))
  } catch {
    throw new InvalidRequest('client_assertion has an unreadable payload')
  }
  const subject = (claims !== null && typeof claims === 'object') ? (claims as { sub?: unknown }).sub : undefined
  if (typeof subject !== 'string') throw new InvalidRequest('client_assertion has no string sub claim')
  return subject
}

/**
 * The one client id a token request declares, from HTTP Basic, the body's `client_id` and the `sub`
 * of a `client_assertion` that is a JWT (its `client_assertion_type` the JWT one, or absent; a SAML
 * assertion, RFC 7522, or another kind declares nothing, and the body's `client_id` names the
 * client); undefined when it declares none. A parameter sent empty counts as absent (RFC 6749
 * section 3.1). Declaring two different ids, repeating a parameter, or an id that fails `checkKey`
 * is an InvalidRequest.
 */
export function declaredClientId (authorization: string | undefined, body: unknown, maxLength: number): string | undefined {
  let id = basicClientId(authorization)
  if (id !== undefined) checkKey(id, 'the Basic client id', maxLength)
  if (body === null || typeof body !== 'object' || Buffer.isBuffer(body)) return id

  const params = body as Record<string, unknown>
  const bodyId = params.client_id
  if (bodyId !== undefined && bodyId !== '') {
    if (Array.isArray(bodyId)) throw new InvalidRequest('client_id is repeated')
    checkKey(bodyId, 'client_id', maxLength)
    if (id !== undefined && id !== bodyId) throw new InvalidRequest('the request declares conflicting client ids')
    id = bodyId as string
  }
  const assertion = params.client_assertion
  if (assertion === undefined || assertion === '') return id
  if (Array.isArray(assertion)) throw new InvalidRequest('client_assertion is repeated')
  const type = params.client_assertion_type
  if (Array.isArray(type)) throw new InvalidRequest('client_assertion_type is repeated')
  // A JSON number, object or null is malformed, as it is for client_id, not another type.
  if (type !== undefined && typeof type !== 'string') throw new InvalidRequest('client_assertion_type must be a single string')
  if (type !== undefined && type !== '' && type !== JWT_BEARER) return id
  const subject = assertionSubject(assertion)
  if (subject === undefined) return id
  checkKey(subject, 'the client_assertion sub', maxLength)
  if (id !== undefined && id !== subject) throw new InvalidRequest('the request declares conflicting client ids')
  return subject
}

/**
 * The key of a (client id, source) pair: the two apart by U+001F (INFORMATION SEPARATOR ONE), a
 * control character that neither may contain (`checkKey` refuses it in a client id, and a source
 * key is an address), so that no two pairs share a key.
 */
export function pairKey (client: string, source: string): string {
  return `${client}\u001f${source}`
}

/**
 * The body's `grant_type` (RFC 6749 section 4), or undefined when absent or empty. A repeated or
 * non-string grant_type is an InvalidRequest: reading one of two would let the caller choose which
 * paces apply.
 */
export function grantType (body: unknown): string | undefined {
  if (body === null || typeof body !== 'object' || Buffer.isBuffer(body)) return undefined
  const type = (body as Record<string, unknown>).grant_type
  if (type === undefined || type === '') return undefined
  if (Array.isArray(type)) throw new InvalidRequest('grant_type is repeated')
  if (typeof type !== 'string') throw new InvalidRequest('grant_type must be a string')
  return type
}

/**
 * An address with a port, as some proxies write X-Forwarded-For: IPv4 (`192.0.2.1:51234`), IPv6 in
 * brackets with or without one (`[2001:db8::1]:443`), or IPv6 without brackets, as a Node proxy
 * writes `${remoteAddress}:${remotePort}` (`::ffff:192.0.2.1:51234`).
 */
const WITH_PORT = /^(?:(\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}|\[([^\]]+)\](?::\d{1,5})?|([0-9A-Fa-f:.]+):\d{1,5})$/

/**
 * The source key of an address: IPv4 as is (IPv4-mapped IPv6 reduced to IPv4), IPv6 reduced to its
 * first `subnetBits` bits, since one host commonly owns a whole /64 and could otherwise rotate
 * through addresses to get fresh buckets. The result looks like `2001:db8:1:2::/64`. A port is no
 * part of the key (a client opens a connection per port), nor is an IPv6 zone id. Anything that is
 * not an IP address is kept as it is when `checkKey` accepts it within `maxLength`: with
 * `trustProxy`, `request.ip` can be whatever a client wrote in X-Forwarded-For. An IP address is
 * never refused, whatever `maxLength`.
 */
export function sourceKey (address: string, subnetBits: number, maxLength: number): string {
  if (isIPv4(address)) return address
  if (isIPv6(address)) return ipv6Key(address, subnetBits)
  const withPort = WITH_PORT.exec(address)
  if (withPort !== null) {
    const [, ipv4, bracketed, bare] = withPort
    if (ipv4 !== undefined && isIPv4(ipv4)) return ipv4
    const ipv6 = bracketed ?? bare
    if (ipv6 !== undefined && isIPv6(ipv6)) return ipv6Key(ipv6, subnetBits)
  }
  return checkKey(address, 'the source address', maxLength)
}

/** The key of a valid IPv6 address: IPv4-mapped as IPv4, otherwise its first `subnetBits` bits. */
function ipv6Key (address: string, subnetBits: number): string {
  // An IPv6 address may carry a zone id (`fe80::1%eth0`), which names the link, not the host.
  const zone = address.indexOf('%')
  const groups = ipv6Groups(zone === -1 ? address : address.slice(0, zone))
  if (groups[0] === 0 && groups[1] === 0 && groups[2] === 0 && groups[3] === 0 && groups[4] === 0 && groups[5] === 0xffff) {
    return `${groups[6] >> 8}.${groups[6] & 0xff}.${groups[7] >> 8}.${groups[7] & 0xff}`
  }
  let bits = subnetBits
  const kept: string[] = []
  for (let i = 0; i < 8 && bits > 0; i++, bits -= 16) {
    const mask = bits >= 16 ? 0xffff : (0xffff << (16 - bits)) & 0xffff
    kept.push((groups[i] & mask).toString(16))
  }
  return `${kept.join(':')}${kept.length < 8 ? '::' : ''}/${subnetBits}`
}

/** The eight 16-bit groups of a valid IPv6 address (one that `isIPv6` accepts). */
function ipv6Groups (ip: string): number[] {
  let text = ip
  const lastColon = text.lastIndexOf(':')
  const tail = text.slice(lastColon + 1)
  if (tail.includes('.')) {
    const [a, b, c, d] = tail.split('.').map(Number)
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head, rest] = text.split('::')
  const front = head === '' ? [] : head.split(':')
  const back = rest === undefined || rest === '' ? [] : rest.split(':')
  const zeros = new Array<string>(8 - front.length - back.length).fill('0')
  return [...front, ...zeros, ...back].map(group => parseInt(group, 16))
}
