/**
 * One pace of a RedisStore as a request meets it: the reservation sent to Redis, its deadline, the
 * fallback pace beside it, and the refund of what Redis granted. When the store counts Redis as
 * unavailable is outages.ts's; what the scripts do is scripts.ts's.
 */
import { Waiting, type Deadlines } from './deadlines.js'
import type { Refunds } from './refunds.js'
import type { Pace, Reservation } from '../bucket/pace.js'
import { GRANT_BYTES, REFUSAL_BYTES, type PaceCommands } from './scripts.js'
import { isResendable, type RedisUnavailable } from './outages.js'
import type { PaceReservation, SharedPace, PaceLog } from '../store.js'

/**
 * A refusal in this replica's memory whose unit is back later than this (a failure budget spent,
 * a key locked out) is put to Redis all the same while Redis answers: an operator's reset there
 * must reach every replica. One second: no `perSecond` pace ever waits longer, so the requests of
 * a key above such a rate never reach Redis once this replica's memory refuses them.
 */
const FOLLOW_AFTER_MS = 1000

/** The grant every request gets with `whenUnavailable: 'open'` while Redis is unavailable: nothing taken, nothing to give back. */
const OPEN: PaceReservation = Object.freeze({ granted: true, remaining: 0, retryAfterMs: 0, refund () {} })

/**
 * A unit Redis granted: refunded in Redis, once, without waiting for the answer, and in this
 * replica's memory too when the fallback pace also granted it (see `RedisPace`). The grant is
 * named as the scripts name it, in their microticks: the run's start, the grant's number in the
 * run, and its time, as the reserve script answered.
 */
class RedisReservation implements PaceReservation {
  readonly granted = true
  readonly retryAfterMs = 0
  readonly remaining: number
  readonly run: number
  readonly count: number
  readonly at: number
  readonly fullInMs: number
  #pace: RedisPace | null
  readonly #local: Reservation | null

  /**
   * `reply`: the reserve script's grant, the units left, the run, the grant's number, its time
   * and the time until full.
   * `local`: the fallback pace's grant of the same request, if it took one.
   */
  constructor (pace: RedisPace, readonly redisKey: string, reply: Buffer, local: Reservation | null) {
    this.#pace = pace
    this.#local = local
    const remaining = reply.readDoubleLE(0)
    this.remaining = local === null ? remaining : Math.min(remaining, local.remaining)
    this.run = reply.readDoubleLE(8)
    this.count = reply.readDoubleLE(16)
    this.at = reply.readDoubleLE(24)
    const fullInMs = reply.readDoubleLE(32)
    this.fullInMs = local === null ? fullInMs : Math.max(fullInMs, local.fullInMs)
  }

  refund (): void {
    const pace = this.#pace
    if (pace === null) return
    this.#pace = null
    this.#local?.refund()
    pace._giveBack(this.redisKey, this.run, this.count, this.at)
  }
}

/** A refusal Redis answered, or a block this replica heard of: nothing was taken, so there is nothing to give back. */
function refused (retryAfterMs: number): PaceReservation {
  return { granted: false, remaining: 0, retryAfterMs, refund () {} }
}

/**
 * A reservation waiting for Redis: its key, the fallback pace's grant (if it took one), the outage
 * its request was sent in, and how its request goes on. Past the store's timeout, its request takes
 * the unavailable path.
 */
class ReserveWaiting extends Waiting {
  constructor (
    readonly pace: RedisPace,
    readonly key: string,
    readonly redisKey: string,
    readonly local: Reservation | null,
    readonly outage: number,
    readonly resolve: (reservation: PaceReservation) => void
  ) {
    super()
  }

  expire (): void {
    this.pace._expired(this)
  }
}

/**
 * What a RedisPace is given of its store (a RedisStore): the settings every pace of the store
 * shares, the deadlines of their requests, and the bookkeeping of outages and of the paces whose
 * memory may hold rows, which lives in the store because it spans all of its paces.
 */
