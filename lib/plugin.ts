import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RouteOptions } from 'fastify'
import type { Clock, Pace } from './pace.js'
import { InvalidRequest, checkKey, declaredClientId, sourceKey } from './keys.js'
import { PaceRegistry } from './registry.js'
import { paceRules, type PaceRouteOptions, type PaceRule } from './route-config.js'
import { PaceTicket, type HeldReservation } from './ticket.js'
import type { PaceReservation, PaceStore, SharedPace } from './store.js'

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
}

/** What `errorResponseBuilder` is told about a refusal. */
export interface PaceRefusal {
  statusCode: 429
  /** The pace that refused. */
  name: string
  perSecond: number
  /** Exact wait until one unit is back, in milliseconds. */
  retryAfterMs: number
  /** The Retry-After header's value: whole seconds, at least 1. */
  retryAfter: number
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The paces of this replica by name (exchangepace). */
    pace: PaceRegistry
  }
  interface FastifyRequest {
    /**
     * On a route with `config.pace`: what the request holds, and the outcome flag the handler sets
     * to `'rejected'` when the exchange did not take place. Null on routes without a pace.
     */
    pace: PaceTicket | null
  }
  interface FastifyContextConfig {
    /** Paces this route spends from (exchangepace). */
    pace?: PaceRouteOptions | readonly PaceRouteOptions[] | undefined
  }
}

/** A route's pace bound to its table, with its header fragments built once. */
interface BoundPace {
  readonly rule: PaceRule
  /** This replica's pace of that name: the table itself, or a shared store's fallback. */
  readonly pace: Pace
  /** The shared store's pace, or null for the in-process default. */
  readonly shared: SharedPace | null
  readKey (request: FastifyRequest): string | undefined
  /** Its quota headers may be shown to whoever sent the request, whatever the outcome. */
  readonly public: boolean
  /** `"name";q=10;w=1` */
  readonly policyItem: string
  /** `"name";r=` */
  readonly quotaPrefix: string
  /** `"name";r=0;t=1`: the item of a refusal. */
  readonly spentItem: string
  /**
   * The latest RateLimit item written for a grant, and the units remaining it states (NaN before
   * the first): reused while the count repeats, as it does under steady traffic, where each
   * request finds its key's bucket refilled and leaves `floor(perSecond) - 1`.
   */
  grantedItem: string
  grantedRemaining: number
  /** The latest RateLimit-Policy and RateLimit lists that ended with this pace's item. */
  readonly policyList: JoinedList
  readonly quotaList: JoinedList
}

/** A list (RFC 8941) held as text, the item appended to it, and the list that made. */
interface JoinedList {
  list: string
  item: string
  joined: string
}

/**
 * The paces one hook reserves. `commits`: every one of them is a source pace spent on every
 * request, and they are all the route has, so nothing can ever be refunded and every quota is
 * public: the hook writes the quota headers and commits at once, and the route needs no onSend
 * (the authorization endpoint's shape).
 */
interface ReserveStep {
  readonly paces: readonly BoundPace[]
  readonly commits: boolean
}

/** A held reservation, with the pace that gave it (for the quota headers). */
interface Holding extends HeldReservation {
  readonly bound: BoundPace
}

const DEFAULTS = { ipv6Subnet: 64, maxKeyLength: 255 }

/**
 * The source key of a request without a source address: on a Unix socket Fastify's `request.ip`
 * can be undefined. Such requests share one bucket per pace, as they come through one peer;
 * failing them would take the route down.
 */
const NO_ADDRESS = 'unknown'

