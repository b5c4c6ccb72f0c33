import type { PaceRule } from './route-config.js'
import { refundedOn, type PaceOutcome, type PaceSpend } from './ticket.js'

/**
 * The quota headers of the IETF draft (RateLimit-Policy and RateLimit): the items each pace
 * contributes, and the lists a response carries.
 *
 * The values are reused rather than rebuilt whenever they come out the same: Node checks every
 * header value with a regular expression, which takes a string built by concatenation through
 * V8's runtime to flatten it first, on every response. A value that is reused is flattened once.
 */

/** A list (RFC 8941) held as text, the item appended to it, and the list that made. */
interface JoinedList {
  list: string
  item: string
  joined: string
}

/** One pace's items, built once per route, and the latest lists and item it wrote. */
export class QuotaItems {
  /**
   * Its items may be shown to whoever sent the request, whatever the outcome: the caller's own
   * source, its own pair, or a device code or bearer token it holds.
   */
  readonly public: boolean
  /** The pace is in shadow: it writes no quota headers, since it refuses nothing. */
  readonly shadow: boolean
  /** `"name";q=10;w=1` */
  readonly policy: string
  /** `"name";r=` */
  readonly quotaPrefix: string
  /** One unit's time, in ms: what a refund takes off the time until the bucket is full. */
  readonly unitMs: number
  /** The window in whole seconds: the bound `t` states for a store that does not tell when its bucket is full. */
  readonly windowSeconds: number
  /**
   * The latest RateLimit item written for a grant, and the units remaining and the `t` it states
   * (NaN before the first): reused while both repeat, as they do under steady traffic, where each
   * request finds its key's bucket refilled and leaves `floor(limit) - 1`, full again within the
   * same whole second.
   */
  granted = ''
  grantedRemaining = Number.NaN
  grantedFullIn = Number.NaN
  /** The latest RateLimit item written for a refusal, and its wait in seconds (NaN before the first). */
  refused = ''
  refusedAfter = Number.NaN
  /** The latest RateLimit-Policy and RateLimit lists that ended with this pace's item. */
  readonly policyList: JoinedList = { list: '', item: '', joined: '' }
  readonly quotaList: JoinedList = { list: '', item: '', joined: '' }

  constructor (rule: PaceRule) {
    const name = sfString(rule.name)
    this.public = rule.key === 'source' || rule.key === 'client+source' || rule.key === 'device_code' || rule.key === 'bearer'
    this.shadow = rule.shadow
    this.policy = `${name};${quotaPolicy(rule.limit, rule.window)}`
    this.quotaPrefix = `${name};r=`
    this.unitMs = rule.window * 1000 / rule.limit
    this.windowSeconds = Math.ceil(rule.window)
  }

  /**
   * The RateLimit item of a grant that left `remaining` units, the bucket full again in
   * `fullInMs` (`t`, the draft's seconds until the quota is whole again, rounded up; the window,
   * a bound, when the store does not tell): the latest one written when it states the same.
   */
  grantedItem (remaining: number, fullInMs: number | undefined): string {
    const fullIn = fullInMs === undefined ? this.windowSeconds : Math.max(0, Math.ceil(fullInMs / 1000 - 1e-9))
    if (remaining !== this.grantedRemaining || fullIn !== this.grantedFullIn) {
      this.granted = `${this.quotaPrefix}${remaining};t=${fullIn}`
      this.grantedRemaining = remaining
      this.grantedFullIn = fullIn
    }
    return this.granted
  }

  /** The RateLimit item of a refusal: nothing remaining, one unit back in `retryAfter` seconds; the latest one written when it says as much. */
  refusedItem (retryAfter: number): string {
    if (retryAfter !== this.refusedAfter) {
      this.refused = `${this.quotaPrefix}0;t=${retryAfter}`
      this.refusedAfter = retryAfter
    }
    return this.refused
  }
}

/** The pace that refused a request, for its quota item, and the Retry-After it answered. */
export interface RefusedBy {
  readonly quota: QuotaItems
  readonly retryAfter: number
}

/** A unit a request holds, as the headers need it: the pace's items, how it is spent and what the grant left. */
export interface QuotaHolding {
  readonly quota: QuotaItems
  readonly spend: PaceSpend
  readonly reservation: { readonly remaining: number, readonly fullInMs?: number | undefined }
}

/**
 * Writes RateLimit-Policy and RateLimit for the units `held`. With the exchange's `outcome`, the
 * handler has answered: public quotas always, the others (which a stranger naming a client must
 * not read) only when it was accepted, and a unit that the outcome refunds counts as back in its
 * bucket. Without one (null), the plugin answers before the handler: public quotas only, as
 * taken. A pace in shadow writes none: clients must not slow down for a rate not enforced. A public pace that refused the request, `refusedBy`, is listed last with nothing
 * remaining. A unit counted as back takes one unit's time off the time until full.
 */
export function writeQuota (reply: HeaderTarget, held: readonly QuotaHolding[], outcome: PaceOutcome | null, refusedBy: RefusedBy | null): void {
  let policy = ''
  let quota = ''
  for (const { quota: items, spend, reservation } of held) {
    if (items.shadow || (outcome !== 'accepted' && !items.public)) continue
    const refunded = outcome !== null && refundedOn(outcome, spend)
    const { remaining, fullInMs } = reservation
    policy = listItem(policy, items.policy, items.policyList)
    quota = listItem(quota, refunded ? items.grantedItem(remaining + 1, fullInMs === undefined ? undefined : fullInMs - items.unitMs) : items.grantedItem(remaining, fullInMs), items.quotaList)
  }
  if (refusedBy !== null && refusedBy.quota.public) {
    const items = refusedBy.quota
    policy = listItem(policy, items.policy, items.policyList)
    quota = listItem(quota, items.refusedItem(refusedBy.retryAfter), items.quotaList)
  }
  if (policy === '') return
  reply.header('ratelimit-policy', policy)
  reply.header('ratelimit', quota)
}

/** Where the headers go: a Fastify reply, or a raw response's `setHeader` for an answer written past Fastify. */
export interface HeaderTarget {
  header (name: string, value: string): unknown
}

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

/** A structured-field string (RFC 8941): the name is printable ASCII, so only `\` and `"` need escaping. */
function sfString (text: string): string {
  return `"${text.replace(/[\\"]/g, '\\$&')}"`
}

/**
 * `q` and `w` of a RateLimit-Policy item: `limit` per `window` seconds. The draft wants integers,
 * so a fractional limit or window is stated over the shortest multiple that makes both whole (1.5
 * per second is q=3;w=2), up to 1000 times; beyond that, the whole units of one window, over its
 * whole seconds.
 */
function quotaPolicy (limit: number, window: number): string {
  for (let times = 1; times <= 1000; times++) {
    const quota = limit * times
    const seconds = window * times
    if (isWhole(quota) && isWhole(seconds)) return `q=${Math.round(quota)};w=${Math.round(seconds)}`
  }
  return `q=${Math.floor(limit)};w=${Math.max(1, Math.round(window))}`
}

function isWhole (value: number): boolean {
  return Math.abs(value - Math.round(value)) < 1e-9
}
