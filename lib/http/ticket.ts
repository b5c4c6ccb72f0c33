import type { PaceReservation } from '../store.js'

/** How a reservation is spent: see `PaceRouteOptions.spend`. */
export type PaceSpend = 'accepted' | 'rejected' | 'every'

/** What the route handler says happened: `'rejected'` when the exchange did not take place. */
export type PaceOutcome = 'accepted' | 'rejected'

/** Whether settlement refunds a unit spent `spend` when the outcome is `outcome`. */
export function refundedOn (outcome: PaceOutcome, spend: PaceSpend): boolean {
  return spend === 'accepted' ? outcome === 'rejected' : spend === 'rejected' && outcome === 'accepted'
}

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
 * `request.pace`: what the request holds and the outcome the handler reports. Every request has
 * one. On a route the plugin paces it is `paced`; on any other route it is inert: it holds
 * nothing, is never settled, and an outcome set on it (an error handler shared with unpaced routes
 * may set one) is kept and refunds nothing.
 *
 * Each unit is settled once, by the rule of its pace's `spend`:
 * - `'accepted'` (an exchange): refunded when the outcome is `'rejected'`. It is settled when the
 *   handler's answer is handed to the connection (the plugin's onSend hook, after the route's
 *   own; an error answer already in onError), whether or not the client is still there to read
 *   it: settling when the response finishes (onResponse) would let a stranger decide, by hanging
 *   up or resetting an HTTP/2 stream, whether a failed exchange counts against the client it
 *   named. An outcome set to `'rejected'` after that (by an error handler, which Fastify runs
 *   after onError) refunds then: a refund is exact whenever it comes, and never given twice.
 * - `'rejected'` (a failure budget): refunded when the outcome is `'accepted'` as the answer is
 *   sent (onSend, after any error handler), so that an error handler may still report the
 *   failure. An answer that never passes onSend (Fastify's last-resort error answer) keeps it
 *   spent: what cannot be told a success counts as a failure.
 * - `'every'`: never refunded.
 * A reply handed to the not-found handler is settled as the 404 is sent (Fastify keeps the route's
 * onSend hooks for it); a hijacked reply as the app ends its raw response (raw-answer.ts). When
 * the app set no outcome, the answer's is taken (answer-outcome.ts). A ticket that is never
 * settled (no answer, a hijacked response closed before the app ends it) keeps its units spent.
 */
export class PaceTicket<Held extends HeldReservation = HeldReservation> {
  /** @internal The units held, which the plugin's hooks add to (users read `held`). */
  readonly _held: Held[] = []
  /** Whether the request's route is paced by the plugin: false on the inert ticket of any other route. */
  readonly paced: boolean
  readonly #listener: RefundListener<Held> | null
  readonly #request: unknown
  /** @internal Set by the plugin when a pace refuses the request. */
  _refused = false
  #outcome: PaceOutcome = 'accepted'
  /** Whether the app set the outcome; if not, the plugin takes it from the answer (answer-outcome.ts). */
  #told = false
  #settled = false
  /** The exchanges' units were refunded (the outcome was `'rejected'` at or after settlement). */
  #refunded = false
  /** How the failures' units were settled as the answer was sent: refunded (true), kept (false), or not yet (null). */
  #failuresRefunded: boolean | null = null

  /**
   * @internal Built by the plugin for a request: `listener` hears of every unit given back, with
   * `request`; `paced` is false on an unpaced route.
   */
  constructor (listener: RefundListener<Held> | null = null, request: unknown = null, paced = true) {
    this.#listener = listener
    this.#request = request
    this.paced = paced
  }

  /** The units this request holds, in the order of its route's paces. */
  get held (): readonly Held[] {
    return this._held
  }

  /** Whether a pace refused the request: the handler did not run. */
  get refused (): boolean {
    return this._refused
  }

  /**
   * `'accepted'` unless the handler sets `'rejected'` (for instance: client authentication
   * failed); when nothing sets it, the outcome the answer shows (the plugin's `outcomeOf`).
   */
  get outcome (): PaceOutcome {
    return this.#outcome
  }

  set outcome (value: PaceOutcome) {
    if (value !== 'accepted' && value !== 'rejected') {
      throw new TypeError(`exchangepace: request.pace.outcome must be 'accepted' or 'rejected', got ${String(value)}`)
    }
    this.#told = true
    this._answered(value)
  }

  /** @internal Whether the app set the outcome (the handler, a hook or an error handler). */
  get _told (): boolean {
    return this.#told
  }

  /**
   * @internal The outcome the answer shows, when the app set none: the same effect as setting it,
   * a `'rejected'` after settlement refunding then.
   */
  _answered (value: PaceOutcome): void {
    this.#outcome = value
    if (value === 'rejected' && this.#settled) this.#refund('accepted')
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
    const held = this._held
    for (let i = first; i < held.length; i++) this.#refundHeld(held[i], null)
    held.length = first
  }

  /** @internal Commits or refunds the exchanges' units, once. */
  _settle (): void {
    if (this.#settled) return
    this.#settled = true
    if (this.#outcome === 'rejected') this.#refund('accepted')
  }

  /** @internal The answer is being sent: settles the exchanges' units if that is still due, and the failures' units, once. */
  _send (): void {
    this._settle()
    if (this.#failuresRefunded !== null) return
    this.#failuresRefunded = this.#outcome === 'accepted'
    if (this.#failuresRefunded) this.#refund('rejected')
  }

  /**
   * @internal A unit granted after settlement (a shared store answered after the request was, as on
   * a handler timeout) is held and settled by the same rule: refunded at once if its pace's rule
   * has already refunded the others of its kind, and otherwise kept until it does.
   */
  _holdLate (held: Held): void {
    this._held.push(held)
    if (held.spend === 'accepted' ? this.#refunded : this.#failuresRefunded === true && held.spend === 'rejected') this.#refundHeld(held, this.#outcome)
  }

  /** Refunds every unit spent `spend` (the exchanges' once, on the first call for them). */
  #refund (spend: PaceSpend): void {
    if (spend === 'accepted') {
      if (this.#refunded) return
      this.#refunded = true
    }
    for (const held of this._held) {
      if (held.spend === spend) this.#refundHeld(held, this.#outcome)
    }
  }

  /** Refunds `held` and tells the listener why: the exchange's `outcome`, or null when the request was refused. */
  #refundHeld (held: Held, outcome: PaceOutcome | null): void {
    held.reservation.refund()
    this.#listener?.refunded(this.#request, held, outcome)
  }
}

/** @internal Hears of every unit a ticket gives back. */
export interface RefundListener<Held> {
  refunded (request: unknown, held: Held, outcome: PaceOutcome | null): void
}
