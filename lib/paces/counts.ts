/** The kind of a pace's key, as events and logs name it. */
export type PaceKeyName = 'client' | 'source' | 'client+source' | 'device_code' | 'bearer' | 'function'

/** Counts of one pace's decisions since the plugin registered. */
export class PaceCounts {
  /** Units granted (some of which went back: see `refunded`). */
  granted = 0
  /** Requests this pace refused with 429. */
  refused = 0
  /** Granted units given back. */
  refunded = 0
  /** Requests answered 400 because their key for this pace was malformed. */
  invalid = 0
  /**
   * Of `granted`, the units this replica's memory granted because the shared store did not answer
   * (an outage, a timeout, a redirection the client did not follow; with `whenUnavailable: 'open'`,
   * those granted unpaced): for these the rate held per replica, not in total. 0 without a store.
   */
  grantedWithoutStore = 0
  /**
   * Of `refused`, the requests refused without the shared store's answer (in memory, or by
   * `whenUnavailable: 'closed'`). Not counted: a refusal this replica's memory makes whatever the
   * store says (a key past this replica's own share, whose unit is back within a second). 0
   * without a store.
   */
  refusedWithoutStore = 0
  /** Requests a pace in shadow would have refused, which went on to the handler (none are in `refused`). */
  shadowRefused = 0
  /** Early warnings: grants that left the `warnAt` share of a key's bucket spent, once per key until it is full again. */
  nearLimit = 0
}
