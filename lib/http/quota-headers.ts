import type { Holding } from './bound-pace.js'
import type { JoinedList, QuotaItems } from './quota-items.js'
import { refundedOn, type PaceOutcome } from './ticket.js'

/**
 * The quota headers of the IETF draft (RateLimit-Policy and RateLimit): the lists a response
 * carries, made of the items of its paces (quota-items.ts), reused when they come out the same.
 */

/** The pace that refused a request, for its quota item, and the Retry-After it answered. */
export interface RefusedBy {
  readonly quota: QuotaItems
  readonly retryAfter: number
}

/**
 * Writes RateLimit-Policy and RateLimit for the units `held`. With the exchange's `outcome`, the
 * handler has answered: public quotas always, the others (which a stranger naming a client must
 * not read) only when it was accepted, and a unit that the outcome refunds counts as back in its
 * bucket. Without one (null), the plugin answers before the handler: public quotas only, as
 * taken. A pace in shadow writes none: clients must not slow down for a rate not enforced. A
 * public pace that refused the request, `refusedBy`, is listed last with nothing remaining. A unit counted as back takes one unit's time off the time until full.
 */
export function writeQuota (reply: HeaderTarget, held: readonly Holding[], outcome: PaceOutcome | null, refusedBy: RefusedBy | null): void {
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
