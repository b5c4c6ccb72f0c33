import type { FastifyBaseLogger } from 'fastify'
import type { Pace, Clock } from '../bucket/pace.js'
import { bucketState, type BucketState } from '../bucket/state.js'
import { MAX_BLOCK_SECONDS } from '../limits.js'
import { describe } from '../values.js'
import type { AuditEntry, PaceCatalogEntry, PaceReservation, PaceStore, StoredBucket } from '../store.js'
import { hostname } from 'node:os'
import { PaceCounts, type PaceKeyName } from './counts.js'
import { NamedPace, type Lane, type RateOf } from './named-pace.js'
import { clientPairs, whoKey, whoOf, type KeyMaking, type PaceWho } from './who.js'

/** What `fastify.pace.inspect` tells of one key's bucket. */
export interface PaceInspection {
  /** Whole units the bucket holds now. */
  readonly remaining: number
  /** Milliseconds until the next unit is there; 0 when one is. */
  readonly retryAfterMs: number
  /** Milliseconds until the bucket is full again; 0 when it is. */
  readonly fullInMs: number
  /** The end of a block (`block`), or null. */
  readonly blockedUntil: Date | null
}

/** One key `fastify.pace.list` finds held back: its parts, and what `inspect` would tell of it. */
export interface PaceListEntry extends PaceInspection {
  /** The key's parts, as the operator's methods take them: `{ client }`, `{ source }`, `{ client, source }` or `{ key }`. */
  readonly who: PaceWho
}

/**
 * What `fastify.pace.inspect` tells of a client given alone on a `['client', 'source']` pace: the
 * bucket of its most held-back address (least remaining, then the longest wait), that address, and
 * how many of its addresses are held back. When none is, a full bucket at the client's rate.
 */
export interface PaceClientInspection extends PaceInspection {
  /** The address of the most held-back pair, as `list` gives it; null when no pair is held back. */
  readonly source: string | null
  /** How many of the client's pairs are held back (spent or blocked): `list(name, { client })`'s length, unbounded. */
  readonly pairsHeldBack: number
}

/** What `fastify.pace.list` is asked. */
export interface PaceListOptions {
  /** The most keys listed, those with least remaining: an integer from 1 to 10000. Default: 100. */
  limit?: number | undefined
  /** On a `['client', 'source']` pace: the pairs of this client only, every address of it. */
  client?: string | undefined
}

/** Who takes an operator's action, for its log line and the audit trail. */
export interface PaceActionOptions {
  /** The operator: a name, an email, a ticket. Default: `'fastify.pace'`. At most 200 printable characters. */
  by?: string | undefined
}

/** The operator `options` name; a TypeError when it is no name. */
function actor ({ by = 'fastify.pace' }: PaceActionOptions): string {
  if (typeof by !== 'string' || !/^[\x20-\x7e\u00a0-\uffff]{1,200}$/.test(by)) throw new TypeError(`exchangepace: by must be a string of 1 to 200 printable characters, got ${describe(by)}`)
  return by
}

/** The most keys `list` gives. */
export const MAX_LIST = 10_000

/** Where an operator's action is reported (the plugin's observer logs it and tells `onEvent`). */
export interface OperatorReport {
  /** An operator's action on `key`, as the audit trail records it (`entry`). */
  operated (pace: NamedPace, key: string, action: 'reset' | 'blocked', ms: number, entry: AuditEntry): void
  /** The key as the audit trail records it (a client id as its hash unless `logClientIds`). */
  audited (pace: NamedPace, key: string): string
}

/** What the registry needs from the plugin instance. */
export interface RegistryContext extends KeyMaking {
  readonly now: Clock | undefined
  readonly store: PaceStore | undefined
  /** Rows each pace keeps at most in this replica's memory when there is no shared store. */
  readonly maxKeys: number
  readonly log: FastifyBaseLogger
  readonly observer: OperatorReport
}

/** What a route declares of a pace: its name, the kind of its key, its bucket and its `rateOf`. */
export interface PaceDeclaration {
  readonly name: string
  readonly keyKind: PaceKeyName
  readonly limit: number
  readonly window: number
  readonly rateOf: RateOf | undefined
  /** How the route spends it (`PaceSpend`), for the catalog. */
  readonly spend: string
  readonly shadow: boolean
  readonly warnAt: number | null
}

/**
 * `fastify.pace`: the paces of this instance, one per name, and what an operator does with them.
 * Routes naming the same pace share it, so they must agree on its rate, its `rateOf` and the kind
 * of key stored in it. The operator's methods take a key by its parts (`PaceWho`), made into the
 * key exactly as a request's is; with a shared store they act in the store, for every replica at
 * once, and without one on this replica's memory.
 */
