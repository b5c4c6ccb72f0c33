import type { OutgoingHttpHeaders } from 'node:http'
import { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { BODY_CAP, type AnswerReader } from './answer-outcome.js'
import { writeQuota } from './quota-headers.js'
import { kTicket, type TicketedRequest } from './request-ticket.js'
import type { Holding } from './bound-pace.js'
import type { PaceTicket } from './ticket.js'

/**
 * The hooks that settle a request's reservations once the handler has answered: onSend for every
 * answer, onError for an error answer as soon as it is known. Each runs after the route's own
 * hooks of its kind, which may still set the outcome.
 */

type OnSend = (request: FastifyRequest, reply: FastifyReply, payload: unknown, next: (err: Error | null, payload?: unknown) => void) => void

/**
 * onSend: the quota headers and the settlement, now that the handler has answered and the outcome
 * is final (a refusal wrote its own headers). Every answer Fastify sends through its hooks passes
 * here, after the handler's, whether or not the client is still there: not onResponse, whose
 * moment the client decides. A client that hangs up, or stops reading, never lets a response
 * finish (a response queued behind another on its connection included), so onResponse never
 * comes; and Node finishes an HTTP/2 response the client reset at once, while the handler is
 * still checking the secret. Settling twice (an error answer passes onSend again) does nothing.
 *
 * When the app set no outcome, it is read from the answer (`reader`): a JSON body the decision
 * needs is read here, a stream's (a proxied upstream's) included, up to `BODY_CAP`, and handed on
 * whole, so that the headers still go out with the outcome known.
 */
export function settleOnSend (reader: AnswerReader): OnSend {
  return function beforeSend (request, reply, payload, next) {
    const ticket = (request as TicketedRequest)[kTicket]
    if (ticket === null) return next(null, payload)
    if (ticket._told || ticket.refused) return sent(ticket, reply, payload, next)
    const quick = reader.quick(reply.statusCode)
    if (quick !== null) {
      ticket._answered(quick)
      return sent(ticket, reply, payload, next)
    }
    const headers = reply.getHeaders() as OutgoingHttpHeaders
    if (payload instanceof Readable && reader.readsBody(headers['content-type'], headers['content-encoding'])) {
      readCapped(payload).then(({ body, rest }) => {
        ticket._answered(reader.decide(request, reply.statusCode, headers, body))
        sent(ticket, reply, rest, next)
      }, next)
      return
    }
    const body = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : undefined
    ticket._answered(reader.decide(request, reply.statusCode, headers, body))
    sent(ticket, reply, payload, next)
  }
}

/** The answer goes out: settles, writes the quota headers (a refusal wrote its own) and hands `payload` on. */
function sent (ticket: PaceTicket<Holding>, reply: FastifyReply, payload: unknown, next: (err: Error | null, payload?: unknown) => void): void {
  // Settling first holds the units a shared store granted before the answer (see
  // `RequestPaces._settle`); it changes nothing the headers read.
  ticket._send()
  if (!ticket.refused) writeQuota(reply, ticket._held, ticket.outcome, null)
  next(null, payload)
}

/**
 * Reads `stream` up to `BODY_CAP`: its whole body, and the same bytes to send on; or, for a longer
 * one, no body, and a stream of what was read followed by the rest.
 */
async function readCapped (stream: Readable): Promise<{ body: Buffer | undefined, rest: Buffer | Readable }> {
  const chunks: Buffer[] = []
  let size = 0
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer | string>
  for (;;) {
    const { value, done } = await iterator.next()
    if (done === true) {
      const body = Buffer.concat(chunks, size)
      return { body, rest: body }
    }
    const chunk = typeof value === 'string' ? Buffer.from(value) : value
    chunks.push(chunk)
    size += chunk.length
    if (size > BODY_CAP) return { body: undefined, rest: Readable.from(replay(chunks, iterator)) }
  }
}

async function * replay (read: Buffer[], iterator: AsyncIterator<Buffer | string>): AsyncGenerator<Buffer | string> {
  yield * read
  for (;;) {
    const { value, done } = await iterator.next()
    if (done === true) return
    yield value
  }
}

/**
 * onError: an error answer settles as soon as it is known. Fastify writes its last-resort error
 * answer (when an onSend hook fails on an error answer) straight to the socket, past every
 * onSend; the route's onError hooks run before it.
 */
export function settleOnError (request: FastifyRequest, _reply: FastifyReply, _error: Error, next: () => void): void {
  const ticket = (request as TicketedRequest)[kTicket]
  if (ticket !== null) ticket._settle()
  next()
}