export interface PaceHost {
  readonly whenUnavailable: RedisUnavailable
  readonly retryMs: number
  readonly _deadlines: Deadlines
  /** The refunds not yet sent, which every command on a row waits behind. */
  readonly _refunds: Refunds
  /** The latest outage's number, which a request sent now carries. */
  readonly _outage: number
  _mayTry (redisKey: string): boolean
  _blockedMs (redisKey: string): number
  _failed (redisKey: string, err: Error, log: PaceLog): void
  _track (pace: RedisPace): void
  _answered (answered: RedisPace, redisKey: string, sentIn: number): void
}

/**
 * One pace in Redis. With `whenUnavailable: 'fallback'`, every request is also paced in this
 * replica's memory, and granted only when both grant: first the fallback pace (a refusal there
 * asks Redis only when its unit is back more than a second later, see `#follow`), then Redis (a
 * refusal there gives the fallback's unit back). The fallback
 * therefore holds every unit this replica granted, whichever store answered, and the rate holds
 * per replica at every moment, outages and returns included: a switch to the fallback finds the
 * bucket this replica's own spending left (not a full one), and a return to Redis cannot grant on
 * top of what the fallback granted while Redis did not hear of it. While Redis answers, the
 * fallback refuses only what this replica alone has already spent, so the shared bucket decides
 * (at a bucket's edge the two clocks disagree by how much the time from the memory's reservation
 * to Redis running the script varies: at most `timeoutMs`).
 */
export class RedisPace implements SharedPace {
  readonly #store: PaceHost
  readonly #commands: PaceCommands
  readonly #prefix: string
  /** The bucket as the scripts take it: its limit, and its window in ms, or null for one second (see `scriptWindow`). */
  readonly #limit: number
  readonly #windowMs: number | null
  /** This replica's pace of the name, with `whenUnavailable: 'fallback'`; null with 'open' or 'closed'. */
  readonly #local: Pace | null
  readonly #log: PaceLog
  readonly #unavailable: PaceReservation
  readonly #deadlines: Deadlines
  readonly #refunds: Refunds
  /** In the store's set of paces whose memory may hold rows (see `RedisStore._answered`). */
  #tracked = false
  /** Requests this pace decided without Redis's answer (an outage, a timeout, a redirection not followed): granted, and refused. */
  readonly unanswered = { granted: 0, refused: 0 }

  constructor (store: PaceHost, commands: PaceCommands, prefix: string, limit: number, windowMs: number | null, local: Pace | null, log: PaceLog) {
    this.#store = store
    this.#commands = commands
    this.#prefix = prefix
    this.#limit = limit
    this.#windowMs = windowMs
    this.#local = local
    this.#log = log
    this.#unavailable = store.whenUnavailable === 'open'
      ? OPEN
      : Object.freeze({ granted: false, remaining: 0, retryAfterMs: store.retryMs, refund () {} })
    this.#deadlines = store._deadlines
    this.#refunds = store._refunds
  }

