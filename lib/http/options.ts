import type { FastifyRequest } from 'fastify'
import type { PaceEventHook } from './observer.js'
import type { Clock } from '../bucket/pace.js'
import type { PaceStore } from '../store.js'
import type { OutcomeOf } from './answer-outcome.js'

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
   * Whether a declared client id names a registered client, asked synchronously (the registry
   * `rateOf` reads). A request whose declared id names none takes nothing from the paces keyed by
   * the client id (`'client'`, `['client', 'source']`): made-up ids leave no row there, and their
   * failures are counted by the route's per-source paces (a per-source failure budget). Asked once
   * per such pace of a request; a throw is a 500, an answer other than a boolean a TypeError (a 500).
   * Default: every declared id is taken as a client's.
   */
  isClient?: IsClient | undefined
  /**
   * Rows each pace keeps at most in this replica's memory (the in-process store; a shared store
   * keeps its own). At the ceiling the fullest rows are forgotten first, and a new key is refused
   * only while every row is spent. An integer >= 1, or Infinity. Default: 100,000.
   */
  maxKeys?: number | undefined
  /**
   * The outcome of an exchange whose handler set none (a mounted Koa or Express app, a proxied
   * upstream), read from its answer: its status, headers and JSON body. Default: RFC 6749 section
   * 5.2, a 401, or a 400 whose `error` is `invalid_client`, is `'rejected'`, and any other answer
   * `'accepted'`.
   */
  outcomeOf?: OutcomeOf | undefined
  /**
   * Every pace in shadow, unless it says `shadow: false`: refusals are counted, logged and told to
   * `onEvent`, not enforced (see `PaceRouteOptions.shadow`). For trying new paces on live traffic.
   * Default: false.
   */
  shadow?: boolean | undefined
}

/** Whether `clientId`, declared by `request` and not yet verified, names a registered client. Synchronous. */
export type IsClient = (clientId: string, request: FastifyRequest) => boolean

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
  /**
   * A failure budget refused only because of units that requests on this replica still hold, not
   * yet settled (a burst of concurrent requests): were they given back, a unit would be there. The
   * wait is then at most a second, not the budget's refill time.
   */
  inFlight: boolean
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
  readonly isClient: IsClient | undefined
  readonly maxKeys: number
  readonly outcomeOf: OutcomeOf | undefined
  readonly shadow: boolean
}

/** The body of a 429 unless `errorResponseBuilder` builds another: RFC 6749's error object. */
function refusalBody (_request: FastifyRequest, refusal: PaceRefusal): object {
  return {
    error: 'temporarily_unavailable',
    error_description: `Too many requests ${refusal.inFlight ? 'in flight ' : ''}for this ${refusal.name} pace; retry after ${refusal.retryAfter} second${refusal.retryAfter === 1 ? '' : 's'}`
  }
}

/** Checks the plugin's options and fills in defaults. Throws a TypeError naming the option and the value. */
export function checkOptions (options: ExchangePaceOptions): CheckedOptions {
  const { now, ipv6Subnet = 64, maxKeyLength = 255, errorResponseBuilder = refusalBody, store, onEvent, logClientIds = false, isClient, maxKeys = 100_000, outcomeOf, shadow = false } = options
  if (now !== undefined && typeof now !== 'function') throw new TypeError(`exchangepace: now must be a function returning milliseconds, got ${typeof now}`)
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128) throw new TypeError(`exchangepace: ipv6Subnet must be an integer from 1 to 128, got ${String(ipv6Subnet)}`)
  if (!Number.isInteger(maxKeyLength) || maxKeyLength < 1) throw new TypeError(`exchangepace: maxKeyLength must be an integer >= 1, got ${String(maxKeyLength)}`)
  if (typeof errorResponseBuilder !== 'function') throw new TypeError(`exchangepace: errorResponseBuilder must be a function, got ${typeof errorResponseBuilder}`)
  if (store !== undefined && (store === null || typeof store.pace !== 'function' || typeof store.scope !== 'string' || typeof store.outage !== 'string')) {
    throw new TypeError('exchangepace: store must be a PaceStore such as RedisStore')
  }
  if (onEvent !== undefined && typeof onEvent !== 'function') throw new TypeError(`exchangepace: onEvent must be a function, got ${typeof onEvent}`)
  if (typeof logClientIds !== 'boolean') throw new TypeError(`exchangepace: logClientIds must be a boolean, got ${typeof logClientIds}`)
  if (isClient !== undefined && typeof isClient !== 'function') throw new TypeError(`exchangepace: isClient must be a function (clientId, request) => boolean, got ${typeof isClient}`)
  if (maxKeys !== Infinity && (!Number.isInteger(maxKeys) || maxKeys < 1)) throw new TypeError(`exchangepace: maxKeys must be an integer >= 1 or Infinity, got ${String(maxKeys)}`)
  if (outcomeOf !== undefined && typeof outcomeOf !== 'function') throw new TypeError(`exchangepace: outcomeOf must be a function, got ${typeof outcomeOf}`)
  if (typeof shadow !== 'boolean') throw new TypeError(`exchangepace: shadow must be a boolean, got ${typeof shadow}`)
  return { now, ipv6Subnet, maxKeyLength, errorResponseBuilder, store, onEvent, logClientIds, isClient, maxKeys, outcomeOf, shadow }
}
