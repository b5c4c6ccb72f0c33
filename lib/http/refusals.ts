import type { FastifyReply, FastifyRequest } from 'fastify'
import type { PaceRefusal } from './options.js'
import type { Holding } from './bound-pace.js'
import { writeQuota } from './quota-headers.js'
import type { QuotaItems } from './quota-items.js'
import type { PaceRule } from './route-config.js'
import type { PaceReservation } from '../store.js'

/**
 * The answers the plugin gives itself, before the handler runs: a 429 (or the pace's own refusal)
 * when a pace is spent, a 400 when the request's key declaration is malformed. Both are OAuth
 * error objects (RFC 6749 section 5.2) that no cache may keep, serialized here: the route's own
 * response schema (a 400 or 4xx written for its validation errors) or serializer compiler (a Zod
 * type provider's) must not strip or reject them.
 */

/**
 * Answers the refusal of the pace `rule` that refused with `reservation` (or, when
 * `inFlightRetryMs` is given, a refusal that units in flight alone cause, with that wait): 429 with Retry-After in
 * whole seconds (at least 1), the public quotas the request holds from earlier hooks and the
 * refusing pace's own at zero, and the body `build` makes, as built; the pace's own refusal, when
 * it has one, chooses the status, the body and further headers. The pace's refusal is asked before
 * the reply is touched (one that throws leaves the error handler a clean reply); a builder that
 * throws leaves the refusal's status for the error handler, as it always has.
 */
export function refuse (request: FastifyRequest, reply: FastifyReply, rule: Pick<PaceRule, 'name' | 'perSecond' | 'limit' | 'window' | 'refusal'>, quota: QuotaItems, reservation: PaceReservation,
  held: readonly Holding[], build: (request: FastifyRequest, refusal: PaceRefusal) => object, inFlightRetryMs: number | null = null): void {
  const inFlight = inFlightRetryMs !== null
  const retryAfterMs = inFlight ? inFlightRetryMs : reservation.retryAfterMs
  const retryAfter = Math.max(1, Math.ceil(retryAfterMs / 1000))
  const refusal: PaceRefusal = { statusCode: 429, name: rule.name, perSecond: rule.perSecond, limit: rule.limit, window: rule.window, retryAfterMs, retryAfter, inFlight }
  const own = rule.refusal?.(request, refusal)
  const statusCode = own?.statusCode ?? 429
  noStore(reply.code(statusCode).header('retry-after', retryAfter))
  writeQuota(reply, held, null, { quota, retryAfter })
  if (own?.headers !== undefined) reply.headers(own.headers)
  sendSerialized(reply, own?.body ?? build(request, statusCode === 429 ? refusal : { ...refusal, statusCode }))
}

/** Answers 400 invalid_request for a malformed key declaration, saying what is wrong. */
export function sendInvalidRequest (reply: FastifyReply, description: string): void {
  sendSerialized(noStore(reply.code(400)), { error: 'invalid_request', error_description: description })
}

function noStore (reply: FastifyReply): FastifyReply {
  return reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
}

/** Sends `body` as JSON serialized here, not by the route. */
function sendSerialized (reply: FastifyReply, body: unknown): void {
  reply.type('application/json; charset=utf-8').send(JSON.stringify(body))
}
