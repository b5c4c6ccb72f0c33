import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import type { NearLimit } from '../bucket/near-limit.js'
import type { BoundPace, Holding } from './bound-pace.js'
import { InvalidRequest } from '../keys/parse.js'
import type { Observer } from './observer.js'
import type { PaceRefusal } from './options.js'
import { writeQuota } from './quota-headers.js'
import type { QuotaItems } from './quota-items.js'
import { refuse, sendInvalidRequest } from './refusals.js'
import type { Lane } from '../paces/named-pace.js'
import { kTicket, type TicketedRequest } from './request-ticket.js'
import type { PaceReservation, SharedPace } from '../store.js'
import { PaceTicket } from './ticket.js'
import type { AnswerReader } from './answer-outcome.js'
import { hijackWatched, watchHijacked, type HijackWatcher } from './raw-answer.js'

/**
 * The hooks that reserve before the handler (preHandler; onRequest for source paces spent on every
 * request): one unit from each of a route's paces, all or nothing, onto the request's ticket
 * (`request.pace`, read here under `kTicket`: see request-ticket.ts).
 */

/**
 * The paces one hook reserves. `commits`: every one of them is a source pace spent on every
 * request, and they are all the route has, so nothing can ever be refunded and every quota is
 * public: the hook writes the quota headers and commits at once, and the route needs no onSend
 * (the authorization endpoint's shape).
 */
export interface ReserveStep {
  readonly paces: readonly BoundPace[]
  readonly commits: boolean
  /**
   * The paces live in a shared store, which answers later (a Promise); otherwise in this
   * replica's memory, which answers at once. One store serves every pace of a plugin instance.
   */
  readonly shared: boolean
  /**
   * The hook waits for the shared store's answers before the request goes on. Every hook does but
   * an onRequest hook followed by a preHandler one: it sends its paces' reservations as the
   * request arrives and the preHandler awaits them with its own, so that a request waits for the
   * store once.
   */
  readonly waits: boolean
  /**
   * The route's last reserving hook: once it holds its units the handler runs, and a reply it
   * hijacks is watched (raw-answer.ts).
   */
  readonly last: boolean
  readonly refusalBody: (request: FastifyRequest, refusal: PaceRefusal) => object
  readonly observer: Observer
  readonly answers: AnswerReader
}

/** The hook: reserves `step`'s paces for `request`, on the request's ticket (made here if nothing read it yet). */
export function reserveAll (step: ReserveStep, request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
  const ticketed = request as TicketedRequest
  const paces = (ticketed[kTicket] ?? (ticketed[kTicket] = new RequestPaces(step.observer, request, step.answers))) as RequestPaces
  if (step.shared) paces.ask(step, reply, next)
  else paces.reserve(step, reply, next)
}

/** One unit a request asked a shared store for, and the store's answer. */
class Asked {
  /** The store's reservation; null until it answers, and when it failed. */
  answer: PaceReservation | null = null
  /** The store's error, when it rejected or threw. */
  failure: Error | null = null

  constructor (readonly step: ReserveStep, readonly bound: BoundPace, readonly lane: Lane, readonly key: string) {}
}

/**
 * `request.pace` on a route the plugin paces, with the reserve path's state for the request: the
 * reply its answers go through, the hook at work, and on a shared store the units asked and not
 * yet resolved. One object per request, made by the first hook or read of `request.pace`.
 *
 * A hook's units are all or nothing: when one is refused, its key is malformed or the store fails,
 * every unit of that hook's paces (and of a later hook's) goes back and the request is answered
 * here; an earlier hook's units stay, and so does the order of `held`, the route's.
 *
 * In this replica's memory a hook reserves its paces one after the other, each answered at once:
 * no Promise is made (docs/design.md). On a shared store every unit a hook needs is asked at once,
 * and a hook that waits resolves them all when the last answer is in: a request waits for the
 * store once, however many paces its route has, and the refusal it gets is the one it would have
 * got had they been asked in turn (the first in the route's order).
 */
