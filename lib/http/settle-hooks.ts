import type { FastifyReply, FastifyRequest } from 'fastify'
import { writeQuota } from './quota-headers.js'
import { kTicket, type SlottedRequest } from './request-ticket.js'

/**
 * The hooks that settle a request's reservations once the handler has answered: onSend for every
 * answer, onError for an error answer as soon as it is known. Each runs after the route's own
 * hooks of its kind, which may still set the outcome.
 */

/**
 * onSend: the quota headers and the settlement, now that the handler has answered and the outcome
 * is final (a refusal wrote its own headers). Every answer Fastify sends through its hooks passes
 * here, after the handler's, whether or not the client is still there: not onResponse, whose
 * moment the client decides. A client that hangs up, or stops reading, never lets a response
 * finish (a response queued behind another on its connection included), so onResponse never
 * comes; and Node finishes an HTTP/2 response the client reset at once, while the handler is
 * still checking the secret. Settling twice (an error answer passes onSend again) does nothing.
 */
export function beforeSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, next: (err: Error | null, payload: unknown) => void): void {
  const ticket = (request as SlottedRequest)[kTicket]
  if (ticket !== null) {
    // Settling first holds the units a shared store granted before the answer (see
    // `RequestPaces._settle`); it changes nothing the headers read.
    ticket._send()
    if (!ticket.refused) writeQuota(reply, ticket._held, ticket.outcome, null)
  }
  next(null, payload)
}

/**
 * onError: an error answer settles as soon as it is known. Fastify writes its last-resort error
 * answer (when an onSend hook fails on an error answer) straight to the socket, past every
 * onSend; the route's onError hooks run before it.
 */
export function settleOnError (request: FastifyRequest, _reply: FastifyReply, _error: Error, next: () => void): void {
  const ticket = (request as SlottedRequest)[kTicket]
  if (ticket !== null) ticket._settle()
  next()
}
