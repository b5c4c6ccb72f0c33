import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import type { BoundPace } from './bound-pace.js'
import { InvalidRequest } from '../keys/parse.js'
import type { Observer } from './observer.js'
import type { PaceRefusal } from './options.js'
import { writeQuota, type QuotaItems } from './quota-headers.js'
import { refuse, sendInvalidRequest } from './refusals.js'
import type { Lane } from '../operator/named-pace.js'
import { kTicket, type SlottedRequest } from './request-ticket.js'
import type { PaceReservation, SharedPace } from '../store.js'
import { PaceTicket, type HeldReservation } from './ticket.js'

/**
 * The hook that reserves before the handler (preHandler; onRequest for source paces spent on every
 * request): one unit from each of its paces, all or nothing, onto the request's ticket (`request.pace`,
 * read here through its slot: see request-ticket.ts).
 */

/** A held reservation, with its pace's header items, and the pace for the observer. */
export interface Holding extends HeldReservation {
  readonly quota: QuotaItems
  readonly bound: BoundPace
}

/**
 * The paces one hook reserves. `commits`: every one of them is a source pace spent on every
 * request, and they are all the route has, so nothing can ever be refunded and every quota is
 * public: the hook writes the quota headers and commits at once, and the route needs no onSend
 * (the authorization endpoint's shape).
 */
export interface ReserveStep {
  readonly paces: readonly BoundPace[]
  readonly commits: boolean
  readonly refusalBody: (request: FastifyRequest, refusal: PaceRefusal) => object
  readonly observer: Observer
}

/**
 * Reserves one unit from each pace of `step` for `request`, all or nothing: when one refuses or a
 * key is malformed, what this hook took is refunded and the request is answered here. In-process
 * paces answer synchronously, so the common path allocates no promise; a shared store's answer
 * continues the same loop from where it stopped.
 */
export function reserveAll (step: ReserveStep, request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
  const slotted = request as SlottedRequest
  let ticket = slotted[kTicket]
  if (ticket === null) {
    ticket = new PaceTicket<Holding>(step.observer, request)
    slotted[kTicket] = ticket
  }
  reserveFrom(step, 0, ticket, ticket.held.length, request, reply, next)
}

function reserveFrom (step: ReserveStep, start: number, ticket: PaceTicket<Holding>, first: number,
  request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
  const paces = step.paces
  for (let i = start; i < paces.length; i++) {
    const bound = paces[i]
    let key: string | undefined
    let lane = bound.lane
    try {
      key = bound.readKey(request)
      if (bound.rated && key !== undefined) lane = bound.named.laneOf(key)
    } catch (err) {
      giveBack(step, ticket, first)
      if (!(err instanceof InvalidRequest)) return next(err as Error)
      step.observer.invalid(request, bound, err.message)
      return sendInvalidRequest(reply, err.message)
    }
    if (key === undefined) continue
    if (lane.shared !== null) return reserveShared(step, i, ticket, first, bound, lane, key, request, reply, next)
    if (!hold(step, ticket, first, bound, lane, key, lane.pace.reserve(key), request, reply)) return
  }
  if (step.commits) {
    writeQuota(reply, ticket.held, null, null)
    ticket._settle()
  }
  next()
}

/** Reserves from the shared store's pace of `step.paces[i]`, then goes on with the next pace. */
function reserveShared (step: ReserveStep, i: number, ticket: PaceTicket<Holding>, first: number, bound: BoundPace, lane: Lane, key: string,
  request: FastifyRequest, reply: FastifyReply, next: HookHandlerDoneFunction): void {
  let answer: Promise<PaceReservation>
  try {
    answer = (lane.shared as SharedPace).reserve(key)
  } catch (err) {
    // A store of one's own that throws instead of rejecting is taken as rejecting.
    answer = Promise.reject(err)
  }
  answer.then(reservation => {
    // The request was answered while the store decided (a handler timeout): its ticket was
    // settled without this unit, which is settled now by the same rule. A refusal changes
    // nothing: the answer is already on its way.
    if (ticket.settled) {
      if (!reservation.granted) return
      bound.counts.granted++
      ticket._holdLate(holding(bound, lane, key, reservation))
      return
    }
    // Here, unlike in the hook itself, a throw (an errorResponseBuilder's) would be an
    // unhandled rejection: it fails the request as it does on the in-memory path.
    try {
      if (hold(step, ticket, first, bound, lane, key, reservation, request, reply)) reserveFrom(step, i + 1, ticket, first, request, reply, next)
    } catch (err) {
      next(err as Error)
    }
  }, (err: Error) => {
    giveBack(step, ticket, first)
    next(err)
  })
}

/**
 * The hook answers the request itself (a refusal, a malformed key, an error): what it took, from
 * `first` on, goes back. A step that commits is on a route without the plugin's onSend and onError
 * hooks, so its ticket is settled now or never.
 */
function giveBack (step: ReserveStep, ticket: PaceTicket<Holding>, first: number): void {
  ticket._refundFrom(first)
  if (step.commits) ticket._settle()
}

/** Keeps a granted unit on the ticket; on a refusal gives back this hook's units and answers 429. */
function hold (step: ReserveStep, ticket: PaceTicket<Holding>, first: number, bound: BoundPace, lane: Lane, key: string, reservation: PaceReservation,
  request: FastifyRequest, reply: FastifyReply): boolean {
  if (!reservation.granted) {
    ticket.refused = true
    giveBack(step, ticket, first)
    step.observer.refused(request, bound, key, reservation.retryAfterMs)
    const rule = lane === bound.lane ? bound.rule : { name: bound.name, refusal: bound.rule.refusal, ...lane }
    refuse(request, reply, rule, laneQuota(bound, lane), reservation, ticket.held, step.refusalBody)
    return false
  }
  bound.counts.granted++
  ticket.held.push(holding(bound, lane, key, reservation))
  return true
}

/** The unit `reservation` took from `lane` of `bound`'s pace under `key`, as a ticket holds it. */
function holding (bound: BoundPace, lane: Lane, key: string, reservation: PaceReservation): Holding {
  return { name: bound.rule.name, key, spend: bound.rule.spend, reservation, quota: laneQuota(bound, lane), bound }
}

/** The header items of `lane` of `bound`'s pace: the declared rate's without a lookup. */
function laneQuota (bound: BoundPace, lane: Lane): QuotaItems {
  return lane === bound.lane ? bound.quota : bound.quotaOf(lane)
}
