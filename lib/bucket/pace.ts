import { bucketState, type BucketState } from './state.js'
import { RowTable } from './row-table.js'

/** A monotonic clock in milliseconds. Wall-clock time (Date.now) must not be used: a jump would refill or drain buckets. */
export type Clock = () => number

/**
 * A pace's rate, in one of two forms:
 * - `{ perSecond }`: `perSecond` units per second, a bucket of one second of it (the seed's rule: a
 *   key silent for an hour may spend one second's worth at once, no more). A finite number >= 1.
 * - `{ limit, window }`: `limit` units per `window` seconds, a bucket of `limit` refilled
 *   continuously at `limit / window` per second (a failure budget: 10 per 600 s). `limit` is a
 *   finite number >= 1, `window` a finite number of seconds > 0.
 */
export type PaceRate =
  | { perSecond: number, limit?: undefined, window?: undefined }
  | { limit: number, window: number, perSecond?: undefined }

export type PaceOptions = PaceRate & {
  /** Monotonic clock in milliseconds. Default: `performance.now`. */
  now?: Clock | undefined
  /** Rows kept at most (see `Pace`, "The ceiling"): an integer >= 1, or Infinity. Default: Infinity. */
  maxKeys?: number | undefined
}

/** At the ceiling, an eighth of it is forgotten at once, so that the look at every row is paid once per that many new keys. */
const FORGET_SHARE = 8

/** When a look at the rows at the ceiling freed less than an eighth, the next is at most this many ms later. */
const LOOK_AGAIN_MS = 1000

/**
 * Scaled time: one millisecond is `limit` ticks, so one unit refills in exactly `1000 * window`
 * ticks and a bucket holds `limit` of them. With an integer limit and window and an
 * integer-millisecond clock every stored value is an integer, and a debit or a refund adds or
 * subtracts an exact integer; no per-unit interval like 1000/3 ms is ever accumulated, so the
 * arithmetic does not drift. (For `perSecond` paces the window is 1 s: a unit is 1000 ticks.)
 */
const TICKS_PER_SECOND_OF_WINDOW = 1000

/**
 * Comparisons forgive this many ticks (a millionth of a thousandth of a unit of a one-second pace) so that a product like
 * `now * 7.3` rounded one way cannot turn an exact tie into a refusal. A real shortfall is at least
 * a whole tick for any clock resolution users give.
 */
const SLACK = 1e-6

/** What a reservation holds as the row's latest grant before its run when the run inserted the row: none. */
const NONE_BEFORE = -Infinity

/** performance.now, bound once so the hot path calls it without a lookup. */
const monotonic: Clock = performance.now.bind(performance)

export const defaultClock: Clock = monotonic

/**
 * @internal What a granted reservation keeps for its refund (see `Pace._giveBack`): the row's
 * number and run, the grant's count in the run and its scaled time, and the row's latest grant
 * before the run; and what it tells: the whole units left and the time until the bucket is full.
 */
interface Grant {
  readonly pace: Pace
  readonly key: string
  readonly row: number
  readonly run: number
  readonly count: number
  readonly at: number
  readonly before: number
  readonly remaining: number
  readonly fullInMs: number
}

/**
 * What one `reserve` decided. When granted, the unit was already debited; `refund()` gives it back.
 *
 * A refund gives back what leaves the bucket no fuller than had this unit never been granted: the
 * whole unit unless later grants on the key, or a refill to full since, took part of it. It reads
 * no clock.
 */
export class Reservation {
  /** The unit was there and has been debited. */
  readonly granted: boolean
  /** Whole units left in the bucket after this reservation. */
  readonly remaining: number
  /** Milliseconds until one unit is available; 0 when granted. */
  readonly retryAfterMs: number
  /** Milliseconds until the bucket is full again, as this reservation left it (a refund gives one unit's time back). */
  readonly fullInMs: number
  #pace: Pace | null
  readonly #key: string
  readonly #row: number
  readonly #run: number
  readonly #count: number
  readonly #at: number
  readonly #before: number

  /** @internal Built by `Pace.reserve` only, through `_granted` and `_refused`. */
  private constructor (pace: Pace | null, key: string, row: number, run: number, count: number, at: number, before: number, granted: boolean, remaining: number, retryAfterMs: number, fullInMs: number) {
    this.#pace = pace
    this.#key = key
    this.#row = row
    this.#run = run
    this.#count = count
    this.#at = at
    this.#before = before
    this.granted = granted
    this.remaining = remaining
    this.retryAfterMs = retryAfterMs
    this.fullInMs = fullInMs
  }

