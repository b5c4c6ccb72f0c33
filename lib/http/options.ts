import type { FastifyRequest } from 'fastify'
import type { PaceEventHook } from './observer.js'
import type { Clock } from '../bucket/pace.js'
import type { PaceStore } from '../store.js'

export interface ExchangePaceOptions {
  /** Monotonic clock in milliseconds handed to every pace. Default: `performance.now`. */
  now?: Clock | undefined
  /** Prefix length that groups IPv6 sources into one key: an integer 1..128. Default: 64. */
  ipv6Subnet?: number | undefined
  /** Longest key accepted; a longer declared client id is a 400. An integer >= 1. Default: 255. */
  maxKeyLength?: number | undefined
  /** Builds the JSON body of a 429. Default: `{ error: 'temporarily_unavailable', error_description }`. */
  errorResponseBuilder?: ((request: FastifyRequest, refusal: PaceRefusal) => object) | undefined
  /**
   * Where the paces live. Default: this replica's memory, so each rate holds per replica. A shared
   * store (`RedisStore`) makes each rate hold over all replicas together.
   */
  store?: PaceStore | undefined
  /**
   * Called with each decision a pace makes that an operator may want to count or alert on: a
   * refusal (429), a refund, a malformed key (400), and an operator's reset or block (with null
   * for the request). Runs synchronously on the request's path; an error it throws is logged once
   * per pace and ignored. Default: none.
   */
  onEvent?: PaceEventHook | undefined
  /**
   * Log the keys of client paces (declared client ids, pairs, custom keys) with the plugin's log
   * lines. Client ids can be personal data, so by default only source addresses are logged, as
   * Fastify's own request log has them. Default: false.
   */
  logClientIds?: boolean | undefined
  /**
   * Every pace in shadow, unless it says `shadow: false`: refusals are counted, logged and told to
   * `onEvent`, not enforced (see `PaceRouteOptions.shadow`). For trying new paces on live traffic.
   * Default: false.
   */
  shadow?: boolean | undefined
}

/** What `errorResponseBuilder` is told about a refusal. */
export interface PaceRefusal {
  /** The status the refusal is answered with: 429 unless the pace's own `refusal` gives another. */
  statusCode: number
  /** The pace that refused. */
  name: string
  /** Its rate: `limit` units per `window` seconds, `perSecond` of them per second. */
  perSecond: number
  limit: number
  window: number
  /** Exact wait until one unit is back, in milliseconds. */
  retryAfterMs: number
  /** The Retry-After header's value: whole seconds, at least 1. */
  retryAfter: number
}

/** The plugin's options, checked, with their defaults. */
export interface CheckedOptions {
  readonly now: Clock | undefined
  readonly ipv6Subnet: number
  readonly maxKeyLength: number
  readonly errorResponseBuilder: (request: FastifyRequest, refusal: PaceRefusal) => object
  readonly store: PaceStore | undefined
  readonly onEvent: PaceEventHook | undefined
  readonly logClientIds: boolean
  readonly shadow: boolean
}

/** The body of a 429 unless `errorResponseBuilder` builds another: RFC 6749's error object. */
function refusalBody (_request: FastifyRequest, refusal: PaceRefusal): object {
  return {
    error: 'temporarily_unavailable',
    error_description: `Too many requests for this ${refusal.name} pace; retry after ${refusal.retryAfter} second${refusal.retryAfter === 1 ? '' : 's'}`
  }
}

/** Checks the plugin's options and fills in defaults. Throws a TypeError naming the option and the value. */
export function checkOptions (options: ExchangePaceOptions): CheckedOptions {
  const { now, ipv6Subnet = 64, maxKeyLength = 255, errorResponseBuilder = refusalBody, store, onEvent, logClientIds = false, shadow = false } = options
  if (now !== undefined && typeof now !== 'function') throw new TypeError(`exchangepace: now must be a function returning milliseconds, got ${typeof now}`)
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128) throw new TypeError(`exchangepace: ipv6Subnet must be an integer from 1 to 128, got ${String(ipv6Subnet)}`)
  if (!Number.isInteger(maxKeyLength) || maxKeyLength < 1) throw new TypeError(`exchangepace: maxKeyLength must be an integer >= 1, got ${String(maxKeyLength)}`)
  if (typeof errorResponseBuilder !== 'function') throw new TypeError(`exchangepace: errorResponseBuilder must be a function, got ${typeof errorResponseBuilder}`)
  if (store !== undefined && (store === null || typeof store.pace !== 'function' || typeof store.scope !== 'string' || typeof store.outage !== 'string')) {
    throw new TypeError('exchangepace: store must be a PaceStore such as RedisStore')
  }
  if (onEvent !== undefined && typeof onEvent !== 'function') throw new TypeError(`exchangepace: onEvent must be a function, got ${typeof onEvent}`)
  if (typeof logClientIds !== 'boolean') throw new TypeError(`exchangepace: logClientIds must be a boolean, got ${typeof logClientIds}`)
  if (typeof shadow !== 'boolean') throw new TypeError(`exchangepace: shadow must be a boolean, got ${typeof shadow}`)
  return { now, ipv6Subnet, maxKeyLength, errorResponseBuilder, store, onEvent, logClientIds, shadow }
}
