import type { NearLimit } from '../bucket/near-limit.js'
import type { Observed } from './observer.js'
import { QuotaItems } from './quota-items.js'
import type { PaceRegistry } from '../paces/registry.js'
import type { Lane, NamedPace } from '../paces/named-pace.js'
import type { KeyReader, KeyReaders } from './request-keys.js'
import { keyKindName, type PaceRule } from './route-config.js'
import type { HeldReservation } from './ticket.js'

/** A route's pace bound to its named pace, with its key reader, header items and counts. */
export interface BoundPace extends Observed {
  readonly rule: PaceRule
  /** The pace of the rule's name, every route's that names it. */
  readonly named: NamedPace
  /** The declared rate's lane: this replica's table and the shared store's pace (null for the in-process default). */
  readonly lane: Lane
  /** Whether keys may have rates of their own (`rateOf`): then `named.laneOf(key)` gives a key's lane. */
  readonly rated: boolean
  /** The pace is in shadow: a refusal is reported and the request goes on. */
  readonly shadow: boolean
  /** The pace's early warnings, or null without `warnAt`. */
  readonly nearLimit: NearLimit | null
  readonly readKey: KeyReader
  /** The declared rate's header items. */
  readonly quota: QuotaItems
  /** The header items of `lane`, one of the named pace's (the declared one's are `quota`). */
  quotaOf: (lane: Lane) => QuotaItems
}

/**
 * One unit a request holds, as the plugin keeps it (the one record of a held unit: `request.pace.held`
 * shows it as its public part, a `HeldReservation`): the reservation, with the header items of its
 * lane, and the pace for the observer.
 */
export interface Holding extends HeldReservation {
  readonly quota: QuotaItems
  readonly bound: BoundPace
  /** A failure budget's unit counted in its pace's `inFlight` until it is settled. */
  flying: boolean
}

/** What binding a route's paces needs from the plugin instance. */
export interface Binding {
  readonly registry: PaceRegistry
  readonly readers: KeyReaders
}

/**
 * Binds `rule` of the route `route` to the named pace (made on first use, in this replica's memory
 * and in the store). A pace the registry or the store refuses fails the route, named.
 */
export function bindPace (rule: PaceRule, route: string, binding: Binding): BoundPace {
  const named = binding.registry._declare({ ...rule, keyKind: keyKindName(rule.key) }, route)
  const quota = new QuotaItems(rule)
  const laneQuotas = new Map<Lane, QuotaItems>([[named.declared, quota]])
  return {
    rule,
    name: rule.name,
    keyKind: named.keyKind,
    counts: named.counts,
    named,
    lane: named.declared,
    rated: rule.rateOf !== undefined,
    shadow: named.shadow,
    nearLimit: named.nearLimit,
    readKey: binding.readers.of(rule, route),
    quota,
    quotaOf: lane => {
      let items = laneQuotas.get(lane)
      if (items === undefined) {
        items = new QuotaItems({ ...rule, limit: lane.limit, perSecond: lane.perSecond })
        laneQuotas.set(lane, items)
      }
      return items
    }
  }
}