  /** @internal A grant: the unit was debited, as `grant` says. */
  static _granted (grant: Grant): Reservation {
    return new Reservation(grant.pace, grant.key, grant.row, grant.run, grant.count, grant.at, grant.before, true, grant.remaining, 0, grant.fullInMs)
  }

  /** @internal A refusal: nothing was debited, one unit is back in `retryAfterMs`, and the bucket is full in `fullInMs`. */
  static _refused (retryAfterMs: number, fullInMs: number): Reservation {
    return new Reservation(null, '', -1, 0, 0, 0, NONE_BEFORE, false, 0, retryAfterMs, fullInMs)
  }

  /**
   * Gives the debited unit back, once. A second call, or a call on a refused reservation, does
   * nothing. The bucket never holds more than its capacity afterwards.
   */
  refund (): void {
    const pace = this.#pace
    if (pace === null) return
    this.#pace = null
    pace._giveBack(this.#key, this.#row, this.#run, this.#count, this.#at, this.#before)
  }
}

/**
 * A token bucket per key: the pace of a route, for one replica.
 *
 * The ceiling (`maxKeys`): a new key that finds the table at its ceiling first sweeps it; if that
 * is not enough, the fullest rows that still hold a whole unit are forgotten (an eighth of the
 * ceiling, fullest first: forgetting a row gives its key a full bucket, and the fullest cost the
 * least), and the new key gets its row. A spent row (no whole unit left) and a blocked one are
 * never forgotten: while every row is spent the new key is refused, until the fullest row holds a
 * unit again. A look that freed less than an eighth is not repeated for `LOOK_AGAIN_MS` or until
 * the fullest row left holds a unit, whichever is sooner; new keys are refused meanwhile. A key
 * that has a row is never refused for the ceiling. So the table never holds more than `maxKeys`
 * rows, and the keys it forgets are those that, given a full bucket, gain the least.
 *
 * - Capacity: `limit` units (for a `perSecond` pace, one second of it), so a key that was silent
 *   for an hour may spend one bucket at once and no more. Refill is continuous: after d ms,
 *   d * perSecond / 1000 units are back, where `perSecond` is `limit / window`. A bucket refills
 *   from empty to full in `window` seconds: that is the horizon.
 * - A row holds per key the scaled time at which that key's bucket is full again (the GCRA
 *   "theoretical arrival time"; the bucket then holds `limit - (row - now) / unit` units), and
 *   for refunds: the number of its run of spending (which began with the grant that found the
 *   bucket full), never given to another run of any key, how many grants the run has had, and when
 *   the latest came. A reservation keeps the row's number and run, so its refund finds it without
 *   looking the key up, unless the table has moved the row since or the run has ended.
 * - A key without a row has a full bucket, and a row that reads full (its time has come) means
 *   nothing that a missing row does not: logically, a full bucket has no row, and such a row may
 *   be deleted at any moment. A refund that leaves the bucket full as of the latest grant deletes
 *   its row (a stranger refunded leaves nothing). Otherwise a row stays while its key has been
 *   granted within the last horizon, full or not, so that a key calling below its rate finds its
 *   row and restarts it in place instead of having it deleted and inserted again on every call;
 *   the sweep deletes the rows whose latest grant is at least one horizon old, which are full.
 *   Memory therefore holds only the keys that spent within the last horizon, plus at most as many
 *   again between sweeps, however many keys were merely named (docs/design.md, "The memory bound").
 * - The sweep runs inside `reserve` when the table has doubled since the previous sweep or one
 *   horizon has passed since it. There is no timer, so a Pace never keeps a process alive.
 * - `reserve` decides and debits in one step, and `refund` gives back in one step. Each is atomic in
 *   JavaScript because no `await` sits between its read of a row and its write: concurrent requests
 *   cannot all see the same unit. There is deliberately no "is there room?" query.
 * - The row's time is never earlier than the units kept (granted and not refunded) alone would
 *   put it, so they never exceed `limit * (1 + t / window)` in any span of t seconds, refunds
 *   included.
 */
export class Pace {
  /** Units refilled per second: `limit / window`. */
  readonly perSecond: number
  /** Units the bucket holds. */
  readonly limit: number
  /** Seconds a bucket takes to refill from empty to full. */
  readonly window: number
  /** Rows kept at most (see "The ceiling"). */
  readonly maxKeys: number
  readonly #now: Clock
  /** One unit, in ticks. */
  readonly #unit: number
  /** `limit` units, in ticks. */
  readonly #capacity: number
  readonly #table = new RowTable()
  /** Scaled time before which a new key at the ceiling is refused without a look at the rows. */
  #lookAt = -Infinity
  /** Scaled time at which a sweep is next due (one horizon after the last), and the table size at which one is due sooner. */
  #sweepAtTime: number
  #sweepAtSize = RowTable.MIN_ROWS

