import type { PaceReservation } from './store.js'

/** How a reservation is spent: see `PaceRouteOptions.spend`. */
export type PaceSpend = 'accepted' | 'every'

/** What the route handler says happened: `'rejected'` when the exchange did not take place. */
export type PaceOutcome = 'accepted' | 'rejected'

/** One unit a request holds from one pace. */
export interface HeldReservation {
  /** The pace's name (its table in `fastify.pace`). */
  readonly name: string
  /** The key the unit was taken from: a declared client id, a source, or a custom key. */
  readonly key: string
  readonly spend: PaceSpend
  readonly reservation: PaceReservation
}

/**
 * `request.pace` on a paced route: what the request holds and the outcome the handler reports.
 *
 * Settlement happens once. At settlement, when the outcome is `'rejected'`, every reservation spent
 * `'accepted'` is refunded; everything else stays spent. The plugin settles as the handler's answer
 * is handed to the connection (its onSend hook, after the route's own; an error answer already in
 * onError), whether or not the client is still there to read it: settling when the response
 * finishes (onResponse) would let a stranger decide, by hanging up or resetting an HTTP/2 stream,
 * whether a failed exchange counts against the client it named. A reply handed to the not-found
 * handler is settled as the 404 is sent (Fastify keeps the route's onSend hooks for it). A ticket
 * that is never settled (no answer, a hijacked reply) keeps its units spent. An
 * outcome set to `'rejected'` after settlement (by an error handler, which Fastify runs after
 * onError) refunds then: a refund is exact whenever it comes, and never given twice.
 */
export class PaceTicket<Held extends HeldReservation = HeldReservation> {
  /** The units this request holds, in the order they were taken. */
  readonly held: Held[] = []
  /** Set when a pace refused the request: the handler did not run. */
  refused = false
  #outcome: PaceOutcome = 'accepted'
  #settled = false
  #refunded = false

  /** `'accepted'` unless the handler sets `'rejected'` (for instance: client authentication failed). */
  get outcome (): PaceOutcome {
    return this.#outcome
  }

  set outcome (value: PaceOutcome) {
    if (value !== 'accepted' && value !== 'rejected') {
      throw new TypeError(`exchangepace: request.pace.outcome must be 'accepted' or 'rejected', got ${String(value)}`)
    }
    this.#outcome = value
    if (value === 'rejected' && this.#settled) this.#refundAccepted()
  }

  /** Whether the reservations have been committed or refunded. */
  get settled (): boolean {
    return this.#settled
  }

  /**
   * @internal A pace refused the request or a key was malformed: refunds what the same hook took
   * before it, from `first` on, and drops it from `held` (the request no longer holds it, and its
   * quota must not be shown on the 400 or 5xx that follows).
   */
  _refundFrom (first: number): void {
    for (let i = first; i < this.held.length; i++) this.held[i].reservation.refund()
    this.held.length = first
  }

  /** @internal Commits or refunds, once. */
  _settle (): void {
    if (this.#settled) return
    this.#settled = true
    if (this.#outcome === 'rejected') this.#refundAccepted()
  }

  /**
   * @internal A unit granted after settlement (a shared store answered after the request was, as on
   * a handler timeout) is held and settled by the same rule: refunded at once if it is spent
   * `'accepted'` and the exchange was rejected, and otherwise kept, unless the outcome becomes
   * `'rejected'` later.
   */
  _holdLate (held: Held): void {
    this.held.push(held)
    if (this.#refunded && held.spend === 'accepted') held.reservation.refund()
  }

  /** Refunds every reservation spent `'accepted'`, once. */
  #refundAccepted (): void {
    if (this.#refunded) return
    this.#refunded = true
    for (const held of this.held) {
      if (held.spend === 'accepted') held.reservation.refund()
    }
  }
}