function checkOptions (options: ExchangePaceOptions): Required<Pick<ExchangePaceOptions, 'ipv6Subnet' | 'maxKeyLength'>> {
  const { now, ipv6Subnet = DEFAULTS.ipv6Subnet, maxKeyLength = DEFAULTS.maxKeyLength, errorResponseBuilder } = options
  if (now !== undefined && typeof now !== 'function') throw new TypeError(`exchangepace: now must be a function returning milliseconds, got ${typeof now}`)
  if (!Number.isInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128) throw new TypeError(`exchangepace: ipv6Subnet must be an integer from 1 to 128, got ${String(ipv6Subnet)}`)
  if (!Number.isInteger(maxKeyLength) || maxKeyLength < 1) throw new TypeError(`exchangepace: maxKeyLength must be an integer >= 1, got ${String(maxKeyLength)}`)
  if (errorResponseBuilder !== undefined && typeof errorResponseBuilder !== 'function') throw new TypeError(`exchangepace: errorResponseBuilder must be a function, got ${typeof errorResponseBuilder}`)
  const { store } = options
  if (store !== undefined && (store === null || typeof store.pace !== 'function' || typeof store.scope !== 'string' || typeof store.outage !== 'string')) {
    throw new TypeError('exchangepace: store must be a PaceStore such as RedisStore')
  }
  return { ipv6Subnet, maxKeyLength }
}

/** A structured-field string (RFC 8941): the name is printable ASCII, so only `\` and `"` need escaping. */
function sfString (text: string): string {
  return `"${text.replace(/[\\"]/g, '\\$&')}"`
}

/**
 * `q` and `w` of a RateLimit-Policy item. The draft wants an integer quota, so a fractional rate is
 * stated over the shortest whole window that makes it one (1.5/s is q=3;w=2), up to 1000 s; beyond
 * that, the whole units one second holds.
 */
function quotaPolicy (perSecond: number): string {
  for (let window = 1; window <= 1000; window++) {
    const quota = perSecond * window
    if (Math.abs(quota - Math.round(quota)) < 1e-9) return `q=${Math.round(quota)};w=${window}`
  }
  return `q=${Math.floor(perSecond)};w=1`
}

