import type { FastifyReply } from 'fastify'
import type { PaceRule } from './route-config.js'

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
  /** Its items may be shown to whoever sent the request, whatever the outcome. */
  readonly public: boolean
  /** `"name";q=10;w=1` */
  readonly policy: string
  /** `"name";r=` */
  readonly quotaPrefix: string
  /** `"name";r=0;t=1`: the item of a refusal. */
  readonly spent: string
  /**
   * The latest RateLimit item written for a grant, and the units remaining it states (NaN before
   * the first): reused while the count repeats, as it does under steady traffic, where each
   * request finds its key's bucket refilled and leaves `floor(perSecond) - 1`.
   */
  granted = ''
  grantedRemaining = Number.NaN
  /** The latest RateLimit-Policy and RateLimit lists that ended with this pace's item. */
  readonly policyList: JoinedList = { list: '', item: '', joined: '' }
  readonly quotaList: JoinedList = { list: '', item: '', joined: '' }

  constructor (rule: PaceRule) {
    const name = sfString(rule.name)
    this.public = rule.key === 'source'
    this.policy = `${name};${quotaPolicy(rule.perSecond)}`
    this.quotaPrefix = `${name};r=`
    this.spent = `${name};r=0;t=1`
  }

  /** The RateLimit item of a grant that left `remaining` units: the latest one written when it states as many. */
  grantedItem (remaining: number): string {
    if (remaining !== this.grantedRemaining) {
      this.granted = `${this.quotaPrefix}${remaining};t=1`
      this.grantedRemaining = remaining
    }
    return this.granted
  }
}

/** A unit a request holds, as the headers need it: the pace's items and what the grant left. */
export interface QuotaHolding {
  readonly quota: QuotaItems
  readonly reservation: { readonly remaining: number }
}

/**
 * Writes RateLimit-Policy and RateLimit for the units `held`: public quotas always, the others
 * (which a stranger naming a client must not read) only when `showPrivate`. A public pace that
 * refused the request, `refusedBy`, is listed last with nothing remaining.
 */
export function writeQuota (reply: FastifyReply, held: readonly QuotaHolding[], showPrivate: boolean, refusedBy: QuotaItems | null): void {
  let policy = ''
  let quota = ''
  for (const { quota: items, reservation } of held) {
    if (!showPrivate && !items.public) continue
    policy = listItem(policy, items.policy, items.policyList)
    quota = listItem(quota, items.grantedItem(reservation.remaining), items.quotaList)
  }
  if (refusedBy !== null && refusedBy.public) {
    policy = listItem(policy, refusedBy.policy, refusedBy.policyList)
    quota = listItem(quota, refusedBy.spent, refusedBy.quotaList)
  }
  if (policy !== '') reply.header('ratelimit-policy', policy).header('ratelimit', quota)
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