  reserve (key: string): Promise<PaceReservation> {
    const store = this.#store
    const local = this.#local === null ? null : this.#local.reserve(key)
    if (local !== null) {
      // A refusal in memory is final when the unit is back within a second (a key above its rate,
      // where asking Redis would only add load), or while the key's master is away (below);
      // otherwise Redis, which an operator may have reset, decides (see `#follow`).
      if (!local.granted && local.retryAfterMs <= FOLLOW_AFTER_MS) return Promise.resolve(local)
      this.#track()
    }
    const redisKey = this.#prefix + key
    if (!store._mayTry(redisKey)) return Promise.resolve(this.#alone(local ?? this.#whenUnavailable(redisKey)))
    const outage = store._outage
    return new Promise(resolve => { this.#ask(new ReserveWaiting(this, key, redisKey, local, outage, resolve)) })
  }

  /** Sends the reservation `waiting` waits for to Redis, and starts its deadline. */
  #ask (waiting: ReserveWaiting): void {
    let answering: Promise<Buffer>
    this.#refunds.flush()
    try {
      answering = this.#windowMs === null
        ? this.#commands.exchangepaceReserveBuffer(waiting.redisKey, this.#limit)
        : this.#commands.exchangepaceReserveBuffer(waiting.redisKey, this.#limit, this.#windowMs)
    } catch (err) {
      this.#failed(waiting, err as Error)
      return
    }
    this.#deadlines.start(waiting)
    answering.then(reply => { this.#answered(waiting, reply) }, (err: Error) => { this.#rejected(waiting, err) })
  }

  /**
   * Redis answered the reservation `waiting` waits for: a grant or a refusal for its request,
   * unless the reply is not one this version reads, or comes after the deadline.
   */
  #answered (waiting: ReserveWaiting, reply: Buffer): void {
    const length = Buffer.isBuffer(reply) ? reply.length : -1
    if (length !== GRANT_BYTES && length !== REFUSAL_BYTES) return this.#unreadable(waiting, length === -1 ? typeof reply : `${length} bytes`)
    if (!this.#deadlines.answer(waiting)) return this.#late(waiting, reply, length)
    // The request first: a logger that throws must not leave it waiting.
    if (length === GRANT_BYTES) this.#redisGranted(waiting, reply)
    else this.#redisRefused(waiting, reply)
    this.#store._answered(this, waiting.redisKey, waiting.outage)
  }

  /**
   * The reserve script answered `what`: another script under this command's name (another version
   * of this store on the same client). The store is unavailable, not the request stuck on a reply
   * it cannot read.
   */
  #unreadable (waiting: ReserveWaiting, what: string): void {
    if (this.#deadlines.answer(waiting)) this.#failed(waiting, new Error(`the reserve script answered ${what}, not a reply this version reads: does another version of exchangepace define its commands on this client?`))
  }

  /** Too late for its request, which went the unavailable path: Redis's unit, if it granted one, goes back. */
  #late (waiting: ReserveWaiting, reply: Buffer, length: number): void {
    if (length === GRANT_BYTES) new RedisReservation(this, waiting.redisKey, reply, null).refund()
  }

  /** Redis granted: the request holds its unit, and the memory's, which follows Redis when it had refused (see `#follow`). */
  #redisGranted (waiting: ReserveWaiting, reply: Buffer): void {
    const local = waiting.local
    waiting.resolve(new RedisReservation(this, waiting.redisKey, reply, local === null || local.granted ? local : this.#follow(waiting.key)))
  }

  /** Redis refused: the memory's unit, if it took one, goes back. */
  #redisRefused (waiting: ReserveWaiting, reply: Buffer): void {
    waiting.local?.refund()
    waiting.resolve(refused(reply.readDoubleLE(0)))
  }

  /** The reservation failed in Redis, or came back unrun (sent again, see `#resend`), within its deadline. */
  #rejected (waiting: ReserveWaiting, err: Error): void {
    if (waiting.done) return
    if (isResendable(err)) this.#resend(waiting)
    else if (this.#deadlines.answer(waiting)) this.#failed(waiting, err)
  }

  /**
   * The reservation `waiting` waits for came back unrun, within its deadline: redirected (MOVED
   * or ASK), or refused by ioredis before it was sent (see `isResendable`). It is sent again as a
   * command of its own, which ioredis follows to the node a redirection names (correcting its slot
   * map on a MOVED, and sending ASKING first on an ASK), and whose answer is the request's, as the
   * first one's would have been. ioredis 5 hands a redirection back to a command of an
   * auto-pipelined batch that mixed slots (a failover or a resharding moved some of them); ioredis
   * 6.1 resends such a command itself.
   */
  #resend (waiting: ReserveWaiting): void {
    const failed = (err: Error): void => {
      if (this.#deadlines.answer(waiting)) this.#failed(waiting, err)
    }
    this.#refunds.flush()
    try {
      const answering = this.#windowMs === null
        ? this.#commands.exchangepaceReserveAloneBuffer(waiting.redisKey, this.#limit)
        : this.#commands.exchangepaceReserveAloneBuffer(waiting.redisKey, this.#limit, this.#windowMs)
      answering.then(reply => { this.#answered(waiting, reply) }, failed)
    } catch (err) {
      failed(err as Error)
    }
  }

  /** `reservation` was decided without Redis's answer: counted, and returned. */
  #alone (reservation: PaceReservation): PaceReservation {
    if (reservation.granted) this.unanswered.granted++
    else this.unanswered.refused++
    return reservation
  }

  /**
   * Redis granted what this replica's memory had refused: the shared bucket has more than this
   * replica's own spending left in memory, because an operator reset or unblocked the key (on any
   * replica, or from the CLI), or Redis lost its rows. The memory follows Redis: its row for the
   * key starts afresh with this grant, so that the next request is not refused here before Redis
   * is asked. It is asked anyway: a refusal in memory is only final while Redis is unavailable.
   */
  #follow (key: string): Reservation {
    const local = this.#local as Pace
    local.reset(key)
    return local.reserve(key)
  }

  /** Enters this pace in the store's set of paces whose memory may hold rows. */
  #track (): void {
    if (this.#tracked) return
    this.#tracked = true
    this.#store._track(this)
  }

  /** @internal Redis did not answer the reservation `waiting` waits for within the timeout. */
  _expired (waiting: ReserveWaiting): void {
    this.#failed(waiting, new Error(`no answer within ${this.#deadlines.timeoutMs} ms`))
  }

  /**
   * Redis failed, or did not answer in time: the request takes the `whenUnavailable` path (the
   * fallback's grant, when it took one), before the outage is noted and logged (a logger that
   * throws must not leave it waiting).
   */
  #failed (waiting: ReserveWaiting, err: Error): void {
    waiting.resolve(this.#alone(waiting.local ?? this.#whenUnavailable(waiting.redisKey)))
    this.#store._failed(waiting.redisKey, err, this.#log)
  }

  /**
   * What a request gets with `whenUnavailable: 'open'` or 'closed' while Redis is unavailable: a
   * refusal until the end of a block this replica heard of (see `BlockNews`; with 'fallback' the
   * block is in the memory pace itself), or the mode's answer.
   */
  #whenUnavailable (redisKey: string): PaceReservation {
    const blockedMs = this.#store._blockedMs(redisKey)
    return blockedMs > 0 ? refused(blockedMs) : this.#unavailable
  }

  /** @internal Whether the store tracks this pace (its memory may hold rows). */
  get _tracked (): boolean {
    return this.#tracked
  }

  /**
   * @internal Sweeps this pace's memory when a sweep is due, and says whether it still holds rows;
   * when it holds none, the store stops tracking it until its next grant.
   */
  _tidy (): boolean {
    const local = this.#local as Pace
    local.tidy()
    if (local.size > 0) return true
    this.#tracked = false
    return false
  }

  /**
   * @internal Called once per granted reservation by `RedisReservation.refund`, as `Pace._giveBack`
   * is by `Reservation.refund`: gives grant number `count` of the run of `redisKey` that began at
   * `run`, made at `at`, back to its bucket in Redis, once the code that asked for it is done or
   * before the store's next command, whichever comes first (refunds.ts says why). Nobody waits for
   * it; a failure (a rejection, or a client that throws, which `reserve` survives too) only leaves
   * it spent.
   */
  _giveBack (redisKey: string, run: number, count: number, at: number): void {
    this.#refunds.add(() => { this.#sendRefund(redisKey, run, count, at) })
  }

  /** Sends a refund `_giveBack` queued. */
  #sendRefund (redisKey: string, run: number, count: number, at: number): void {
    try {
      const refunding = this.#windowMs === null
        ? this.#commands.exchangepaceRefund(redisKey, this.#limit, run, count, at)
        : this.#commands.exchangepaceRefund(redisKey, this.#limit, run, count, at, this.#windowMs)
      refunding.catch((err: Error) => { this.#lost(err) })
    } catch (err) {
      this.#lost(err as Error)
    }
  }

  #lost (err: Error): void {
    this.#log.debug({ err }, 'exchangepace: a refund did not reach Redis; the unit stays spent until it refills')
  }
}