function isThenable (value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

function ignoreRejection (): void {}

/** What a key function returned instead of a key, for the error that says so. */
function notAKey (value: unknown): string {
  if (isThenable(value)) return 'a Promise (key functions run synchronously: read the key from the request, or resolve it in an earlier hook)'
  if (value === null) return 'null'
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`
}

function keyDescription (rule: PaceRule): string {
  if (rule.key === 'client') return 'declared client id'
  if (rule.key === 'source') return 'source address'
  return 'custom key'
}

/** Where the rate holds without a shared store. */
const PER_REPLICA = 'per replica'

/**
 * The sentence every paced route's description gets: the rate, the key, and the scope over which
 * the rate holds (per replica by default, or the shared store's).
 */
function paceSentence (rules: readonly PaceRule[], store: PaceStore | undefined): string {
  const parts = rules.map(rule => `${rule.perSecond} requests per second per ${keyDescription(rule)}` +
    (rule.spend === 'accepted' ? ' (rejected exchanges are refunded)' : ' (every request counts)'))
  const holds = store === undefined
    ? `Each rate is ${PER_REPLICA}: N replicas admit up to N times it.`
    : `Each rate is ${store.scope}; while the store is unavailable, ${store.outage}.`
  return `Paced by exchangepace: ${parts.join('; ')}. ${holds}`
}

function refusalBody (_request: FastifyRequest, refusal: PaceRefusal): object {
  return {
    error: 'temporarily_unavailable',
    error_description: `Too many requests for this ${refusal.name} pace; retry after ${refusal.retryAfter} second${refusal.retryAfter === 1 ? '' : 's'}`
  }
}

// The quota headers' values are reused rather than rebuilt whenever they come out the same: Node
// checks every header value with a regular expression, which takes a string built by
// concatenation through V8's runtime to flatten it first, on every response. A value that is
// reused is flattened once.

/** Appends `item` to a structured-field list held as text: the list `last` holds when it was made of the same two. */
function listItem (list: string, item: string, last: JoinedList): string {
  if (list === '') return item
  if (list !== last.list || item !== last.item) {
    last.list = list
    last.item = item
    last.joined = `${list}, ${item}`
  }
  return last.joined
}

/** The RateLimit item of a grant that left `remaining` units: the latest one written when it states as many. */
function grantedItem (bound: BoundPace, remaining: number): string {
  if (remaining !== bound.grantedRemaining) {
    bound.grantedItem = `${bound.quotaPrefix}${remaining};t=1`
    bound.grantedRemaining = remaining
  }
  return bound.grantedItem
}

/** The unit `reservation` took from `bound`'s pace under `key`, as a ticket holds it. */
function holding (bound: BoundPace, key: string, reservation: PaceReservation): Holding {
  return { name: bound.rule.name, key, spend: bound.rule.spend, reservation, bound }
}

/**
 * Writes RateLimit-Policy and RateLimit for the units `held`: source quotas always, the others
 * (which a stranger naming a client must not read) only when `showPrivate`. A source pace that
 * refused the request, `refusedBy`, is listed last with nothing remaining.
 */
function writeQuota (reply: FastifyReply, held: readonly Holding[], showPrivate: boolean, refusedBy: BoundPace | null): void {
  let policy = ''
  let quota = ''
  for (const { bound, reservation } of held) {
    if (!showPrivate && !bound.public) continue
    policy = listItem(policy, bound.policyItem, bound.policyList)
    quota = listItem(quota, grantedItem(bound, reservation.remaining), bound.quotaList)
  }
  if (refusedBy !== null && refusedBy.public) {
    policy = listItem(policy, refusedBy.policyItem, refusedBy.policyList)
    quota = listItem(quota, refusedBy.spentItem, refusedBy.quotaList)
  }
  if (policy !== '') reply.header('ratelimit-policy', policy).header('ratelimit', quota)
}

/**
 * The 400 for a malformed key declaration, serialized here: the route's own response schema (a
 * 400 or 4xx written for its validation errors) must not strip or reject the OAuth error body.
 */
function sendInvalidRequest (reply: FastifyReply, description: string): void {
  sendSerialized(reply.code(400).header('cache-control', 'no-store').header('pragma', 'no-cache'),
    { error: 'invalid_request', error_description: description })
}

/**
 * Sends `body` as JSON serialized here, not by the route: the plugin's own answers (the 400, the
 * 429) keep their OAuth body whatever response schema or serializer compiler the route has.
 */
function sendSerialized (reply: FastifyReply, body: unknown): void {
  reply.type('application/json; charset=utf-8').send(JSON.stringify(body))
}

function exchangePacePlugin (fastify: FastifyInstance, options: ExchangePaceOptions, done: (err?: Error) => void): void {
  let checked: ReturnType<typeof checkOptions>
  try {
    checked = checkOptions(options)
  } catch (err) {
    return done(err as Error)
  }
  const { ipv6Subnet, maxKeyLength } = checked
  const buildRefusalBody = options.errorResponseBuilder ?? refusalBody
  const registry = new PaceRegistry(options.now)
  let keysBySource = false
  fastify.decorate('pace', registry)
  fastify.decorateRequest('pace', null)

  const readClient = (request: FastifyRequest): string | undefined =>
    declaredClientId(request.headers.authorization, request.body, maxKeyLength)
  let warnedNoAddress = false
  const readSource = (request: FastifyRequest): string => {
    const address = request.ip as string | undefined
    if (address !== undefined) return sourceKey(address, ipv6Subnet, maxKeyLength)
    if (!warnedNoAddress) {
      warnedNoAddress = true
      fastify.log.warn(`exchangepace: a request has no source address (request.ip is undefined, as on a Unix socket): every such request is paced by source as one, under the key ${JSON.stringify(NO_ADDRESS)}. To pace clients apart there, give the pace a key function that reads the address your proxy forwards.`)
    }
    return NO_ADDRESS
  }

  function bind (rule: PaceRule, route: string): BoundPace {
    const pace = registry._declare(rule, route)
    const { key } = rule
    let readKey = readClient
    if (key === 'source') {
      readKey = readSource
      keysBySource = true
    } else if (typeof key === 'function') {
      const what = `the key of pace ${JSON.stringify(rule.name)}`
      readKey = (request) => {
        const value: unknown = key(request)
        if (value === undefined) return undefined
        // What the function returns is the server's doing, not the client's: a 500, not a 400.
        if (typeof value !== 'string') {
          // A Promise left behind would end the process if it rejected: Node treats an unhandled
          // rejection as an uncaught exception. The 500 below already reports the mistake.
          if (isThenable(value)) value.then(undefined, ignoreRejection)
          throw new TypeError(`exchangepace: route ${route}: the key function of pace ${JSON.stringify(rule.name)} returned ${notAKey(value)}; it must return a string or undefined`)
        }
        return checkKey(value, what, maxKeyLength)
      }
    }
    const name = sfString(rule.name)
    return {
      rule,
      pace,
      shared: sharedPace(rule, pace, route),
      readKey,
      public: key === 'source',
      policyItem: `${name};${quotaPolicy(rule.perSecond)}`,
      quotaPrefix: `${name};r=`,
      spentItem: `${name};r=0;t=1`,
      grantedItem: '',
      grantedRemaining: Number.NaN,
      policyList: { list: '', item: '', joined: '' },
      quotaList: { list: '', item: '', joined: '' }
    }
  }

  /** The store's pace for `rule`, or null without a store. A pace the store refuses fails the route, named. */
  function sharedPace (rule: PaceRule, pace: Pace, route: string): SharedPace | null {
    if (options.store === undefined) return null
    try {
      return options.store.pace(rule.name, rule.perSecond, pace, fastify.log)
    } catch (err) {
      const reason = err instanceof Error ? err.message.replace(/^exchangepace: /, '') : String(err)
      throw new TypeError(`exchangepace: route ${route}: ${reason}`, { cause: err })
    }
  }

  function refuse (request: FastifyRequest, reply: FastifyReply, bound: BoundPace, reservation: PaceReservation): void {
    const retryAfter = Math.max(1, Math.ceil(reservation.retryAfterMs / 1000))
    const refusal: PaceRefusal = { statusCode: 429, name: bound.rule.name, perSecond: bound.rule.perSecond, retryAfterMs: reservation.retryAfterMs, retryAfter }
    reply.code(429)
      .header('retry-after', retryAfter)
      .header('cache-control', 'no-store')
      .header('pragma', 'no-cache')
    // Source quotas go on every response, this one included: those an earlier hook (onRequest) holds,
    // then the refusing pace's own at zero. beforeSend skips refused tickets.
    writeQuota(reply, (request.pace as PaceTicket<Holding>).held, false, bound)
    // The body is the builder's as built, whatever serializer the route has (a response schema, or
    // a compiler such as a Zod type provider's).
    sendSerialized(reply, buildRefusalBody(request, refusal))
  }

  /**
   * Reserves one unit from each pace of `step` for `request`, all or nothing: when one refuses or a
   * key is malformed, what this hook took is refunded and the request is answered here. In-process
   * paces answer synchronously, so the common path allocates no promise; a shared store's answer
   * continues the same loop from where it stopped.
   */
  function reserveAll (step: ReserveStep, request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
    let ticket = request.pace as PaceTicket<Holding> | null
    if (ticket === null) {
      ticket = new PaceTicket<Holding>()
      request.pace = ticket
    }
    reserveFrom(step, 0, ticket, ticket.held.length, request, reply, next)
  }

  function reserveFrom (step: ReserveStep, start: number, ticket: PaceTicket<Holding>, first: number,
    request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
    const paces = step.paces
    for (let i = start; i < paces.length; i++) {
      const bound = paces[i]
      let key: string | undefined
      try {
        key = bound.readKey(request)
      } catch (err) {
        giveBack(step, ticket, first)
        if (err instanceof InvalidRequest) return sendInvalidRequest(reply, err.message)
        return next(err as Error)
      }
      if (key === undefined) continue
      if (bound.shared !== null) {
        const held = key
        let answer: Promise<PaceReservation>
        try {
          answer = bound.shared.reserve(key)
        } catch (err) {
          // A store of one's own that throws instead of rejecting is taken as rejecting.
          answer = Promise.reject(err)
        }
        answer.then(reservation => {
          // The request was answered while the store decided (a handler timeout): its ticket was
          // settled without this unit, which is settled now by the same rule. A refusal changes
          // nothing: the answer is already on its way.
          if (ticket.settled) {
            if (reservation.granted) ticket._holdLate(holding(bound, held, reservation))
            return
          }
          // Here, unlike in the hook itself, a throw (an errorResponseBuilder's) would be an
          // unhandled rejection: it fails the request as it does on the in-memory path.
          try {
            if (hold(step, ticket, first, bound, held, reservation, request, reply)) reserveFrom(step, i + 1, ticket, first, request, reply, next)
          } catch (err) {
            next(err as Error)
          }
        }, (err: Error) => {
          giveBack(step, ticket, first)
          next(err)
        })
        return
      }
      if (!hold(step, ticket, first, bound, key, bound.pace.reserve(key), request, reply)) return
    }
    if (step.commits) {
      writeQuota(reply, ticket.held, false, null)
      ticket._settle()
    }
    next()
  }

  /**
   * The hook answers the request itself (a refusal, a malformed key, an error): what it took, from
   * `first` on, goes back. A step that commits is on a route without the plugin's onSend and onError
   * hooks, so its ticket is settled now or never.
   */
  function giveBack (step: ReserveStep, ticket: PaceTicket<Holding>, first: number): void {
    ticket._refundFrom(first)
    if (step.commits) ticket._settle()
  }

  /** Keeps a granted unit on the ticket; on a refusal gives back this hook's units and answers 429. */
  function hold (step: ReserveStep, ticket: PaceTicket<Holding>, first: number, bound: BoundPace, key: string, reservation: PaceReservation,
    request: FastifyRequest, reply: FastifyReply): boolean {
    if (!reservation.granted) {
      ticket.refused = true
      giveBack(step, ticket, first)
      refuse(request, reply, bound, reservation)
      return false
    }
    ticket.held.push(holding(bound, key, reservation))
    return true
  }

  /**
   * onSend, after the route's own: the quota headers and the settlement, now that the handler has
   * answered and the outcome is final (a refusal wrote its own headers). Every answer Fastify sends
   * through its hooks passes here, after the handler's, whether or not the client is still there:
   * not onResponse, whose moment the client decides. A client that hangs up, or stops reading,
   * never lets a response finish (a response queued behind another on its connection included),
   * so onResponse never comes; and Node finishes an HTTP/2 response the client reset at once, while
   * the handler is still checking the secret. Settling twice (an error answer passes onSend again)
   * does nothing.
   */
  function beforeSend (request: FastifyRequest, reply: FastifyReply, payload: unknown, next: (err: Error | null, payload: unknown) => void): void {
    const ticket = request.pace as PaceTicket<Holding> | null
    if (ticket !== null) {
      if (!ticket.refused) writeQuota(reply, ticket.held, ticket.outcome === 'accepted', null)
      ticket._settle()
    }
    next(null, payload)
  }

  /**
   * onError, after the route's own (which may still set the outcome): an error answer settles as
   * soon as it is known. Fastify writes its last-resort error answer (when an onSend hook fails on
   * an error answer) straight to the socket, past every onSend; the route's onError hooks run
   * before it.
   */
  function settleOnError (request: FastifyRequest, _reply: FastifyReply, _error: Error, next: () => void): void {
    request.pace?._settle()
    next()
  }

  fastify.addHook('onRoute', function paceRoute (this: FastifyInstance, routeOptions: RouteOptions) {
    const config = routeOptions.config?.pace
    if (config === undefined) return
    const route = `${String(routeOptions.method)} ${routeOptions.url}`
    const rules = paceRules(config, route, paceUrl(routeOptions))
    const bound = rules.map(rule => bind(rule, route))
    const early = bound.filter(b => b.rule.early)
    const late = bound.filter(b => !b.rule.early)

    const commits = late.length === 0
    if (early.length > 0) {
      const step: ReserveStep = { paces: early, commits }
      routeOptions.onRequest = [(request, reply, next) => reserveAll(step, request, reply, next), ...hookList(routeOptions.onRequest)]
    }
    if (!commits) {
      const step: ReserveStep = { paces: late, commits: false }
      routeOptions.preHandler = [(request, reply, next) => reserveAll(step, request, reply, next), ...hookList(routeOptions.preHandler)]
      routeOptions.onSend = [...hookList(routeOptions.onSend), beforeSend]
      routeOptions.onError = [...hookList(routeOptions.onError), settleOnError]
    }
    // A serializer compiler of the app's own (a Zod type provider's) may reject a JSON Schema 429.
    const ownSerializer = routeOptions.serializerCompiler !== undefined || this.serializerCompiler !== undefined
    routeOptions.schema = describeRoute(routeOptions.schema, rules, options.store, !ownSerializer)
  })

  fastify.addHook('onReady', function warnTrustProxy (next) {
    const trustProxy = keysBySource ? trustProxyOf(fastify) : undefined
    if (trustProxy === true) {
      fastify.log.warn('exchangepace: trustProxy is true and a route is paced by source: request.ip is then the leftmost X-Forwarded-For, which the client writes. Trust only your proxies, by their addresses (IPs or CIDRs) or a function.')
    } else if (typeof trustProxy === 'number' && trustProxy > 0) {
      fastify.log.warn('exchangepace: trustProxy is a hop count and a route is paced by source: Fastify 5.12.1 and later trust no proxy for a hop count, so request.ip is your proxy\'s address and every client behind it shares each source pace (earlier versions let a client that reaches the server directly write its own address). Trust your proxies by their addresses (IPs or CIDRs) or a function.')
    }
    next()
  })

  done()
}

/**
 * The server's `trustProxy` option (false when Fastify's options cannot be found). Fastify keeps its
 * options under a symbol and leaves trustProxy out of `initialConfig`, so this looks the symbol up
 * by its description.
 */
function trustProxyOf (fastify: FastifyInstance): unknown {
  const symbols: symbol[] = []
  for (let instance: object | null = fastify; instance !== null; instance = Object.getPrototypeOf(instance) as object | null) {
    symbols.push(...Object.getOwnPropertySymbols(instance))
  }
  const optionsKey = symbols.find(symbol => symbol.description === 'fastify.options')
  return optionsKey !== undefined && (fastify as unknown as Record<symbol, { trustProxy?: unknown }>)[optionsKey].trustProxy
}

/**
 * The URL a route's default pace name is made of. A route at `/` under a prefix, with
 * `prefixTrailingSlash: 'both'` (the default), is the prefix's route: Fastify serves both
 * `/authorize` and `/authorize/` from it, and adds the HEAD of each as a route of its own; named
 * by their URLs, the two HEADs would keep two paces. With 'slash' it serves `/authorize/` alone,
 * by its own name.
 */
function paceUrl (routeOptions: RouteOptions): string {
  // Fastify 5 passes these to onRoute but leaves them out of RouteOptions' type.
  const { prefix, routePath } = routeOptions as RouteOptions & { prefix?: string, routePath?: string }
  const both = (routeOptions.prefixTrailingSlash ?? 'both') === 'both'
  return both && prefix !== undefined && prefix !== '' && routePath === '/' ? prefix : routeOptions.url
}

/** A route's hooks of one kind as an array (the route's own, when it gave one): callers spread it into a new one. */
function hookList<T> (hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}

/**
 * The route's schema with the per-replica statement added: the description sentence (after the
 * route's own), an `x-exchangepace` extension, and, with `with429`, the 429 response, in JSON
 * Schema, unless the route documents its own. Fastify compiles every response schema with the
 * route's serializer compiler, so a route whose compiler reads another kind of schema gets no
 * 429 from here (its body is serialized by the plugin either way). A new object: the HEAD route
 * Fastify derives from a GET shares the original.
 */
function describeRoute (schema: RouteOptions['schema'], rules: readonly PaceRule[], store: PaceStore | undefined, with429: boolean): RouteOptions['schema'] {
  const own = (schema ?? {}) as Record<string, unknown>
  const scope = store?.scope ?? PER_REPLICA
  const sentence = paceSentence(rules, store)
  const description = typeof own.description === 'string' && own.description !== '' ? `${own.description} ${sentence}` : sentence
  const described: Record<string, unknown> = {
    ...own,
    description,
    'x-exchangepace': {
      scope,
      paces: rules.map(rule => ({ name: rule.name, perSecond: rule.perSecond, key: keyDescription(rule), spend: rule.spend }))
    }
  }
  const response = own.response as Record<string, unknown> | undefined
  if (with429 && response?.[429] === undefined) {
    described.response = {
      ...response,
      429: {
        description: `Too many requests: the pace is spent (${scope}). Retry after the Retry-After header, in seconds.`,
        type: 'object',
        properties: { error: { type: 'string' }, error_description: { type: 'string' } },
        additionalProperties: true
      }
    }
  }
  return described as RouteOptions['schema']
}

/** The exchangepace plugin: register it once, before the routes it paces. */
export const exchangePace = fp(exchangePacePlugin, { name: 'exchangepace', fastify: '5.x' })