export class RequestPaces extends PaceTicket<Holding> implements HijackWatcher {
  readonly #request: FastifyRequest
  readonly #observer: Observer
  readonly #answers: AnswerReader
  #reply: FastifyReply | null = null
  /** The hook at work: its step, how the request goes on, and where its units start in `held` (what it gives back). */
  #step: ReserveStep | null = null
  #next: HookHandlerDoneFunction | null = null
  #first = 0
  /** On a shared store: the units asked, in the route's order; from `#resolved` on, neither held nor given back. */
  #asked: Asked[] | null = null
  #resolved = 0
  /** Answers still awaited, and whether a hook waits for them. */
  #pending = 0
  #waiting = false
  /** Failure budgets' units held and counted in flight (see `#fly`). */
  #flying = 0

  /** @internal Made for a request on a paced route; `observer` hears of every decision. */
  constructor (observer: Observer, request: FastifyRequest, answers: AnswerReader) {
    super(observer, request)
    this.#request = request
    this.#observer = observer
    this.#answers = answers
  }

  /** @internal Reserves `step`'s paces in this replica's memory, one after the other, and answers or goes on at once. */
  reserve (step: ReserveStep, reply: FastifyReply, next: HookHandlerDoneFunction): void {
    this.#work(step, reply, next)
    const held = this._held
    const request = this.#request
    for (const bound of step.paces) {
      let key: string | undefined
      let lane: Lane
      try {
        key = bound.readKey(request)
        if (key === undefined) continue
        lane = bound.rated ? bound.named.laneOf(key) : bound.lane
      } catch (err) {
        return this.#malformed(bound, err as Error)
      }
      const reservation = lane.pace.reserve(key)
      if (!reservation.granted) {
        if (bound.shadow) {
          this.#observer.shadowRefused(request, bound, key, reservation.retryAfterMs)
          continue
        }
        return this.#refuse(bound, lane, key, reservation)
      }
      bound.counts.granted++
      if (bound.nearLimit !== null) this.#warn(bound, lane, key, reservation)
      const unit = holding(bound, lane, key, reservation)
      held.push(unit)
      if (unit.spend === 'rejected') this.#fly(unit)
    }
    this.#goOn()
  }

  /**
   * @internal Asks the shared store for a unit of each of `step`'s paces at once, every key read
   * first (a malformed one is answered before anything is asked); then waits for every answer
   * asked so far, this hook's and an earlier one's, or, for a hook that does not wait, goes on.
   */
  ask (step: ReserveStep, reply: FastifyReply, next: HookHandlerDoneFunction): void {
    this.#work(step, reply, next)
    const asked = this.#asked ??= []
    const start = asked.length
    const request = this.#request
    for (const bound of step.paces) {
      let key: string | undefined
      let lane: Lane
      try {
        key = bound.readKey(request)
        if (key === undefined) continue
        lane = bound.rated ? bound.named.laneOf(key) : bound.lane
      } catch (err) {
        asked.length = start
        return this.#malformed(bound, err as Error)
      }
      asked.push(new Asked(step, bound, lane, key))
    }
    for (let i = start; i < asked.length; i++) this.#send(asked[i])
    if (!step.waits) return next()
    this.#waiting = true
    if (this.#pending === 0) this.#resolve()
  }

  /** Makes `step` the hook at work. */
  #work (step: ReserveStep, reply: FastifyReply, next: HookHandlerDoneFunction): void {
    this.#reply = reply
    this.#step = step
    this.#next = next
    this.#first = this._held.length
  }

