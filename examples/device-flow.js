// The device authorization grant (RFC 8628) of the example authorization server
// (examples/server.js): a device asks POST /device_authorization for a code, its user approves the
// user code at POST /device, and the device polls POST /token with the device_code until it gets
// its token.
//
// The poll is paced by exchangepace, keyed by the device_code (hashed by the plugin: the code is in
// no row, log line or event) at the interval handed out: one poll per 5 seconds. A faster poll is
// refused before the handler runs with RFC 8628's own answer, 400 {"error":"slow_down"}, and the
// device's interval grows by 5 seconds (section 3.5); the handler answers slow_down, too, to a poll
// that comes sooner than that grown interval. Both come before authorization_pending is decided.

import { createHash, randomBytes, randomInt } from 'node:crypto'
import { DEVICE_GRANT, ISSUER, sendOAuth } from './client-auth.js'

/** The interval handed out, in seconds (RFC 8628 section 3.2's default). */
export const DEVICE_INTERVAL = 5
/** How long a device code lives, in seconds. */
const DEVICE_LIFETIME = 600
/** RFC 8628 section 6.1: a user code of 8 characters from 20 consonants, written XXXX-XXXX. */
const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ'

const SLOW_DOWN = { statusCode: 400, body: { error: 'slow_down', error_description: 'poll no more often than the interval, now 5 seconds longer' } }

/** A device code as a server stores it: hashed, so that a copy of the store issues no token. */
const stored = code => createHash('sha256').update(code).digest('base64url')

function userCode () {
  const letters = Array.from({ length: 8 }, () => USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)]).join('')
  return `${letters.slice(0, 4)}-${letters.slice(4)}`
}

/**
 * One server's pending device authorizations, on the server's monotonic clock `now` (ms), and
 * `issue(clientId, scopes)`, which issues an access token.
 */
export function deviceFlow (now, issue) {
  /** stored(device_code) -> { clientId, scopes, userCode, expiresAt, interval, lastPoll, approved } */
  const devices = new Map()
  /** user_code -> stored(device_code) */
  const userCodes = new Map()

  /** POST /device_authorization, for an authenticated client (RFC 8628 section 3.1). */
  function authorizeDevice (request, reply, { id, client }) {
    if (!client.grantTypes.includes(DEVICE_GRANT)) return sendOAuth(reply, 400, { error: 'unauthorized_client', error_description: `${id} may not use the device grant` })
    const scope = request.body.scope
    const scopes = scope === undefined ? client.scopes : scope.split(' ').filter(Boolean)
    if (scopes.some(s => !client.scopes.includes(s))) return sendOAuth(reply, 400, { error: 'invalid_scope', error_description: `${id} may request ${client.scopes.join(' ')}` })
    const deviceCode = randomBytes(32).toString('base64url')
    const code = userCode()
    devices.set(stored(deviceCode), { clientId: id, scopes, userCode: code, expiresAt: now() + DEVICE_LIFETIME * 1000, interval: DEVICE_INTERVAL, lastPoll: -Infinity, approved: false })
    userCodes.set(code, stored(deviceCode))
    return sendOAuth(reply, 200, {
      device_code: deviceCode,
      user_code: code,
      verification_uri: `${ISSUER}/device`,
      verification_uri_complete: `${ISSUER}/device?user_code=${code}`,
      expires_in: DEVICE_LIFETIME,
      interval: DEVICE_INTERVAL
    })
  }

  /**
   * POST /device: the user approves the user code shown on the device. A real server signs the
   * user in and asks for consent first. A wrong code is a failure the per-source budget counts
   * (RFC 8628 section 5.1: user codes are short, so guessing them must be slow).
   */
  function approve (request, reply) {
    const device = devices.get(userCodes.get(request.body.user_code.toUpperCase()))
    if (device === undefined || device.expiresAt <= now()) {
      request.pace.outcome = 'rejected'
      return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'no pending device has this user code' })
    }
    device.approved = true
    userCodes.delete(device.userCode)
    return sendOAuth(reply, 200, { approved: true, scope: device.scopes.join(' ') })
  }

  /**
   * The device_code grant at POST /token, for an authenticated client (RFC 8628 section 3.4). A
   * poll sooner than the device's grown interval is slow_down before anything else is decided;
   * an unknown code is invalid_grant (a stranger guessing codes is bounded by the source pace).
   */
  function pollToken (request, reply, { id }) {
    const deviceCode = request.body.device_code
    if (deviceCode === undefined) return sendOAuth(reply, 400, { error: 'invalid_request', error_description: 'device_code is required' })
    const device = devices.get(stored(deviceCode))
    if (device === undefined || device.clientId !== id) return sendOAuth(reply, 400, { error: 'invalid_grant', error_description: 'unknown device_code' })
    const time = now()
    if (device.expiresAt <= time) {
      devices.delete(stored(deviceCode))
      return sendOAuth(reply, 400, { error: 'expired_token', error_description: 'the device code has expired; start again' })
    }
    if (time - device.lastPoll < device.interval * 1000) {
      device.interval += 5
      return sendOAuth(reply, SLOW_DOWN.statusCode, SLOW_DOWN.body)
    }
    device.lastPoll = time
    if (!device.approved) return sendOAuth(reply, 400, { error: 'authorization_pending', error_description: 'the user has not approved yet' })
    devices.delete(stored(deviceCode))
    return sendOAuth(reply, 200, issue(id, device.scopes))
  }

  /**
   * The poll pace's refusal (config.pace refusal): RFC 8628's slow_down, and the device's interval
   * 5 seconds longer, as the device's own will be. The pace is keyed by device_code, so the request
   * carries one, a single string; a code no device holds (a guess) has no record to grow.
   */
  function slowDown (request) {
    const device = devices.get(stored(request.body.device_code))
    if (device !== undefined) device.interval += 5
    return SLOW_DOWN
  }

  return { authorizeDevice, approve, pollToken, slowDown, devices }
}
