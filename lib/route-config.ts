import type { FastifyRequest } from 'fastify'
import type { PaceSpend } from './ticket.js'

/**
 * Which key a pace spends from:
 * - `'client'`: the client id the request DECLARES (HTTP Basic, body `client_id`, client assertion
 *   `sub`), before anything verifies it. For token endpoints, with `spend: 'accepted'`.
 * - `'source'`: the source address (`request.ip`), IPv6 grouped by `ipv6Subnet`.
 * - a function: returns the key, or undefined to take nothing from this pace for that request.
 */
export type PaceKey = 'client' | 'source' | ((request: FastifyRequest) => string | undefined)

/** A route's pace, as written in `config.pace`. */
export interface PaceRouteOptions {
  /** Units each key may spend per second: per replica, or over all replicas with a shared store. A number from 1 to 999999999999. */
  perSecond: number
  key: PaceKey
  /**
   * `'accepted'`: only exchanges that took place spend; the unit is refunded when the handler sets
   * `request.pace.outcome = 'rejected'` (the token endpoint). `'every'`: every request spends and
   * nothing is refunded (the authorization endpoint).
   */
  spend: PaceSpend
  /**
   * The table this pace keeps, shared by every route naming it. Default: the route URL (so GET,
   * HEAD and POST of one URL share it; a route at `/` under a prefix with the default
   * `prefixTrailingSlash`: the prefix), followed by `#client`, `#source` or `#key` when the route
   * declares several paces.
   */
  name?: string | undefined
}

/** A pace of one route, checked and with its defaults filled in. */
export interface PaceRule {
  readonly name: string
  readonly perSecond: number
  readonly key: PaceKey
  readonly spend: PaceSpend
  /**
   * Reserved in onRequest, before the body is read, so that a request failing parsing or
   * validation still spends: a source key spent on every request (the authorization endpoint's
   * "every request that got past the method check spends"). Every other pace reserves in preHandler.
   */
  readonly early: boolean
}

/**
 * The highest rate a route may declare: its RateLimit-Policy quota (up to 1000 seconds of the
 * rate, for a fractional one) must stay an RFC 8941 integer, which has at most 15 digits.
 */
const MAX_PER_SECOND = 999_999_999_999

/** Structured-field strings (RFC 8941) allow printable ASCII only; the name goes into headers. */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/

function describe (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'string') return JSON.stringify(value)
  // JSON would print NaN and Infinity as null.
  if (typeof value === 'number') return String(value)
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/**
 * Checks `config.pace` of the route `route` (e.g. "POST /token") and fills in defaults. Throws a
 * TypeError naming the route, the option and the value.
 */
export function paceRules (config: unknown, route: string, url: string): PaceRule[] {
  const fail = (option: string, expected: string, value: unknown): never => {
    throw new TypeError(`exchangepace: route ${route}: ${option} must be ${expected}, got ${describe(value)}`)
  }
  const list = Array.isArray(config) ? config : [config]
  if (list.length === 0) fail('config.pace', 'a pace or a non-empty array of paces', config)
  const rules = list.map((entry: unknown, index): PaceRule => {
    const at = Array.isArray(config) ? `config.pace[${index}]` : 'config.pace'
    if (entry === null || typeof entry !== 'object') return fail(at, 'an object { perSecond, key, spend, name? }', entry)
    const { perSecond, key, spend, name, ...unknown } = entry as Record<string, unknown>
    // A misspelt option would otherwise be dropped without a word (a misspelt name, say, leaves the
    // pace its default name); one set to undefined says nothing, as a missing one does.
    for (const [option, value] of Object.entries(unknown)) {
      if (value !== undefined) throw new TypeError(`exchangepace: route ${route}: ${at}.${option} is not an option of a pace (perSecond, key, spend, name)`)
    }
    if (typeof perSecond !== 'number' || !(perSecond >= 1 && perSecond <= MAX_PER_SECOND)) {
      fail(`${at}.perSecond`, `a number from 1 to ${MAX_PER_SECOND}`, perSecond)
    }
    if (key !== 'client' && key !== 'source' && typeof key !== 'function') {
      fail(`${at}.key`, "'client', 'source' or a function (request) => string | undefined", key)
    }
    if (spend !== 'accepted' && spend !== 'every') fail(`${at}.spend`, "'accepted' or 'every'", spend)
    if (name !== undefined && (typeof name !== 'string' || !PRINTABLE_ASCII.test(name))) {
      fail(`${at}.name`, 'a non-empty string of printable ASCII', name)
    }
    const defaultName = list.length === 1 ? url : `${url}#${typeof key === 'string' ? key : 'key'}`
    if (name === undefined && !PRINTABLE_ASCII.test(defaultName)) {
      fail(`${at}.name`, `given when the route's URL is not printable ASCII (the default name, ${JSON.stringify(defaultName)}, would go into headers)`, name)
    }
    return {
      name: (name as string | undefined) ?? defaultName,
      perSecond: perSecond as number,
      key: key as PaceKey,
      spend: spend as PaceSpend,
      early: key === 'source' && spend === 'every'
    }
  })
  const names = new Set<string>()
  for (const rule of rules) {
    if (names.has(rule.name)) fail('config.pace', `paces with distinct names (two are named ${JSON.stringify(rule.name)})`, rule.name)
    names.add(rule.name)
  }
  return rules
}