export class PaceRegistry {
  readonly #paces = new Map<string, NamedPace>()
  readonly #context: RegistryContext

  constructor (context: RegistryContext) {
    this.#context = context
  }

  /** This replica's in-memory pace named `name` (at its declared rate), or undefined when no route declared it. */
  get (name: string): Pace | undefined {
    return this.#paces.get(name)?.declared.pace
  }

  /** Names of every declared pace. */
  names (): string[] {
    return [...this.#paces.keys()]
  }

  /**
   * What the pace named `name` has decided since the plugin registered (granted, refused,
   * refunded, invalid, and of those granted and refused, how many without the shared store's
   * answer), counted on this replica whatever the store; undefined when no route declared it. A
   * copy: it does not change afterwards.
   */
  counts (name: string): PaceCounts | undefined {
    const pace = this.#paces.get(name)
    if (pace === undefined) return undefined
    const counts = Object.assign(new PaceCounts(), pace.counts)
    for (const { shared } of pace.lanes) {
      const unanswered = shared?.unanswered
      if (unanswered === undefined) continue
      counts.grantedWithoutStore += unanswered.granted
      counts.refusedWithoutStore += unanswered.refused
    }
    return counts
  }

  /**
   * What `who`'s bucket in the pace `name` holds now, against the key's own rate. Looking creates no
   * row. On a `['client', 'source']` pace, `{ client }` alone tells of every address of that
   * client: its most held-back pair, and how many are held back (`PaceClientInspection`).
   */
  async inspect (name: string, who: PaceWho): Promise<PaceInspection | PaceClientInspection> {
    const named = this.#named(name)
    const prefix = clientPairs(name, named.keyKind, who, this.#context)
    if (prefix !== null) {
      const [worst, ...rest] = await this.#heldBack(name, named, prefix)
      if (worst === undefined) return { remaining: named.laneOf(prefix).limit, retryAfterMs: 0, fullInMs: 0, blockedUntil: null, source: null, pairsHeldBack: 0 }
      const { who, ...bucket } = worst
      return { ...bucket, source: who.source as string, pairsHeldBack: rest.length + 1 }
    }
    const key = whoKey(name, named.keyKind, who, this.#context)
    const lane = named.laneOf(key)
    if (lane.shared === null) return memoryInspection(lane.pace.inspect(key))
    return storedInspection(await this.#operable('inspect').call(this.#context.store, name, key), lane)
  }

  /**
   * The keys the pace `name` holds rows for that are not full (spent, or blocked), least remaining
   * first (then the longest wait), at most `limit`: in this replica's memory with the default store,
   * in the store for every replica with a shared one (every master of a Cluster). With `{ client }`
   * on a pair pace, that client's pairs only. Looking changes nothing.
   */
  async list (name: string, options: PaceListOptions = {}): Promise<PaceListEntry[]> {
    const { limit = 100, client } = options
    const pace = this.#named(name)
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST) throw new TypeError(`exchangepace: list's limit must be an integer from 1 to ${MAX_LIST}, got ${String(limit)}`)
    let prefix = ''
    if (client !== undefined) {
      prefix = clientPairs(name, pace.keyKind, { client }, this.#context) ?? ''
      if (prefix === '') throw new TypeError(`exchangepace: pace ${JSON.stringify(name)} is keyed by ${pace.keyKind}: list takes { client } on a pace keyed by client+source only`)
    }
    return (await this.#heldBack(name, pace, prefix)).slice(0, limit)
  }

  /** Every key of `pace` starting with `prefix` that is held back, least remaining first (then the longest wait). */
  async #heldBack (name: string, pace: NamedPace, prefix: string): Promise<PaceListEntry[]> {
    const found = new Map<string, PaceListEntry>()
    const keep = (key: string, entry: PaceInspection): void => {
      if (entry.fullInMs === 0 && entry.blockedUntil === null) return
      const known = found.get(key)
      if (known === undefined || entry.remaining < known.remaining) found.set(key, { who: whoOf(pace.keyKind, key), ...entry })
    }
    if (this.#context.store === undefined) {
      for (const lane of pace.lanes) {
        for (const key of lane.pace.keys()) if (key.startsWith(prefix)) keep(key, memoryInspection(lane.pace.inspect(key)))
      }
    } else {
      await this.#operable('scan').call(this.#context.store, name, prefix, (key, stored) => { keep(key, storedInspection(stored, pace.laneOf(key))) })
    }
    return [...found.values()].sort((a, b) => a.remaining - b.remaining || b.retryAfterMs - a.retryAfterMs || b.fullInMs - a.fullInMs)
  }

  /**
   * Makes `who`'s bucket in the pace `name` full again, lifting a block; logged with `options.by`,
   * told to `onEvent`, and appended to the store's audit trail. On a pair pace, `{ client }` alone
   * resets every pair of that client (each logged).
   */
  async reset (name: string, who: PaceWho, options: PaceActionOptions = {}): Promise<void> {
    const named = this.#named(name)
    const by = actor(options)
    const prefix = clientPairs(name, named.keyKind, who, this.#context)
    const keys = prefix === null ? [this.#target(name, who).key] : await this.#pairsOf(name, named, prefix)
    for (const key of keys) {
      if (this.#context.store !== undefined) await this.#operable('reset').call(this.#context.store, name, key)
      for (const lane of named.lanes) lane.pace.reset(key)
      await this.#audit(named, key, 'reset', 0, by)
    }
  }

  /**
   * Logs an operator's action (and tells `onEvent`), and appends it to the store's audit trail
   * when it keeps one. The action is taken already: a trail that cannot be written is a warning.
   */
  async #audit (pace: NamedPace, key: string, action: 'reset' | 'blocked', ms: number, by: string): Promise<void> {
    const { observer, store, log } = this.#context
    const entry: AuditEntry = { time: new Date().toISOString(), action: action === 'reset' ? 'reset' : 'block', pace: pace.name, keyKind: pace.keyKind, key: observer.audited(pace, key), by, host: hostname(), blockedMs: action === 'blocked' ? ms : undefined }
    observer.operated(pace, key, action, ms, entry)
    if (store?.audit === undefined) return
    try {
      await store.audit(entry)
    } catch (err) {
      log.warn({ err, pace: pace.name, action }, 'exchangepace: the operator\'s action was taken, but the store\'s audit trail did not record it')
    }
  }

  /** Every key of `pace` that starts with `prefix` (a client's pairs) and holds a row. */
  async #pairsOf (name: string, pace: NamedPace, prefix: string): Promise<string[]> {
    const keys = new Set<string>()
    if (this.#context.store === undefined) {
      for (const lane of pace.lanes) for (const key of lane.pace.keys()) if (key.startsWith(prefix)) keys.add(key)
    } else {
      await this.#operable('scan').call(this.#context.store, name, prefix, key => { keys.add(key) })
    }
    return [...keys]
  }

  /**
   * Grants `who` nothing from the pace `name` for `seconds` (a number > 0, at most a year); requests
   * are refused with a Retry-After that reaches the block's end, when the bucket is full again.
   * `reset` lifts it. Resolves to the block's end; logged with `options.by`, told to `onEvent`,
   * and appended to the store's audit trail.
   */
  async block (name: string, who: PaceWho, seconds: number, options: PaceActionOptions = {}): Promise<Date> {
    const { pace, key } = this.#target(name, who)
    const by = actor(options)
    if (typeof seconds !== 'number' || !(seconds > 0 && seconds <= MAX_BLOCK_SECONDS)) {
      throw new TypeError(`exchangepace: pace ${JSON.stringify(name)}: a block lasts a number of seconds > 0 and <= ${MAX_BLOCK_SECONDS} (a year), got ${String(seconds)}`)
    }
    const ms = seconds * 1000
    let until: Date
    if (this.#context.store === undefined) {
      pace.laneOf(key).pace.block(key, ms)
      until = new Date(Date.now() + ms)
    } else {
      until = await this.#operable('block').call(this.#context.store, name, key, ms)
    }
    await this.#audit(pace, key, 'blocked', ms, by)
    return until
  }

  /**
   * The decision a request would get from the pace `name` for `who`, taken in the pace's store
   * (and counted): when granted, the unit is spent until `refund()` gives it back.
   */
  async reserve (name: string, who: PaceWho): Promise<PaceReservation> {
    const { pace, key } = this.#target(name, who)
    const lane: Lane = pace.laneOf(key)
    const reservation = lane.shared === null ? lane.pace.reserve(key) : await lane.shared.reserve(key)
    if (reservation.granted) pace.counts.granted++
    else pace.counts.refused++
    return reservation
  }

  /** The pace named `name` and the key of `who` in it; a TypeError naming what is wrong. */
  #target (name: string, who: PaceWho): { pace: NamedPace, key: string } {
    const pace = this.#named(name)
    return { pace, key: whoKey(name, pace.keyKind, who, this.#context) }
  }

  /** The pace named `name`; a TypeError naming the paces there are. */
  #named (name: string): NamedPace {
    const pace = this.#paces.get(name)
    if (pace === undefined) {
      throw new TypeError(`exchangepace: no pace is named ${JSON.stringify(name)}; the paces are ${this.names().map(known => JSON.stringify(known)).join(', ') || 'none'}`)
    }
    return pace
  }

  /** The store's operator method `action`; a TypeError when the store has none. */
  #operable<A extends 'inspect' | 'reset' | 'block' | 'scan'> (action: A): NonNullable<PaceStore[A]> {
    const method = this.#context.store?.[action]
    if (typeof method !== 'function') throw new TypeError(`exchangepace: the store offers no ${action} (a PaceStore's operator methods are optional)`)
    return method as NonNullable<PaceStore[A]>
  }

  /**
   * @internal The pace `rule` declares, made on first use. Throws a TypeError naming `route` when
   * the name is already taken at another rate, `rateOf` or kind of key, or the store cannot keep it.
   */
  _declare (rule: PaceDeclaration, route: string): NamedPace {
    const { keyKind } = rule
    const known = this.#paces.get(rule.name)
    const pace = `pace ${JSON.stringify(rule.name)}`
    if (known === undefined) {
      const { now, store, log } = this.#context
      // A shared store keeps the rows; its memory pace follows it and needs no ceiling of its own.
      const maxKeys = store === undefined ? this.#context.maxKeys : Infinity
      let made: NamedPace
      try {
        made = new NamedPace({ name: rule.name, keyKind, limit: rule.limit, window: rule.window, rateOf: rule.rateOf, shadow: rule.shadow, warnAt: rule.warnAt, now, maxKeys, store, log })
      } catch (err) {
        const reason = err instanceof Error ? err.message.replace(/^exchangepace: /, '') : String(err)
        throw new TypeError(`exchangepace: route ${route}: ${reason}`, { cause: err })
      }
      this.#paces.set(rule.name, made)
      return declaredBy(made, rule, route)
    }
    if (known.declared.limit !== rule.limit || known.declared.window !== rule.window) {
      throw new TypeError(`exchangepace: route ${route}: ${pace} is declared with ${rateText(known.declared)} elsewhere, got ${rateText(rule)}`)
    }
    if (known.keyKind !== keyKind) {
      throw new TypeError(`exchangepace: route ${route}: ${pace} is keyed by ${known.keyKind} elsewhere, got key ${keyKind}`)
    }
    if (known.rateOf !== rule.rateOf) {
      throw new TypeError(`exchangepace: route ${route}: ${pace} is declared with another rateOf elsewhere; routes sharing a pace share one rateOf function`)
    }
    if (known.shadow !== rule.shadow || known.warnAt !== rule.warnAt) {
      throw new TypeError(`exchangepace: route ${route}: ${pace} is declared with shadow ${String(known.shadow)} and warnAt ${String(known.warnAt)} elsewhere, got shadow ${String(rule.shadow)} and warnAt ${String(rule.warnAt)}`)
    }
    return declaredBy(known, rule, route)
  }

  /** @internal Every pace as the store's catalog records it. */
  _catalog (): PaceCatalogEntry[] {
    return [...this.#paces.values()].map(pace => ({
      name: pace.name,
      keyKind: pace.keyKind,
      limit: pace.declared.limit,
      window: pace.declared.window,
      spend: [...pace.spends],
      routes: [...pace.routes],
      shadow: pace.shadow,
      warnAt: pace.warnAt
    }))
  }
}

/** `pace`, with `route`, which declares it by `rule`, among its routes. */
function declaredBy (pace: NamedPace, rule: PaceDeclaration, route: string): NamedPace {
  if (!pace.routes.includes(route)) pace.routes.push(route)
  pace.spends.add(rule.spend)
  return pace
}

/** A bucket of this replica's memory, as an operator's method tells it. */
function memoryInspection ({ remaining, retryAfterMs, fullInMs, blockedMs }: BucketState): PaceInspection {
  return { remaining, retryAfterMs, fullInMs, blockedUntil: blockedMs > 0 ? new Date(Date.now() + blockedMs) : null }
}

/** A row of a shared store, as an operator's method tells it: against the rate of the key's lane. */
function storedInspection (stored: StoredBucket, lane: Lane): PaceInspection {
  if (stored.blockedUntil !== null) return { remaining: 0, retryAfterMs: stored.blockedMs, fullInMs: stored.blockedMs, blockedUntil: stored.blockedUntil }
  const { remaining, retryAfterMs, fullInMs } = bucketState(stored.spentMs, lane.limit, lane.window * 1000)
  return { remaining, retryAfterMs, fullInMs, blockedUntil: null }
}

/** A rate as an error states it: `perSecond 10`, or `limit 10 per window 600` for a window other than a second. */
function rateText ({ limit, window }: { limit: number, window: number }): string {
  return window === 1 ? `perSecond ${limit}` : `limit ${limit} per window ${window}`
}
