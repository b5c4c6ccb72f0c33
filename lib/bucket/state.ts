/** What an operator sees of one key's bucket, in milliseconds: the same figures for every store. */
export interface BucketState {
  /** Whole units the bucket holds now. */
  readonly remaining: number
  /** Milliseconds until one unit is there; 0 when one is. */
  readonly retryAfterMs: number
  /** Milliseconds until the bucket is full again (and so has no row); 0 when it is. */
  readonly fullInMs: number
  /** Milliseconds left of a block; 0 when the key is not blocked. */
  readonly blockedMs: number
}

/** Comparisons forgive a millionth of a millisecond, so that an exact tie reads as the unit being there. */
const SLACK_MS = 1e-6

/**
 * The state of a bucket of `limit` units refilled over `windowMs`, which is full again in
 * `fullInMs` (how far its row's time is ahead of now; 0 or less: full; more than `windowMs`, for a
 * row a pace of a longer window wrote under the same name: empty for longer). The one formula behind
 * every store's `inspect`, so that memory and Redis report a bucket alike.
 */
export function bucketState (fullInMs: number, limit: number, windowMs: number): BucketState {
  const fullIn = Math.max(0, fullInMs)
  const unitMs = windowMs / limit
  const remaining = Math.max(0, Math.floor((windowMs - fullIn + SLACK_MS) / unitMs))
  const retryAfterMs = remaining >= 1 ? 0 : fullIn + unitMs - windowMs
  return { remaining, retryAfterMs, fullInMs: fullIn, blockedMs: 0 }
}
