import type { Clock } from './pace.js'

/** The fewest entries at which a sweep of the warned keys is due. */
const MIN_SWEEP = 1024

/**
 * The early warnings of one pace (`warnAt`): which keys were warned of, and until when. A grant
 * that leaves `warnAt` of its key's bucket spent (the time until the bucket is full again, over the
 * window) warns, unless the key was warned of and its bucket has not been full since. A key is
 * kept while its bucket is not full as the latest grant left it, so memory holds at most the keys
 * warned of within the last window, plus as many again between sweeps, which run when the entries
 * have doubled. A refund makes the bucket full sooner than kept here, which can only hold a
 * warning back until the time kept, never warn twice.
 */
export class NearLimit {
  /** A grant that leaves the bucket full again in this many ms or more warns. */
  readonly #warnFullInMs: number
  readonly #now: Clock
  /** Key -> the clock's time at which its bucket is full again, as its latest grant left it. */
  readonly #fullAt = new Map<string, number>()
  #sweepAt = MIN_SWEEP

  /** Warns at `warnAt` (above 0, at most 1) of a bucket that refills over `window` seconds. */
  constructor (warnAt: number, window: number, now: Clock) {
    // A millionth of a millisecond forgiven, so that an exact share is reached.
    this.#warnFullInMs = warnAt * window * 1000 - 1e-6
    this.#now = now
  }

  /** A grant left `key`'s bucket full again in `fullInMs`: whether it warns. */
  granted (key: string, fullInMs: number): boolean {
    const now = this.#now()
    const fullAt = this.#fullAt.get(key)
    const warned = fullAt !== undefined && fullAt > now
    if (!warned && fullInMs < this.#warnFullInMs) {
      if (fullAt !== undefined) this.#fullAt.delete(key)
      return false
    }
    this.#fullAt.set(key, now + fullInMs)
    if (this.#fullAt.size >= this.#sweepAt) this.#sweep(now)
    return !warned
  }

  /** Forgets the keys whose buckets are full again. */
  #sweep (now: number): void {
    for (const [key, fullAt] of this.#fullAt) if (fullAt <= now) this.#fullAt.delete(key)
    this.#sweepAt = Math.max(MIN_SWEEP, this.#fullAt.size * 2)
  }
}
