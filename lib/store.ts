import type { Pace } from './bucket/pace.js'

/** What a reservation from any store offers: the decision, and the way to give the unit back. */
export interface PaceReservation {
  /** The unit was there and has been debited. */
  readonly granted: boolean
  /** Whole units left in the bucket after this reservation. */
  readonly remaining: number
  /** Milliseconds until one unit is available; 0 when granted. */
  readonly retryAfterMs: number
  /**
   * Milliseconds until the bucket is full again, as this grant left it: the RateLimit header's `t`.
   * A store that cannot tell leaves it out, and `t` then states the window, a bound.
   */
  readonly fullInMs?: number | undefined
  /** Gives the unit back, once; refunds it in the store that granted it. */
  refund (): void
}

/** A pace's bucket: `limit` units, refilled continuously over `window` seconds. */
export interface PaceBucket {
  readonly limit: number
  readonly window: number
}

/** One pace of a shared store, as the plugin uses it. */
export interface SharedPace {
  /** Decides and debits in one step, in the shared store (or in the fallback it chose). Never rejects. */
  reserve (key: string): Promise<PaceReservation>
  /**
   * The requests this pace decided without the shared store's answer (it failed, did not answer
   * in time, or was not asked while unavailable), granted and refused, since it was made: for
   * these the rate held per replica, not in total. A store that always answers leaves it out.
   */
  readonly unanswered?: { readonly granted: number, readonly refused: number } | undefined
}

/**
 * A key's row in a shared store as an operator reads it (`PaceStore.inspect`): it needs no rate,
 * because a row carries the one it was written at.
 */
export interface StoredBucket {
  /**
   * Milliseconds until the bucket is full again (0: full, which is no row): what the code calls
   * `fullInMs`, under the name the store contract was published with.
   */
  readonly spentMs: number
  /** Milliseconds left of a block (0: none), and its end. */
  readonly blockedMs: number
  readonly blockedUntil: Date | null
  /** The limit and the window in ms the row was written at; null without a row (a full bucket, or a block). */
  readonly limit: number | null
  readonly windowMs: number | null
}

/**
 * Where a store writes what an operator must hear of (an outage and its end, a missing permission),
 * each line an object of fields and a message: Fastify's logger is one.
 */
export interface PaceLog {
  error: PaceLogLine
  warn: PaceLogLine
  info: PaceLogLine
  debug: PaceLogLine
}

/** One level of a PaceLog: a message, with or without fields before it. */
export interface PaceLogLine {
  (fields: object, message: string): void
  (message: string): void
}

/**
 * A store that holds paces for every replica at once, so that the declared rate holds in total.
 * Without one, each pace lives in the replica's memory and the rate holds per replica.
 */
export interface PaceStore {
  /** Over what the declared rate holds, for route descriptions: e.g. 'shared by all replicas'. */
  readonly scope: string
  /**
   * What becomes of the rate while the store is unavailable, as the end of a route description's
   * sentence "while the store is unavailable, ...": e.g. 'it holds per replica'.
   */
  readonly outage: string
  /**
   * The pace `name`: a bucket of `rate.limit` units refilled over `rate.window` seconds. `local` is
   * this replica's own pace of that name, for a store that falls back to it while it is
   * unavailable; `log` is Fastify's logger. Throws a TypeError when the store cannot keep it.
   */
  pace (name: string, rate: PaceBucket, local: Pace, log: PaceLog): SharedPace
  /**
   * The operator's actions on the key `key` of the pace `name`, for every replica at once
   * (`fastify.pace.inspect`, `reset` and `block`). A store without them refuses those actions with
   * a TypeError. Each rejects when the store does not answer: an operator must know.
   */
  inspect? (name: string, key: string): Promise<StoredBucket>
  /**
   * Visits every row the pace `name` has in the store whose key starts with `keyPrefix`, on every
   * server (each master of a Cluster), with what `inspect` tells of it; resolves when all are
   * visited. A row may read full (its time has come).
   */
  scan? (name: string, keyPrefix: string, visit: (key: string, bucket: StoredBucket) => void): Promise<void>
  /** Records the app's paces where a tool without the app reads them (the CLI): called when the app is ready. */
  record? (paces: readonly PaceCatalogEntry[]): Promise<void>
  /** Appends an operator's action to the store's audit trail. */
  audit? (entry: AuditEntry): Promise<void>
  /** Makes the bucket full again, and lifts a block. */
  reset? (name: string, key: string): Promise<void>
  /** Grants the key nothing for `ms` milliseconds; the bucket is full when the block ends. Resolves to its end. */
  block? (name: string, key: string, ms: number): Promise<Date>
}

/** One operator's action, as the trail and the log line record it. */
export interface AuditEntry {
  /** When, in ISO 8601 (this machine's clock). */
  readonly time: string
  readonly action: 'reset' | 'block'
  readonly pace: string
  readonly keyKind: string
  /**
   * The key: a source, or the hash of a device code or bearer token, as given; a client id (alone,
   * in a pair, or a custom key) only with `logClientIds`, otherwise `sha256:` and its hash.
   */
  readonly key: string
  /** Who did it: `{ by }` of the call, the CLI's `--by` (default: the OS user). */
  readonly by: string
  /** The machine it was done from. */
  readonly host: string
  /** A block's length in ms; absent for a reset. */
  readonly blockedMs?: number | undefined
}

/** One pace as the catalog of a store records it (`PaceStore.record`): its key kind and spends as `PaceKeyName` and `PaceSpend` name them. */
export interface PaceCatalogEntry {
  readonly name: string
  readonly keyKind: string
  /** The declared rate: `limit` units per `window` seconds (a `perSecond` pace: its rate per 1 s). */
  readonly limit: number
  readonly window: number
  /** How the routes spend it, each once. */
  readonly spend: readonly string[]
  /** The routes that declare it: `POST /token`. */
  readonly routes: readonly string[]
  readonly shadow: boolean
  readonly warnAt: number | null
}