  /** Sends the reservation of `unit` to the store; a store of one's own that throws instead of rejecting is taken as rejecting. */
  #send (unit: Asked): void {
    let answer: Promise<PaceReservation>
    try {
      answer = (unit.lane.shared as SharedPace).reserve(unit.key)
    } catch (err) {
      answer = Promise.reject(err)
    }
    this.#pending++
    answer.then(reservation => { this.#answered(unit, reservation, null) }, (err: Error) => { this.#answered(unit, null, err) })
  }

  /**
   * The store answered for `unit`. The request may have been answered meanwhile (a handler
   * timeout, or a validation error before the preHandler): its ticket was settled without this
   * unit, which is held and settled now by the same rule; a refusal changes nothing, the answer
   * is on its way. Otherwise the last answer a hook waits for resolves them.
   */
  #answered (unit: Asked, reservation: PaceReservation | null, failure: Error | null): void {
    this.#pending--
    unit.answer = reservation
    unit.failure = failure
    const granted = reservation !== null && reservation.granted
    if (granted) {
      unit.bound.counts.granted++
      if (unit.bound.nearLimit !== null) this.#warn(unit.bound, unit.lane, unit.key, reservation)
    }
    if (this.settled) {
      if (granted) this._holdLate(holding(unit.bound, unit.lane, unit.key, reservation))
      return
    }
    if (this.#pending > 0 || !this.#waiting) return
    const next = this.#next as HookHandlerDoneFunction
    // Here, unlike in the hook itself, a throw (an errorResponseBuilder's) would be an unhandled
    // rejection: it fails the request as it does on the in-memory path.
    try {
      this.#resolve()
    } catch (err) {
      next(err as Error)
    }
  }

  /**
   * Every answer is in: holds the units granted, in the route's order; or answers the first
   * refusal or failure in that order, giving back the units of its hook and of any later one.
   */
  #resolve (): void {
    this.#waiting = false
    const asked = this.#asked as Asked[]
    const held = this._held
    let stop: Asked | null = null
    let step: ReserveStep | null = null
    for (let i = this.#resolved; i < asked.length; i++) {
      const unit = asked[i]
      if (unit.step !== step) {
        step = unit.step
        if (stop === null) this.#first = held.length
      }
      const answer = unit.answer
      if (answer !== null && answer.granted) {
        const got = holding(unit.bound, unit.lane, unit.key, answer)
        held.push(got)
        if (got.spend === 'rejected') this.#fly(got)
      } else if (answer === null || !unit.bound.shadow) {
        stop ??= unit
      } else if (stop === null) {
        this.#observer.shadowRefused(this.#request, unit.bound, unit.key, answer.retryAfterMs)
      }
    }
    this.#resolved = asked.length
    if (stop === null) return this.#goOn()
    if (stop.answer !== null) return this.#refuse(stop.bound, stop.lane, stop.key, stop.answer)
    this.#refundStep()
    ;(this.#next as HookHandlerDoneFunction)(stop.failure as Error)
  }

  /**
   * `lane` of `bound`'s pace, which has `warnAt`, granted `key` with `reservation`: warns when the grant left
   * that share spent. A store that does not tell when the bucket is full gives it by the units left.
   */
  #warn (bound: BoundPace, lane: Lane, key: string, reservation: PaceReservation): void {
    const fullInMs = reservation.fullInMs ?? (lane.limit - reservation.remaining) * lane.window * 1000 / lane.limit
    if ((bound.nearLimit as NearLimit).granted(key, fullInMs)) this.#observer.nearLimit(this.#request, bound, key, fullInMs)
  }

