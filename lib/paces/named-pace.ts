import { NearLimit } from '../bucket/near-limit.js'
import { defaultClock, Pace, type Clock } from '../bucket/pace.js'
import { MAX_QUOTA } from '../limits.js'
import { ignoreRejection, isThenable } from '../values.js'
import { PaceCounts, type PaceKeyName } from './counts.js'
import type { PaceStore, SharedPace } from '../store.js'
import type { FastifyBaseLogger } from 'fastify'

/**
 * A pace's own rate for one key (`rateOf`): `perSecond` for a per-second pace, `limit` for a
 * `limit`/`window` pace (the window stays the declared one); undefined for the declared rate.
 * Asked with the declared client id for a client pace and for a pair (the pair's rate follows its
 * client), the source key for a source pace, the key for a key function's pace. Synchronous.
 */
export type RateOf = (key: string) => number | undefined

/** One rate of a named pace: its bucket in this replica's memory, and its shared store's pace (or null). */
export interface Lane {
  readonly limit: number
  readonly window: number
  readonly perSecond: number
  readonly pace: Pace
  readonly shared: SharedPace | null
}

/** What a named pace is made of: its declared bucket, its store, and the way to make a lane. */
export interface PaceMaking {
  readonly name: string
  readonly keyKind: PaceKeyName
  readonly limit: number
  readonly window: number
  readonly rateOf: RateOf | undefined
  readonly shadow: boolean
  readonly warnAt: number | null
  readonly now: Clock | undefined
  /** Rows each lane keeps at most in memory (`Pace`'s `maxKeys`). */
  readonly maxKeys: number
  readonly store: PaceStore | undefined
  readonly log: FastifyBaseLogger
}

/** Distinct rates one pace keeps a lane for: `rateOf` gives the rates of registrations, which are few. */
const MAX_LANES = 256

/** Every this many keys looked up, one lane's memory is swept when due, in turn (see `laneOf`). */
const TIDY_EVERY = 256

/**
 * The pace of one name on this replica: the declared rate's lane and, with `rateOf`, one lane per
 * other rate a key was given. A lane is a bucket table of its own (a table's arithmetic is scaled
 * by its rate), and with a shared store the store's pace at that rate: rows in Redis carry the rate
 * they were written at, so every lane of a name shares the same keys there. A key whose rate
 * changes starts a full bucket in its new lane; its row in the old one goes at the next sweep.
 */
export class NamedPace {
  readonly name: string
  readonly keyKind: PaceKeyName
  readonly counts = new PaceCounts()
  /**
   * For a failure budget: per key, the units requests on this replica hold and have not yet
   * settled (a refusal they alone cause is answered "retry in a second", see reserve-hook.ts).
   * An entry lives while its units do (a unit never settled, a hijacked reply's, for good: at most
   * 10,000 keys are counted).
   */
  readonly inFlight = new Map<string, number>()
  readonly rateOf: RateOf | undefined
  /** Refusals are reported, not enforced. */
  readonly shadow: boolean
  readonly warnAt: number | null
  /** The early warnings of every lane (the share spent is the same whatever the key's rate), or null without `warnAt`. */
  readonly nearLimit: NearLimit | null
  readonly declared: Lane
  /** The routes that declare it, and how they spend it: what the catalog records. */
  readonly routes: string[] = []
  readonly spends = new Set<string>()
  readonly #making: PaceMaking
  readonly #lanes: Lane[] = []
  readonly #byRate = new Map<number, Lane>()
  #looked = 0
  #tidied = 0

  /** Throws the store's TypeError when it cannot keep the declared bucket. */
  constructor (making: PaceMaking) {
    this.name = making.name
    this.keyKind = making.keyKind
    this.rateOf = making.rateOf
    this.shadow = making.shadow
    this.warnAt = making.warnAt
    this.nearLimit = making.warnAt === null ? null : new NearLimit(making.warnAt, making.window, making.now ?? defaultClock)
    this.#making = making
    this.declared = this.#lane(making.limit)
  }

  /** Every lane made so far, the declared one first. */
  get lanes (): readonly Lane[] {
    return this.#lanes
  }

  /**
   * The lane of `key`: the declared one, or with `rateOf` the one of the rate it gives. A rate
   * that is not a number from 1 to 999999999999, a Promise, or a rate the store cannot count is a
   * TypeError naming the pace (the server's mistake: a 500). Every `TIDY_EVERY` calls one lane's
   * memory is swept when due, so that a lane whose keys stopped coming keeps no rows for long.
   */
  laneOf (key: string): Lane {
    const rateOf = this.rateOf
    if (rateOf === undefined) return this.declared
    if (++this.#looked % TIDY_EVERY === 0) this.#lanes[this.#tidied++ % this.#lanes.length].pace.tidy()
    const rate: unknown = rateOf(this.keyKind === 'client+source' ? key.slice(0, key.indexOf('\u001f')) : key)
    if (rate === undefined) return this.declared
    return this.#byRate.get(rate as number) ?? this.#newLane(rate)
  }

  #newLane (rate: unknown): Lane {
    const pace = `exchangepace: the rateOf of pace ${JSON.stringify(this.name)}`
    if (isThenable(rate)) {
      rate.then(undefined, ignoreRejection)
      throw new TypeError(`${pace} returned a Promise; it must answer at once (keep the rates of registered clients in memory)`)
    }
    if (typeof rate !== 'number' || !(rate >= 1 && rate <= MAX_QUOTA)) {
      throw new TypeError(`${pace} returned ${typeof rate === 'number' ? String(rate) : typeof rate}; it must return a number from 1 to ${MAX_QUOTA}, or undefined for the declared rate`)
    }
    if (this.#lanes.length >= MAX_LANES) throw new TypeError(`${pace} gave more than ${MAX_LANES} distinct rates; round them`)
    return this.#lane(rate)
  }

  /** Makes the lane of `limit` units per the declared window, with the store's pace of it. */
  #lane (limit: number): Lane {
    const { window, now, maxKeys, store, name, log } = this.#making
    const pace = new Pace({ limit, window, now, maxKeys })
    const shared = store === undefined ? null : store.pace(name, { limit, window }, pace, log)
    const lane = { limit, window, perSecond: limit / window, pace, shared }
    this.#lanes.push(lane)
    this.#byRate.set(limit, lane)
    return lane
  }
}
