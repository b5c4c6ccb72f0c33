/**
 * One pace of a RedisStore as a request meets it: the reservation sent to Redis, its deadline, the
 * fallback pace beside it, and the refund of what Redis granted. When the store counts Redis as
 * unavailable is outages.ts's; what the scripts do is scripts.ts's.
 */
import { Waiting, type Deadlines } from './deadlines.js'
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

/** A reservation waiting for Redis: past the store's timeout, its request takes the unavailable path. */
class ReserveWaiting extends Waiting {
  constructor (readonly pace: RedisPace, readonly redisKey: string, readonly local: Reservation | null, readonly resolve: (reservation: PaceReservation) => void) {
    super()
  }

  expire (): void {
    this.pace._expired(this.redisKey, this.local, this.resolve)
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
    return new Promise(resolve => {
      const deadlines = this.#deadlines
      const waiting = new ReserveWaiting(this, redisKey, local, resolve)
      let answering: Promise<Buffer>
      try {
        answering = this.#windowMs === null
          ? this.#commands.exchangepaceReserveBuffer(redisKey, this.#limit)
          : this.#commands.exchangepaceReserveBuffer(redisKey, this.#limit, this.#windowMs)
      } catch (err) {
        this.#failed(redisKey, local, err as Error, resolve)
        return
      }
      deadlines.start(waiting)
      const answered = (reply: Buffer): void => {
        const length = Buffer.isBuffer(reply) ? reply.length : -1
        if (length !== GRANT_BYTES && length !== REFUSAL_BYTES) {
          // Another script under this command's name (another version of this store on the same
          // client): the store is unavailable, not the request stuck on a reply it cannot read.
          if (deadlines.answer(waiting)) this.#failed(redisKey, local, new Error(`the reserve script answered ${length === -1 ? typeof reply : `${length} bytes`}, not a reply this version reads: does another version of exchangepace define its commands on this client?`), resolve)
          return
        }
        if (!deadlines.answer(waiting)) {
          // Too late for its request, which went the unavailable path: give Redis' unit back.
          if (length === GRANT_BYTES) new RedisReservation(this, redisKey, reply, null).refund()
          return
        }
        // The request first: a logger that throws must not leave it waiting.
        if (length === GRANT_BYTES) resolve(new RedisReservation(this, redisKey, reply, local === null || local.granted ? local : this.#follow(key)))
        else {
          local?.refund()
          resolve(refused(reply.readDoubleLE(0)))
        }
        store._answered(this, redisKey, outage)
      }
      answering.then(answered, (err: Error) => {
        if (waiting.done) return
        if (isResendable(err)) this.#resend(redisKey, waiting, answered, local, resolve)
        else if (deadlines.answer(waiting)) this.#failed(redisKey, local, err, resolve)
      })
    })
  }

  /**
   * The reservation for `redisKey` came back unrun, still within its deadline: redirected (MOVED
   * or ASK), or refused by ioredis before it was sent (see `isResendable`). It is sent again as a
   * command of its own, which ioredis follows to the node a redirection names (correcting its slot
   * map on a MOVED, and sending ASKING first on an ASK), and whose answer is the request's, as the
   * first one's would have been. ioredis 5 hands a redirection back to a command of an
   * auto-pipelined batch that mixed slots (a failover or a resharding moved some of them); ioredis
   * 6.1 resends such a command itself.
   */
  #resend (redisKey: string, waiting: ReserveWaiting, answered: (reply: Buffer) => void, local: Reservation | null, resolve: (reservation: PaceReservation) => void): void {
    const failed = (err: Error): void => {
      if (this.#deadlines.answer(waiting)) this.#failed(redisKey, local, err, resolve)
    }
    try {
      const answering = this.#windowMs === null
        ? this.#commands.exchangepaceReserveAloneBuffer(redisKey, this.#limit)
        : this.#commands.exchangepaceReserveAloneBuffer(redisKey, this.#limit, this.#windowMs)
      answering.then(answered, failed)
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

  /** @internal Redis did not answer the reservation for `redisKey` within the timeout. */
  _expired (redisKey: string, local: Reservation | null, resolve: (reservation: PaceReservation) => void): void {
    this.#failed(redisKey, local, new Error(`no answer within ${this.#deadlines.timeoutMs} ms`), resolve)
  }

  /**
   * Redis failed, or did not answer in time: the request takes the `whenUnavailable` path (the
   * fallback's grant, when it took one), before the outage is noted and logged (a logger that
   * throws must not leave it waiting).
   */
  #failed (redisKey: string, local: Reservation | null, err: Error, resolve: (reservation: PaceReservation) => void): void {
    resolve(this.#alone(local ?? this.#whenUnavailable(redisKey)))
    this.#store._failed(redisKey, err, this.#log)
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
   * `run`, made at `at`, back to its bucket in Redis. Nobody waits for it; a failure (a rejection,
   * or a client that throws, which `reserve` survives too) only leaves it spent.
   */
  _giveBack (redisKey: string, run: number, count: number, at: number): void {
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
