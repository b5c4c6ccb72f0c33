import type { FastifyRequest } from 'fastify'
import type { PaceRefusal } from './options.js'

/**
 * A pace's own refusal (`config.pace.refusal`): the status, body and headers it answers with
 * instead of the plugin's 429. RFC 8628 section 3.5 is the case that needs it: a device polling
 * faster than its interval is answered 400 `{"error":"slow_down"}`, not 429.
 */

/** What a pace answers when it refuses; each part left out keeps the plugin's own. */
export interface PaceRefusalAnswer {
  /** An error status, 400 to 599. Default: 429. */
  statusCode?: number | undefined
  /** The JSON body. Default: what `errorResponseBuilder` builds. */
  body?: object | undefined
  /**
   * Headers added to the plugin's own (Retry-After, Cache-Control: no-store, Pragma: no-cache, the
   * quota headers), replacing any of the same name.
   */
  headers?: Readonly<Record<string, string | number>> | undefined
}

/** `config.pace.refusal`: an answer, or a function of the request and the refusal that returns one. */
export type PaceRefusalOption = PaceRefusalAnswer | ((request: FastifyRequest, refusal: PaceRefusal) => PaceRefusalAnswer)

/** A pace's refusal, checked: the answer to give a request `refusal` describes. */
export type RefusalShaper = (request: FastifyRequest, refusal: PaceRefusal) => PaceRefusalAnswer

/** A header name (RFC 9110 section 5.6.2: a token). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** A header value Node sends as given: no control character but tab (RFC 9110 section 5.5). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/
const PARTS = ['statusCode', 'body', 'headers']

/**
 * Checks `option`, the refusal of pace `name` at `at` on a route whose errors start with `prefix`.
 * An answer is checked now, and a wrong one throws a TypeError naming the route and the option; a
 * function's answer is checked on each refusal, and a wrong one is the server's error (a 500 whose
 * logged error names the route and the pace), as a key function's wrong key is.
 */
export function refusalShaper (option: unknown, at: string, prefix: string, name: string): RefusalShaper | null {
  if (option === undefined) return null
  if (typeof option === 'function') {
    const shape = option as RefusalShaper
    return (request, refusal) => {
      const answer = shape(request, refusal)
      const problem = answerProblem(answer)
      if (problem !== null) throw new TypeError(`${prefix}the refusal function of pace ${JSON.stringify(name)} returned an answer whose ${problem}`)
      return answer
    }
  }
  const problem = answerProblem(option)
  if (problem !== null) throw new TypeError(`${prefix}${at}.refusal must be { statusCode?, body?, headers? } or a function returning one: its ${problem}`)
  const answer = option as PaceRefusalAnswer
  return () => answer
}

/** What is wrong with `answer` ("statusCode must be ..., got ..."), or null when it is an answer. */
function answerProblem (answer: unknown): string | null {
  if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) return `shape must be an object, got ${shown(answer)}`
  const { statusCode, body, headers } = answer as Record<string, unknown>
  for (const [part, value] of Object.entries(answer)) {
    if (value !== undefined && !PARTS.includes(part)) return `${part} is not a part of an answer (${PARTS.join(', ')})`
  }
  if (statusCode !== undefined && !(Number.isInteger(statusCode) && (statusCode as number) >= 400 && (statusCode as number) <= 599)) {
    return `statusCode must be an integer from 400 to 599, got ${shown(statusCode)}`
  }
  if (body !== undefined && (body === null || typeof body !== 'object')) return `body must be an object, got ${shown(body)}`
  if (headers === undefined) return null
  if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) return `headers must be an object of header values, got ${shown(headers)}`
  for (const [header, value] of Object.entries(headers)) {
    if (!TOKEN.test(header)) return `header name ${JSON.stringify(header)} is not a token`
    if (typeof value === 'string' ? !FIELD_VALUE.test(value) : !(typeof value === 'number' && Number.isFinite(value))) return `header ${header} must be a string or a finite number, got ${shown(value)}`
  }
  return null
}

function shown (value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (value === null || typeof value !== 'object') return String(value)
  return Array.isArray(value) ? 'an array' : 'an object'
}
