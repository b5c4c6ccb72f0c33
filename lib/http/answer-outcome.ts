import type { OutgoingHttpHeader, OutgoingHttpHeaders } from 'node:http'
import type { FastifyRequest } from 'fastify'
import type { PaceOutcome } from './ticket.js'

/**
 * The outcome of an exchange read from its answer, for handlers the app did not write (a mounted
 * Koa or Express app, a proxied upstream): taken only when the app set none.
 */

/** What `outcomeOf` is told of an answer. */
export interface PaceAnswer {
  readonly statusCode: number
  readonly headers: OutgoingHttpHeaders
  /**
   * The body parsed as JSON when the answer is JSON (`application/json` or `+json`), not encoded
   * (`Content-Encoding`), at most 64 KiB and valid; otherwise undefined.
   */
  readonly body: unknown
}

/** Decides the outcome of an exchange from its answer: `'rejected'` when the exchange did not take place. */
export type OutcomeOf = (answer: PaceAnswer, request: FastifyRequest) => PaceOutcome

/** The most of a body read to decide an outcome: an OAuth error body is far smaller. */
export const BODY_CAP = 64 * 1024

/**
 * RFC 6749 section 5.2: client authentication failed when the token endpoint answers 401, or 400
 * with `error: 'invalid_client'`; every other answer is an exchange that took place (an
 * authenticated client's own mistake, `invalid_grant`, spends as ever).
 */
export function oauthOutcome (answer: PaceAnswer): PaceOutcome {
  if (answer.statusCode === 401) return 'rejected'
  const body = answer.body as { error?: unknown } | undefined
  return answer.statusCode === 400 && typeof body === 'object' && body !== null && body.error === 'invalid_client' ? 'rejected' : 'accepted'
}

/** Reads outcomes with the plugin's `outcomeOf` (RFC 6749's by default). */
export class AnswerReader {
  readonly #outcomeOf: OutcomeOf
  /** The app's own function, which is given every JSON body; the default reads a 400's alone. */
  readonly #own: boolean

  constructor (outcomeOf: OutcomeOf | undefined) {
    this.#outcomeOf = outcomeOf ?? oauthOutcome
    this.#own = outcomeOf !== undefined
  }

  /** The outcome of an answer whose body the decision does not need; on the default's path no header is read. */
  quick (statusCode: number): PaceOutcome | null {
    if (this.#own || statusCode === 400) return null
    return statusCode === 401 ? 'rejected' : 'accepted'
  }

  /** Whether an answer with these headers has a body worth reading: JSON, not encoded. */
  readsBody (contentType: OutgoingHttpHeader | undefined, contentEncoding: OutgoingHttpHeader | undefined): boolean {
    if (contentEncoding !== undefined && String(contentEncoding).toLowerCase() !== 'identity') return false
    return typeof contentType === 'string' && /^application\/(?:[\w.+-]*\+)?json\s*(?:;|$)/i.test(contentType)
  }

  /**
   * The outcome of the answer `statusCode`, `headers`, and `bytes` (its body, when read). The
   * app's function that throws or answers anything else is logged, and the exchange taken as
   * rejected: what cannot be told a success counts as a failure, and a named client loses nothing.
   */
  decide (request: FastifyRequest, statusCode: number, headers: OutgoingHttpHeaders, bytes: Buffer | string | undefined): PaceOutcome {
    let body: unknown
    if (bytes !== undefined && bytes.length <= BODY_CAP && this.readsBody(headers['content-type'], headers['content-encoding'])) {
      try {
        body = JSON.parse(bytes.toString())
      } catch {}
    }
    let outcome: unknown
    try {
      outcome = this.#outcomeOf({ statusCode, headers, body }, request)
    } catch (err) {
      request.log.error({ err }, 'exchangepace: outcomeOf threw; the exchange is taken as rejected')
      return 'rejected'
    }
    if (outcome === 'accepted' || outcome === 'rejected') return outcome
    request.log.error(`exchangepace: outcomeOf must return 'accepted' or 'rejected', got ${String(outcome)}; the exchange is taken as rejected`)
    return 'rejected'
  }
}
