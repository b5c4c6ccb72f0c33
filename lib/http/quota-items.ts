import type { PaceRule } from './route-config.js'

/**
 * The items each pace contributes to the quota headers of the IETF draft (RateLimit-Policy and
 * RateLimit), and the lists it last wrote them into (quota-headers.ts writes them).
 *
 * The values are reused rather than rebuilt whenever they come out the same: Node checks every
 * header value with a regular expression, which takes a string built by concatenation through
 * V8's runtime to flatten it first, on every response. A value that is reused is flattened once.
 */

/** A list (RFC 8941) held as text, the item appended to it, and the list that made. */
export interface JoinedList {
  list: string
  item: string
  joined: string
}

/** One pace's items, built once per route, and the latest lists and item it wrote. */
export class QuotaItems {
  /**
   * Its items may be shown to whoever sent the request, whatever the outcome: the caller's own
   * source, its own pair, or a device code or bearer token it holds.
   */
  readonly public: boolean
  /** The pace is in shadow: it writes no quota headers, since it refuses nothing. */
  readonly shadow: boolean
  /** `"name";q=10;w=1` */
  readonly policy: string
  /** `"name";r=` */
  readonly quotaPrefix: string
  /** One unit's time, in ms: what a refund takes off the time until the bucket is full. */
  readonly unitMs: number
  /** The window in whole seconds: the bound `t` states for a store that does not tell when its bucket is full. */
  readonly windowSeconds: number
  /**
   * The latest RateLimit item written for a grant, and the units remaining and the `t` it states
   * (NaN before the first): reused while both repeat, as they do under steady traffic, where each
   * request finds its key's bucket refilled and leaves `floor(limit) - 1`, full again within the
   * same whole second.
   */
  granted = ''
  grantedRemaining = Number.NaN
  grantedFullIn = Number.NaN
  /** The latest RateLimit item written for a refusal, and its wait in seconds (NaN before the first). */
  refused = ''
  refusedAfter = Number.NaN
  /** The latest RateLimit-Policy and RateLimit lists that ended with this pace's item. */
  readonly policyList: JoinedList = { list: '', item: '', joined: '' }
  readonly quotaList: JoinedList = { list: '', item: '', joined: '' }

  constructor (rule: PaceRule) {
    const name = sfString(rule.name)
    this.public = rule.key === 'source' || rule.key === 'client+source' || rule.key === 'device_code' || rule.key === 'bearer'
    this.shadow = rule.shadow
    this.policy = `${name};${quotaPolicy(rule.limit, rule.window)}`
    this.quotaPrefix = `${name};r=`
    this.unitMs = rule.window * 1000 / rule.limit
    this.windowSeconds = Math.ceil(rule.window)
  }

  /**
   * The RateLimit item of a grant that left `remaining` units, the bucket full again in
   * `fullInMs` (`t`, the draft's seconds until the quota is whole again, rounded up; the window,
   * a bound, when the store does not tell): the latest one written when it states the same.
   */
  grantedItem (remaining: number, fullInMs: number | undefined): string {
    const fullIn = fullInMs === undefined ? this.windowSeconds : Math.max(0, Math.ceil(fullInMs / 1000 - 1e-9))
    if (remaining !== this.grantedRemaining || fullIn !== this.grantedFullIn) {
      this.granted = `${this.quotaPrefix}${remaining};t=${fullIn}`
      this.grantedRemaining = remaining
      this.grantedFullIn = fullIn
    }
    return this.granted
  }

  /** The RateLimit item of a refusal: nothing remaining, one unit back in `retryAfter` seconds; the latest one written when it says as much. */
  refusedItem (retryAfter: number): string {
    if (retryAfter !== this.refusedAfter) {
      this.refused = `${this.quotaPrefix}0;t=${retryAfter}`
      this.refusedAfter = retryAfter
    }
    return this.refused
  }
}

/** A structured-field string (RFC 8941): the name is printable ASCII, so only `\` and `"` need escaping. */
function sfString (text: string): string {
  return `"${text.replace(/[\\"]/g, '\\$&')}"`
}

/**
 * `q` and `w` of a RateLimit-Policy item: `limit` per `window` seconds. The draft wants integers,
 * so a fractional limit or window is stated over the shortest multiple that makes both whole (1.5
 * per second is q=3;w=2), up to 1000 times; beyond that, the whole units of one window, over its
 * whole seconds.
 */
function quotaPolicy (limit: number, window: number): string {
  for (let times = 1; times <= 1000; times++) {
    const quota = limit * times
    const seconds = window * times
    if (isWhole(quota) && isWhole(seconds)) return `q=${Math.round(quota)};w=${Math.round(seconds)}`
  }
  return `q=${Math.floor(limit)};w=${Math.max(1, Math.round(window))}`
}

function isWhole (value: number): boolean {
  return Math.abs(value - Math.round(value)) < 1e-9
}