  constructor (options: PaceOptions) {
    const { limit, window } = checkBucket(options ?? {})
    const { now = monotonic, maxKeys = Infinity } = options
    if (typeof now !== 'function') {
      throw new TypeError(`exchangepace: now must be a function returning milliseconds, got ${typeof now}`)
    }
    if (maxKeys !== Infinity && !(Number.isInteger(maxKeys) && maxKeys >= 1)) {
      throw new TypeError(`exchangepace: maxKeys must be an integer >= 1 or Infinity, got ${got(maxKeys)}`)
    }
    this.maxKeys = maxKeys
    this.limit = limit
    this.window = window
    this.perSecond = limit / window
    this.#now = now
    this.#unit = TICKS_PER_SECOND_OF_WINDOW * window
    this.#capacity = this.#unit * limit
    this.#sweepAtTime = now() * limit + this.#capacity
  }

  /** Keys that currently have a row (granted within the last horizon, or not yet swept). */
  get size (): number {
    return this.#table.size
  }

  /**
   * Takes one unit from `key`'s bucket if it holds one, and says so. Granted: the unit is debited
   * and stays spent unless the reservation is refunded. Refused: nothing changes, and
   * `retryAfterMs` is the exact wait until one unit is back.
   */
  reserve (key: string): Reservation {
    const limit = this.limit
    const unit = this.#unit
    const now = this.#now() * limit
    const table = this.#table
    if (now >= this.#sweepAtTime) this.#sweep(now)

    let row = table.row(key)
    const stored = row === -1 ? now : table.read(row)
    // A row whose time has come is a full bucket: a grant on it begins a new run.
    const running = stored > now
    const after = (running ? stored : now) + unit
    const shortfall = after - now - this.#capacity
    if (shortfall > SLACK) return shortfall === Infinity ? this.#refuseBlocked(key, row, now) : Reservation._refused(shortfall / limit, (stored - now) / limit)
    // A grant goes on with the row's run, restarts a row whose time had come, or inserts one. One
    // construction serves the three, which keeps this method small enough for V8 to inline it
    // whole, the Reservation included, into the plugin's hook.
    let count = 1
    let before = NONE_BEFORE
    if (running) count = table.addCount(row, after, now)
    else if (row !== -1) before = table.restart(row, after, now)
    else if ((row = this.#insert(key, after, now)) === -1) return this.#refuseNewKey(now)
    return Reservation._granted({ pace: this, key, row, run: table.run(row), count, at: now, before, remaining: Math.floor((SLACK - shortfall) / unit), fullInMs: (after - now) / limit })
  }

  /**
   * Adds `key`'s row, the first grant of a run, and returns its row; -1 when the table is at its
   * ceiling and no row may be forgotten. Only an insert grows the table, so only an insert can
   * find it doubled since the last sweep.
   */
  #insert (key: string, after: number, now: number): number {
    const table = this.#table
    if (table.size >= this.#sweepAtSize) this.#sweep(now)
    if (table.size >= this.maxKeys && !this.#makeRoom(now)) return -1
    return table.insert(key, after, now)
  }

  /**
   * The table is at its ceiling: sweeps it, then forgets the fullest rows that hold a whole unit
   * (see "The ceiling" above). Says whether there is room for a row.
   */
  #makeRoom (now: number): boolean {
    if (now < this.#lookAt) return false
    const table = this.#table
    this.#sweep(now)
    if (table.size < this.maxKeys) return true
    const spare = this.#capacity - this.#unit
    const wanted = Math.ceil(this.maxKeys / FORGET_SHARE)
    const forgotten = table.removeLowest(now + spare + SLACK, wanted)
    if (forgotten < wanted) this.#lookAt = Math.min(table.lowest() - spare, now + LOOK_AGAIN_MS * this.limit)
    return forgotten > 0
  }

  /** A new key found the table at its ceiling with every row spent: refused until the next look at the rows. */
  #refuseNewKey (now: number): Reservation {
    const waitMs = (this.#lookAt - now) / this.limit
    return Reservation._refused(waitMs, waitMs)
  }

  /**
   * A blocked row (see `block`) reads Infinity, so `reserve` finds no unit in it and comes here.
   * While the block lasts the answer is a refusal until its end; once it has ended the key's
   * bucket is full, and a full bucket has no row: the row goes, and the reservation is decided
   * afresh.
   */
  #refuseBlocked (key: string, row: number, now: number): Reservation {
    const until = this.#table.last(row)
    if (until > now) return Reservation._refused((until - now) / this.limit, (until - now) / this.limit)
    this.#table.remove(key, row)
    return this.reserve(key)
  }

  /**
   * The keys that have a row, for an operator's list: each may read full (a row whose time has
   * come, kept for its key's next call), which `inspect` tells. No reserve may run while they are
   * read.
   */
  keys (): IterableIterator<string> {
    return this.#table.keys()
  }

  /**
   * What `key`'s bucket holds now, for an operator: whole units left, the wait until the next
   * unit, the time until the bucket is full again, and the time left of a block (0 when none).
   * Looking changes nothing and creates no row.
   */
  inspect (key: string): BucketState {
    const now = this.#now() * this.limit
    const row = this.#table.row(key)
    const stored = row === -1 ? now : this.#table.read(row)
    if (stored === Infinity) {
      const blockedMs = Math.max(0, (this.#table.last(row) - now) / this.limit)
      if (blockedMs > 0) return { remaining: 0, retryAfterMs: blockedMs, fullInMs: blockedMs, blockedMs }
      return bucketState(0, this.limit, this.window * 1000)
    }
    return bucketState(Math.max(0, stored - now) / this.limit, this.limit, this.window * 1000)
  }

  /**
   * Makes `key`'s bucket full again: its row goes, with any block. The reservations it granted
   * before give nothing back (their run has ended). Says whether there was a row.
   */
  reset (key: string): boolean {
    const row = this.#table.row(key)
    if (row === -1) return false
    this.#table.remove(key, row)
    return true
  }

  /**
   * Grants `key` nothing for `ms` milliseconds; when the block ends its bucket is full, as after
   * a reset. The row reads Infinity (no unit, whatever the time) and holds the block's end as its
   * latest grant, so that the sweep keeps it until a horizon after that end, when it reads full.
   * It starts a new run: the reservations granted before give nothing back. `reset` lifts it.
   */
  block (key: string, ms: number): void {
    const now = this.#now() * this.limit
    const until = now + ms * this.limit
    const table = this.#table
    const row = table.row(key)
    if (row !== -1) {
      table.restart(row, Infinity, until)
      return
    }
    // An operator's block is kept whatever the ceiling: blocks are few, and each is meant.
    if (table.size >= this.#sweepAtSize) this.#sweep(now)
    table.insert(key, Infinity, until)
  }

  /**
   * @internal Called once per granted reservation by `Reservation.refund`. Requires that the
   * reservation was granted at scaled time `at` as the `count`th grant of `key`'s run numbered
   * `run`, whose row was then number `row`, and whose latest grant before the run was `before`.
   *
   * When the bucket has been full since the run began (the row is gone, or began another run),
   * this unit had refilled by then and removing it changes nothing after: nothing is given back.
   * Otherwise the units kept alone would put the row at the later of two times: one unit earlier
   * than it is (this one gone: `withoutThis`), and where the later kept grants put it by themselves.
   * The second is bounded from above twice, and the row moves to the lower bound, so never below
   * either time:
   * - the run's latest grant (nothing counted after it) has nothing after it: one unit back, and
   *   the count goes back by one so that the grants before it count one grant fewer after them;
   * - the n grants counted after it and still kept came by `last`, so they hold the row at most
   *   at `last` + n units (`keptReach`, never past where the row is). A refunded grant is kept
   *   no more: each refund marks its grant in the row, which remembers the marks of the run's 32
   *   latest grants (an older refunded grant counts as kept, which only gives back less);
   * - the row was at least one unit past `at` after this grant, and each later grant added a unit
   *   to both, so the later grants alone hold it at most `last - at` above one unit earlier
   *   (`laterAtMost`).
   * A row left at or before the latest grant's time is full, and no grant of its run is kept: it
   * goes back to what it was before the run (`#undo`). No clock is read; a row a refund leaves in
   * the past reads as full, and the sweep removes it one horizon after its latest grant. The
   * derivation: docs/design.md, "Refunds" (later grants on the same key).
   */
  _giveBack (key: string, row: number, run: number, count: number, at: number, before: number): void {
    const table = this.#table
    const unit = this.#unit
    if (!table.holds(row, run)) {
      // A resize moved the row since the grant, or its run has ended.
      row = table.row(key)
      if (row === -1 || table.run(row) !== run) return
    }
    const full = table.read(row)
    const last = table.last(row)
    const later = (table.count(row) - count) >>> 0
    if (later === 0) {
      if (full - unit > last + SLACK) table.uncount(row, full - unit)
      else this.#undo(key, row, count, before)
      return
    }
    const keptLater = later - table.markedWithin(row, later)
    const withoutThis = full - unit
    const keptReach = Math.min(full, last + keptLater * unit)
    const laterAtMost = withoutThis + (last - at)
    const left = Math.min(laterAtMost, Math.max(withoutThis, keptReach))
    if (left <= last + SLACK) return this.#undo(key, row, count, before)
    if (left < full) table.write(row, left)
    table.mark(row, later)
  }

  /**
   * A refund has left `key`'s row full as of its latest grant: no grant of its run is kept. When
   * the run's first grant restarted a row (count 1, `before` its latest grant until then), the row
   * goes back to what it was, a full bucket last granted at `before`, so that the sweep removes it
   * when it would have without this run, and a key calling below its rate keeps its row through
   * refunds; under a new run, so that no reservation of the run finds it. Otherwise (the run
   * inserted the row: a stranger refunded) the row goes.
   */
  #undo (key: string, row: number, count: number, before: number): void {
    if (count === 1 && before !== NONE_BEFORE) this.#table.restart(row, before, before)
    else this.#table.remove(key, row)
  }

  /**
   * Deletes the rows of keys not granted for a horizon when a sweep is due, by the rule `reserve` follows.
   * For a pace that requests have stopped reserving from, such as the memory of a shared store's
   * pace whose route gets no more requests, whose rows would otherwise stay until its next reserve.
   */
  tidy (): void {
    this.#sweepIfDue(this.#now() * this.limit)
  }

  /** Sweeps when the table has doubled since the last sweep or one horizon has passed since it. */
  #sweepIfDue (now: number): void {
    if (this.#table.size >= this.#sweepAtSize || now >= this.#sweepAtTime) this.#sweep(now)
  }

  /**
   * Deletes the rows whose latest grant is at least one horizon old. Such a row reads full (no row
   * is ever more than the capacity past its latest grant), so nothing changes but memory; a row
   * that reads full sooner is kept until then, for its key's next call. Requires `now` in scaled
   * time.
   */
  #sweep (now: number): void {
    this.#table.removeCountedBy(now - this.#capacity + SLACK)
    this.#sweepAtTime = now + this.#capacity
    this.#sweepAtSize = Math.max(RowTable.MIN_ROWS, this.#table.size * 2)
  }
}

/**
 * The bucket a pace's options declare: `limit` units refilled over `window` seconds (a `perSecond`
 * pace holds one second: `{ limit: perSecond, window: 1 }`). Throws a TypeError naming the option.
 */
function checkBucket (options: Partial<Record<'perSecond' | 'limit' | 'window', unknown>>): { limit: number, window: number } {
  const { perSecond, limit, window } = options
  if (perSecond !== undefined && (limit !== undefined || window !== undefined)) {
    throw new TypeError('exchangepace: a pace declares perSecond, or limit with window, not both')
  }
  if (perSecond === undefined && (limit !== undefined || window !== undefined)) {
    if (!isNumberAtLeast(limit, 1)) throw new TypeError(`exchangepace: limit must be a finite number >= 1, got ${got(limit)}`)
    if (!isNumberAtLeast(window, Number.MIN_VALUE)) throw new TypeError(`exchangepace: window must be a finite number of seconds > 0, got ${got(window)}`)
    return { limit: limit as number, window: window as number }
  }
  if (!isNumberAtLeast(perSecond, 1)) throw new TypeError(`exchangepace: perSecond must be a finite number >= 1, got ${got(perSecond)}`)
  return { limit: perSecond as number, window: 1 }
}

function isNumberAtLeast (value: unknown, least: number): boolean {
  return typeof value === 'number' && Number.isFinite(value) && value >= least
}

function got (value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value)
}