  /**
   * Every unit of the hook at work is held: a hook that commits writes the quota headers and
   * settles; after the last hook, a hijacked reply is watched; the request goes on.
   */
  #goOn (): void {
    const step = this.#step as ReserveStep
    if (step.commits) {
      writeQuota(this.#reply as FastifyReply, this._held, null, null)
      this._settle()
    }
    if (step.last) (this.#reply as FastifyReply).hijack = hijackWatched
    ;(this.#next as HookHandlerDoneFunction)()
  }

  /** The key of `bound` could not be read: 400 for a malformed declaration, the error (a 500) for anything else. */
  #malformed (bound: BoundPace, err: Error): void {
    this.#refundStep()
    if (!(err instanceof InvalidRequest)) return (this.#next as HookHandlerDoneFunction)(err)
    this.#observer.invalid(this.#request, bound, err.message)
    sendInvalidRequest(this.#reply as FastifyReply, err.message)
  }

  /**
   * `lane` of `bound`'s pace refused `key`: what the hook took goes back, and the request is
   * answered 429 (or the pace's refusal). A failure budget's refusal that the units other requests
   * hold on this replica, not yet settled, alone cause (were they all given back, a unit would be
   * there) is said to be so, with a wait of at most a second: most of those requests may well
   * succeed, and the budget's refill time would tell a real client to wait for nothing.
   */
  #refuse (bound: BoundPace, lane: Lane, key: string, reservation: PaceReservation): void {
    this._refused = true
    this.#refundStep()
    const flying = bound.rule.spend === 'rejected' ? bound.named.inFlight.get(key) : undefined
    const inFlight = flying !== undefined && reservation.retryAfterMs <= flying * lane.window * 1000 / lane.limit
    const retryAfterMs = inFlight ? Math.min(reservation.retryAfterMs, IN_FLIGHT_RETRY_MS) : reservation.retryAfterMs
    this.#observer.refused(this.#request, bound, key, retryAfterMs)
    const rule = lane === bound.lane ? bound.rule : { name: bound.name, refusal: bound.rule.refusal, ...lane }
    refuse(this.#request, this.#reply as FastifyReply, rule, laneQuota(bound, lane), reservation, this._held, (this.#step as ReserveStep).refusalBody, inFlight ? retryAfterMs : null)
  }

  /**
   * Counts `unit`, a failure budget's, in its pace's `inFlight` until it is settled; not when the
   * pace counts `MAX_IN_FLIGHT_KEYS` keys already (a request never settled, a hijacked reply's,
   * stays counted: the bound keeps that from growing memory; a unit not counted only makes its
   * refusal tell the refill time).
   */
  #fly (unit: Holding): void {
    const inFlight = unit.bound.named.inFlight
    if (inFlight.size >= MAX_IN_FLIGHT_KEYS && !inFlight.has(unit.key)) return
    unit.flying = true
    this.#flying++
    inFlight.set(unit.key, (inFlight.get(unit.key) ?? 0) + 1)
  }

  /** The failure budgets' units from `first` on are settled (kept or given back): no longer in flight. */
  #land (first: number): void {
    const held = this._held
    for (let i = first; i < held.length; i++) {
      const unit = held[i]
      if (!unit.flying) continue
      unit.flying = false
      this.#flying--
      const inFlight = unit.bound.named.inFlight
      const left = (inFlight.get(unit.key) as number) - 1
      if (left === 0) inFlight.delete(unit.key)
      else inFlight.set(unit.key, left)
    }
  }

  /** @internal Gives back the units from `first` on (see `PaceTicket`): those of a failure budget land. */
  override _refundFrom (first: number): void {
    if (this.#flying > 0) this.#land(first)
    super._refundFrom(first)
  }

  /** @internal The answer is being sent (see `PaceTicket`): the failure budgets' units are settled, and land. */
  override _send (): void {
    super._send()
    if (this.#flying > 0) this.#land(0)
  }

  /**
   * The hook answers the request itself: its units, from `#first` on, go back. A hook that
   * commits is on a route without the plugin's onSend and onError hooks, so its ticket is settled
   * now or never.
   */
  #refundStep (): void {
    this._refundFrom(this.#first)
    if ((this.#step as ReserveStep).commits) this._settle()
  }

  /** @internal The reply was hijacked (`hijackWatched`): its raw response is watched. */
  _hijacked (reply: FastifyReply): void {
    watchHijacked(reply, this, this.#answers, this.#request)
  }

  /**
   * @internal Settles (see `PaceTicket`). Units a shared store granted that no hook resolved yet,
   * because the request was answered first, are held now and settled with the rest; those still
   * awaited are held as they come.
   */
  override _settle (): void {
    const asked = this.#asked
    if (asked !== null && !this.settled) {
      this.#waiting = false
      for (let i = this.#resolved; i < asked.length; i++) {
        const { answer, bound, lane, key } = asked[i]
        if (answer !== null && answer.granted) this._held.push(holding(bound, lane, key, answer))
      }
      this.#resolved = asked.length
    }
    super._settle()
  }
}

/** The unit `reservation` took from `lane` of `bound`'s pace under `key`, as a ticket holds it. */
function holding (bound: BoundPace, lane: Lane, key: string, reservation: PaceReservation): Holding {
  return { name: bound.rule.name, key, spend: bound.rule.spend, reservation, quota: laneQuota(bound, lane), bound, flying: false }
}

/** The longest wait a refusal caused by units in flight asks for: they settle within a request's time. */
const IN_FLIGHT_RETRY_MS = 1000

/** Keys a failure budget counts units in flight for, at most. */
const MAX_IN_FLIGHT_KEYS = 10_000

/** The header items of `lane` of `bound`'s pace: the declared rate's without a lookup. */
function laneQuota (bound: BoundPace, lane: Lane): QuotaItems {
  return lane === bound.lane ? bound.quota : bound.quotaOf(lane)
}
