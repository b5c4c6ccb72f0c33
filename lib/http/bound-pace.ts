import type { FastifyBaseLogger } from 'fastify'
import { keyName, type Observed } from './observer.js'
import type { Pace } from '../bucket/pace.js'
import { QuotaItems } from './quota-headers.js'
import type { PaceRegistry } from '../operator/registry.js'
import type { KeyReader, KeyReaders } from './request-keys.js'
import type { PaceRule } from './route-config.js'
import type { PaceStore, SharedPace } from '../store.js'

/** A route's pace bound to its table, with its key reader, header items and counts. */
export interface BoundPace extends Observed {
  readonly rule: PaceRule
  /** This replica's pace of that name: the table itself, or a shared store's fallback. */
  readonly pace: Pace
  /** The shared store's pace, or null for the in-process default. */
  readonly shared: SharedPace | null
  readonly readKey: KeyReader
  readonly quota: QuotaItems
}

/** What binding a route's paces needs from the plugin instance. */
export interface Binding {
  readonly registry: PaceRegistry
  readonly readers: KeyReaders
  readonly store: PaceStore | undefined
  readonly log: FastifyBaseLogger
}

/**
 * Binds `rule` of the route `route` to this replica's pace of its name (created on first use) and
 * to the store's. A pace the registry or the store refuses fails the route, named.
 */
export function bindPace (rule: PaceRule, route: string, binding: Binding): BoundPace {
  const { pace, counts } = binding.registry._declare(rule, route)
  return {
    rule,
    name: rule.name,
    keyKind: keyName(rule.key),
    counts,
    pace,
    shared: sharedPace(rule, pace, route, binding),
    readKey: binding.readers.of(rule, route),
    quota: new QuotaItems(rule)
  }
}

/** The store's pace for `rule`, or null without a store. */
function sharedPace (rule: PaceRule, pace: Pace, route: string, { store, log }: Binding): SharedPace | null {
  if (store === undefined) return null
  try {
    return store.pace(rule.name, rule, pace, log)
  } catch (err) {
    const reason = err instanceof Error ? err.message.replace(/^exchangepace: /, '') : String(err)
    throw new TypeError(`exchangepace: route ${route}: ${reason}`, { cause: err })
  }
}
