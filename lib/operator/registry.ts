import { PaceCounts } from '../http/observer.js'
import { Pace, type Clock } from '../bucket/pace.js'
import type { PaceRule } from '../http/route-config.js'

/** A pace of the registry: its table, the kind of key it holds, and the counts of its decisions. */
export interface Declared {
  readonly pace: Pace
  readonly keyKind: string
  readonly counts: PaceCounts
}

/**
 * `fastify.pace`: the paces of this replica, one per name. Routes naming the same pace share its
 * table, so they must agree on its rate and on the kind of key stored in it.
 */
export class PaceRegistry {
  readonly #paces = new Map<string, Declared>()
  readonly #now: Clock | undefined

  constructor (now: Clock | undefined) {
    this.#now = now
  }

  /** The pace named `name`, or undefined when no route declared it. */
  get (name: string): Pace | undefined {
    return this.#paces.get(name)?.pace
  }

  /** Names of every declared pace. */
  names (): string[] {
    return [...this.#paces.keys()]
  }

  /**
   * What the pace named `name` has decided since the plugin registered (granted, refused,
   * refunded, invalid), counted on this replica whatever the store; undefined when no route
   * declared it. A copy: it does not change afterwards.
   */
  counts (name: string): PaceCounts | undefined {
    const counts = this.#paces.get(name)?.counts
    return counts === undefined ? undefined : Object.assign(new PaceCounts(), counts)
  }

  /**
   * @internal The pace of `rule`, created on first use. Throws a TypeError naming `route` when the
   * name is already taken at another rate or for another kind of key.
   */
  _declare (rule: PaceRule, route: string): Declared {
    const keyKind = typeof rule.key === 'string' ? rule.key : 'function'
    const known = this.#paces.get(rule.name)
    if (known === undefined) {
      const declared = { pace: new Pace({ ...rule.rate, now: this.#now }), keyKind, counts: new PaceCounts() }
      this.#paces.set(rule.name, declared)
      return declared
    }
    if (known.pace.limit !== rule.limit || known.pace.window !== rule.window) {
      throw new TypeError(`exchangepace: route ${route}: pace ${JSON.stringify(rule.name)} is declared with ${rateText(known.pace)} elsewhere, got ${rateText(rule)}`)
    }
    if (known.keyKind !== keyKind) {
      throw new TypeError(`exchangepace: route ${route}: pace ${JSON.stringify(rule.name)} is keyed by ${known.keyKind} elsewhere, got key ${keyKind}`)
    }
    return known
  }
}

/** A rate as an error states it: `perSecond 10`, or `limit 10 per window 600` for a window other than a second. */
function rateText ({ limit, window }: { limit: number, window: number }): string {
  return window === 1 ? `perSecond ${limit}` : `limit ${limit} per window ${window}`
}
