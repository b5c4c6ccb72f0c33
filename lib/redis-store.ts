import type { FastifyBaseLogger } from 'fastify'
import { Deadlines, Waiting } from './deadlines.js'
import type { Pace, Reservation } from './pace.js'
import type { PaceReservation, PaceStore, SharedPace } from './store.js'

/**
 * A row's layout for Lua's struct library, little-endian: the format byte, then full, run, count
 * and last as doubles, the marks as an unsigned 32-bit integer, and the rate it was written at as
 * a double.
 */
const ROW = '<BddddI4d'

/** The format byte every row starts with (the rows of earlier builds had 1, or were text). */
const ROW_FORMAT = 2

/**
 * Lua: whether the key's value `row` (false when there is no key) is a row the scripts wrote: the
 * size of ROW (45 bytes) and the format byte (2). Anything else (an earlier build's row, a foreign
 * value under the prefix) is no row: struct.unpack would fail on it, and a failing script is an
 * outage for the whole store. For the same reason the scripts read `row` with redis.pcall: a key
 * of another type (a hash) gives an error table, which is no row, where GET would fail the script.
 */
const IS_ROW = `row and #row == 45 and string.byte(row) == ${ROW_FORMAT}`

/**
 * The pace in Redis, with the in-process Pace's semantics. A key holds one row of 45 bytes,
 * `struct.pack(ROW, 2, full, run, count, last, marks, rate)`: a format byte (2), the Redis TIME at
 * which the bucket is full again, and for refunds (as in `Pace`) when the run of spending began,
 * the grants counted in it, when the latest came, which of the 32 latest were refunded (bit i: the
 * grant i before the latest), and the rate whose microticks (below) its times are counted in. No
 * key means a full bucket, and every write sets the key to expire at the moment it is full again
 * (PX), so Redis holds only the keys that spent within the last second. Each operation is one
 * script on one key: atomic on the server, no read-then-write from Node, and valid on Redis
 * Cluster. The clock is the server's, so every replica shares it.
 *
 * Time is counted in microticks: one microsecond of TIME is `rate` microticks, so one unit refills
 * in exactly 1e6 microticks and a bucket holds 1e6 x rate, and a debit or a refund adds or
 * subtracts an exact integer (as `Pace` does with its ticks). Readings are taken modulo 2^32
 * microseconds (71 minutes), which keeps every value an exact integer for integer rates up to 2^21
 * per second; a stored time is never more than one bucket ahead of now (the key expires when it is
 * reached), so its distance to now is read unambiguously from the modular difference. Redis's
 * clock is wall-clock time and can step back (or a failover can move rows to a server whose clock
 * is behind): a stored time more than one bucket ahead (by more than the half microtick a grant
 * rounds to at a fractional rate) is then rewritten one bucket ahead, an empty bucket that refills
 * from now, starting a run with no grant in it (refunds of the grants before the step give
 * nothing), so that a step back delays a key by at most one second. The row is binary (doubles,
 * which hold those integers exactly, and the marks as an unsigned 32-bit integer) because
 * converting numbers to and from text cost Redis more than the arithmetic; for the same reason the
 * expiry goes to Redis as text formatted with %d (Redis would format a Lua number argument as a
 * 17-digit double). A value not in this format (not 45 bytes, or not starting with the format byte,
 * such as the rows of earlier builds, which live at most a second) reads as no row: a full bucket.
 * Replicas that declare different rates for one pace (a deploy that changes `perSecond`) share its
 * rows: a reserve reads a row written at another rate as the same moments in its own microticks
 * (the bucket as far from full in time), and a refund leaves such a row alone. The scripts are
 * straight-line code: a Lua local function is a closure built anew on every call.
 */
const CLOCK = `
local rate = tonumber(ARGV[1])
local wrap = 4294967296 * rate
local time = redis.call('TIME')
local now = ((time[1] * 1000000 + time[2]) % 4294967296) * rate
`

/**
 * Takes one unit if the bucket holds one. `spent` is how far ahead of now the stored time is; a
 * key whose time has come (or no key, or a value not in the row's format) is a full bucket, and a
 * grant on it begins a new run, so the rest of the row is read only when the run goes on. The
 * reply is one binary string of doubles, little-endian (a table reply cost Redis a tenth of the
 * script's time, converting it): refused, 8 bytes, the wait in ms; granted, 32 bytes, the whole
 * units left and, for the refund, the run, the grant's number in it and its time.
 */
const RESERVE = `${CLOCK}
local row = redis.pcall('GET', KEYS[1])
local at = math.floor(now + 0.5) % wrap
local after = 1000000
local run = at
local count = 1
local marks = 0
if ${IS_ROW} then
  local _, full, since, grants, last, refunded, written = struct.unpack('${ROW}', row)
  if written ~= rate then
    full = math.floor(full / written * rate + 0.5) % wrap
    since = math.floor(since / written * rate + 0.5) % wrap
  end
  local spent = (full - now) % wrap
  if spent > 1000000 * rate + 0.5 and spent <= wrap / 2 then
    redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, math.floor(now + 1000000 * rate + 0.5) % wrap, at, 0, at, 0, rate), 'PX', '1000')
    return struct.pack('<d', 1000 / rate)
  end
  if spent > 0 and spent <= wrap / 2 then
    after = spent + 1000000
    run = since
    count = grants + 1
    marks = refunded * 2 % 4294967296
  end
end
local shortfall = after - 1000000 * rate
if shortfall > 0.5 then
  return struct.pack('<d', shortfall / rate / 1000)
end
redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, math.floor(now + after + 0.5) % wrap, run, count, at, marks, rate), 'PX', string.format('%d', math.ceil(after / rate / 1000)))
return struct.pack('<dddd', math.floor((0.5 - shortfall) / 1000000), run, count, at)
`

/**
 * Gives back grant number ARGV[3] of the run that began at ARGV[2], made at ARGV[4], by
 * `Pace._giveBack`'s rule, counted from the latest grant (`ahead`: how far the stored time is past
 * it): nothing once the run is over (no key, a value not in the row's format, or another run) or
 * when the row was written at another rate (its times are counted in other microticks); the run's
 * latest grant gives its unit and uncounts; any other gives what the later grants still kept leave
 * room for, and is marked refunded (the marks are counted byte by byte: LuaBitOp's operations take
 * doubles, and a multiplication that spreads the bytes' sums would pass 2^51, where it stops
 * reading them exactly). A grant already refunded (uncounted as the latest, or marked) gives
 * nothing again: ioredis resends a command whose answer a lost connection kept from it, and Redis
 * may have run it already; not when its number was given again (an uncounted latest grant's goes to
 * the next grant), nor when 32 grants or more came after it (no mark records it): docs/stores.md
 * says what such a resend gives. The marks move down one when the latest grant is uncounted, so the
 * latest grant's own mark (bit 0) is set when it was refunded before the grant after it was. A key
 * left at or before the latest grant is full and goes without a reading of the clock (a stranger's
 * rejected exchange); one whose time stays keeps its expiry (only the mark changes); one that moves
 * is written with the expiry its new time calls for, one second at most: a time more than a bucket
 * ahead (by more than the half microtick a grant rounds to, as the reserve script reads it) means
 * Redis's clock stepped back since the grants, and the key lives no longer than a reserve would let
 * it (which rewrites such a time one bucket ahead).
 */
const REFUND = `
local row = redis.pcall('GET', KEYS[1])
if not (${IS_ROW}) then return 0 end
local _, full, since, grants, last, marks, written = struct.unpack('${ROW}', row)
if since ~= tonumber(ARGV[2]) or written ~= tonumber(ARGV[1]) then return 0 end
local span = 4294967296 * ARGV[1]
local ahead = (full - last) % span
local left
if grants == tonumber(ARGV[3]) then
  if marks % 2 == 1 then return 0 end
  left = ahead - 1000000
  grants = grants - 1
  marks = math.floor(marks / 2)
else
  local later = grants - ARGV[3]
  local bits = bit.tobit(marks)
  if later < 0 or (later < 32 and bit.band(bits, bit.lshift(1, later)) ~= 0) then return 0 end
  if later < 32 then bits = bit.band(bits, bit.lshift(1, later) - 1) end
  bits = bits - bit.band(bit.rshift(bits, 1), 0x55555555)
  bits = bit.band(bits, 0x33333333) + bit.band(bit.rshift(bits, 2), 0x33333333)
  bits = bit.band(bits + bit.rshift(bits, 4), 0x0f0f0f0f)
  bits = bits % 256 + bit.rshift(bits, 8) % 256 + bit.rshift(bits, 16) % 256 + bit.rshift(bits, 24)
  left = math.min(ahead - 1000000 + (last - ARGV[4]) % span, math.max(ahead - 1000000, math.min(ahead, (later - bits) * 1000000)))
  if later < 32 then marks = bit.bor(bit.tobit(marks), bit.lshift(1, later)) % 4294967296 end
end
if left <= 0.5 then
  redis.call('DEL', KEYS[1])
  return 1
end
if left >= ahead then
  redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, full, since, grants, last, marks, written), 'KEEPTTL')
  return 1
end
${CLOCK}
local spent = (last + left - now) % wrap
if spent == 0 or spent > wrap / 2 then
  redis.call('DEL', KEYS[1])
else
  if spent > 1000000 * rate + 0.5 then spent = 1000000 * rate end
  redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, (last + left) % wrap, since, grants, last, marks, rate), 'PX', string.format('%d', math.ceil(spent / rate / 1000)))
end
return 1
`

/**
 * A pace name as it appears in Redis keys, with no ':' in it (':' as %3A, and '%' as %25), so that
 * the first ':' after it ends it: otherwise pace "/a" with key "b:c" and pace "/a:b" with key "c"
 * would share one Redis key. A name without either character is written as it is.
 */
function keyName (name: string): string {
  return name.replace(/[%:]/g, found => found === ':' ? '%3A' : '%25')
}

/** @internal The scripts' text, for tests that run them on a clock of their own. */
export const SCRIPTS = { reserve: RESERVE, refund: REFUND } as const

/** The highest rate the scripts' microticks keep exact (see above), per second. */
const MAX_RATE = 2 ** 21

const MAX_TIMER_MS = 2 ** 31 - 1

/** The part of an ioredis client (`Redis` or `Cluster`) the store uses. */
export interface RedisClientLike {
  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void
}

/** The reserve script's reply: a refusal, the wait in ms; a grant, the units left, the run, the grant's number and its time. */
const REFUSAL_BYTES = 8
const GRANT_BYTES = 32

/**
 * The commands `defineCommand` adds (ioredis loads each script once and calls it by SHA). The
 * reserve script's reply is read as it came (the `Buffer` form of the command), not as text.
 */
interface PaceCommands {
  exchangepaceReserveBuffer (key: string, perSecond: number): Promise<Buffer>
  exchangepaceRefund (key: string, perSecond: number, run: number, count: number, at: number): Promise<number>
}

/** What a request gets while Redis is unavailable. */
export type RedisUnavailable = 'fallback' | 'open' | 'closed'

export interface RedisStoreOptions {
  /** An ioredis client (`new Redis(...)`, a `Cluster`, or the one @fastify/redis decorates). */
  client: RedisClientLike
  /**
   * Every key starts with it, followed by the pace name (with ':' written %3A and '%' written %25),
   * ':' and the key. Default: 'exchangepace:'.
   */
  prefix?: string | undefined
  /** Longest wait for Redis before a request takes the `whenUnavailable` path, in ms. Default: 50. */
  timeoutMs?: number | undefined
  /**
   * While Redis fails or is slow: 'fallback' (default) paces in this replica's memory, so the rate
   * holds per replica again; 'open' grants without pacing; 'closed' refuses with 429.
   */
  whenUnavailable?: RedisUnavailable | undefined
  /** While unavailable, how often one request tries Redis again, in ms. Default: 1000. */
  retryMs?: number | undefined
}

/** What route descriptions say of each `whenUnavailable` mode. */
const OUTAGE: Record<RedisUnavailable, string> = {
  fallback: 'it holds per replica (each replica paces in its own memory)',
  open: 'requests are not paced',
  closed: 'paced requests are refused with 429'
}

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
  #pace: RedisPace | null
  readonly #local: Reservation | null

  /**
   * `reply`: the reserve script's grant, the units left, the run, the grant's number and its time.
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
  }

  refund (): void {
    const pace = this.#pace
    if (pace === null) return
    this.#pace = null
    this.#local?.refund()
    pace.giveBack(this.redisKey, this.run, this.count, this.at)
  }
}

/** A refusal Redis answered: nothing was taken, so there is nothing to give back. */
function refusedByRedis (retryAfterMs: number): PaceReservation {
  return { granted: false, remaining: 0, retryAfterMs, refund () {} }
}

/** A reservation waiting for Redis: past the store's timeout, its request takes the unavailable path. */
class ReserveWaiting extends Waiting {
  constructor (readonly pace: RedisPace, readonly local: Reservation | null, readonly resolve: (reservation: PaceReservation) => void) {
    super()
  }

  expire (): void {
    this.pace._expired(this.local, this.resolve)
  }
}

/**
 * One pace in Redis. With `whenUnavailable: 'fallback'`, every request is also paced in this
 * replica's memory, and granted only when both grant: first the fallback pace (a refusal there
 * never asks Redis), then Redis (a refusal there gives the fallback's unit back). The fallback
 * therefore holds every unit this replica granted, whichever store answered, and the rate holds
 * per replica at every moment, outages and returns included: a switch to the fallback finds the
 * bucket this replica's own spending left (not a full one), and a return to Redis cannot grant on
 * top of what the fallback granted while Redis did not hear of it. While Redis answers, the
 * fallback refuses only what this replica alone has already spent, so the shared bucket decides
 * (at a bucket's edge the two clocks disagree by how much the time from the memory's reservation
 * to Redis running the script varies: at most `timeoutMs`).
 */
class RedisPace implements SharedPace {
  readonly #store: RedisStore
  readonly #commands: PaceCommands
  readonly #prefix: string
  readonly #perSecond: number
  /** This replica's pace of the name, with `whenUnavailable: 'fallback'`; null with 'open' or 'closed'. */
  readonly #local: Pace | null
  readonly #log: FastifyBaseLogger
  readonly #unavailable: PaceReservation
  readonly #deadlines: Deadlines
  /** In the store's set of paces whose memory may hold rows (see `RedisStore._answered`). */
  #tracked = false

  constructor (store: RedisStore, commands: PaceCommands, prefix: string, perSecond: number, local: Pace | null, log: FastifyBaseLogger) {
    this.#store = store
    this.#commands = commands
    this.#prefix = prefix
    this.#perSecond = perSecond
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
      if (!local.granted) return Promise.resolve(local)
      if (!this.#tracked) {
        this.#tracked = true
        store._track(this)
      }
    }
    if (!store._mayTry()) return Promise.resolve(local ?? this.#unavailable)
    const redisKey = this.#prefix + key
    const outage = store._outage
    return new Promise(resolve => {
      const deadlines = this.#deadlines
      const waiting = new ReserveWaiting(this, local, resolve)
      let answering: Promise<Buffer>
      try {
        answering = this.#commands.exchangepaceReserveBuffer(redisKey, this.#perSecond)
      } catch (err) {
        this.#failed(local, err as Error, resolve)
        return
      }
      deadlines.start(waiting)
      answering.then(reply => {
        const length = Buffer.isBuffer(reply) ? reply.length : -1
        if (length !== GRANT_BYTES && length !== REFUSAL_BYTES) {
          // Another script under this command's name (another version of this store on the same
          // client): the store is unavailable, not the request stuck on a reply it cannot read.
          if (deadlines.answer(waiting)) this.#failed(local, new Error(`the reserve script answered ${length === -1 ? typeof reply : `${length} bytes`}, not a reply this version reads: does another version of exchangepace define its commands on this client?`), resolve)
          return
        }
        if (!deadlines.answer(waiting)) {
          // Too late for its request, which went the unavailable path: give Redis' unit back.
          if (length === GRANT_BYTES) new RedisReservation(this, redisKey, reply, null).refund()
          return
        }
        // The request first: a logger that throws must not leave it waiting.
        if (length === GRANT_BYTES) resolve(new RedisReservation(this, redisKey, reply, local))
        else {
          local?.refund()
          resolve(refusedByRedis(reply.readDoubleLE(0)))
        }
        store._answered(this, outage, this.#log)
      }, (err: Error) => {
        if (deadlines.answer(waiting)) this.#failed(local, err, resolve)
      })
    })
  }

  /** @internal Redis did not answer a reservation within the timeout. */
  _expired (local: Reservation | null, resolve: (reservation: PaceReservation) => void): void {
    this.#failed(local, new Error(`no answer within ${this.#deadlines.timeoutMs} ms`), resolve)
  }

  /**
   * Redis failed, or did not answer in time: the request takes the `whenUnavailable` path (the
   * fallback's grant, when it took one), before the outage is noted and logged (a logger that
   * throws must not leave it waiting).
   */
  #failed (local: Reservation | null, err: Error, resolve: (reservation: PaceReservation) => void): void {
    resolve(local ?? this.#unavailable)
    this.#store._failed(err, this.#log)
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
   * Refunds grant number `count` of the run of `redisKey` that began at `run`, made at `at`, in
   * Redis. Nobody waits for it; a failure (a rejection, or a client that throws, which `reserve`
   * survives too) only leaves it spent.
   */
  giveBack (redisKey: string, run: number, count: number, at: number): void {
    try {
      this.#commands.exchangepaceRefund(redisKey, this.#perSecond, run, count, at).catch((err: Error) => { this.#lost(err) })
    } catch (err) {
      this.#lost(err as Error)
    }
  }

  #lost (err: Error): void {
    this.#log.debug({ err }, 'exchangepace: a refund did not reach Redis; the unit stays spent until it refills')
  }
}

/**
 * A pace shared by every replica through Redis (or Valkey), so the declared rate holds in total.
 * Pass it as the plugin's `store` option. While Redis fails or answers slower than `timeoutMs`, no
 * request fails because of it: by default each replica paces in its own memory (the rate then
 * holds per replica, as without a store), one warning is logged per outage, and one request per
 * `retryMs` tries Redis again until it answers. So that the rate holds per replica across the
 * switches too, that memory also paces every request while Redis answers (see `RedisPace`): it
 * holds a row per key this replica granted within the last second, as the default store does. A
 * unit is always refunded in the stores that granted it.
 */
export class RedisStore implements PaceStore {
  readonly scope = 'shared by all replicas (Redis)'
  readonly outage: string
  readonly prefix: string
  readonly timeoutMs: number
  readonly retryMs: number
  readonly whenUnavailable: RedisUnavailable
  readonly #commands: PaceCommands
  /** @internal The timeout of every reservation waiting for Redis, with one timer. */
  readonly _deadlines: Deadlines
  #unavailable = false
  /** Outages so far: one that began after a request was sent cannot be ended by its answer. */
  #outages = 0
  #triedAt = 0
  /** The paces whose memory may hold rows (with `whenUnavailable: 'fallback'`), and where tidying them goes on. */
  readonly #tracked = new Set<RedisPace>()
  #tidyNext = this.#tracked.values()

  constructor (options: RedisStoreOptions) {
    const { client, prefix = 'exchangepace:', timeoutMs = 50, whenUnavailable = 'fallback', retryMs = 1000 } = options ?? {}
    if (client === null || typeof client !== 'object' || typeof client.defineCommand !== 'function') {
      throw new TypeError('exchangepace: RedisStore client must be an ioredis client (Redis or Cluster)')
    }
    if (typeof prefix !== 'string') throw new TypeError(`exchangepace: RedisStore prefix must be a string, got ${typeof prefix}`)
    // Node's timers hold at most 2^31 - 1 ms; a longer one fires at once.
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMER_MS) throw new TypeError(`exchangepace: RedisStore timeoutMs must be a number > 0 and <= ${MAX_TIMER_MS}, got ${String(timeoutMs)}`)
    if (!Number.isFinite(retryMs) || retryMs <= 0) throw new TypeError(`exchangepace: RedisStore retryMs must be a number > 0, got ${String(retryMs)}`)
    if (whenUnavailable !== 'fallback' && whenUnavailable !== 'open' && whenUnavailable !== 'closed') {
      throw new TypeError(`exchangepace: RedisStore whenUnavailable must be 'fallback', 'open' or 'closed', got ${String(whenUnavailable)}`)
    }
    client.defineCommand('exchangepaceReserve', { numberOfKeys: 1, lua: RESERVE })
    client.defineCommand('exchangepaceRefund', { numberOfKeys: 1, lua: REFUND })
    this.#commands = client as unknown as PaceCommands
    this.prefix = prefix
    this.timeoutMs = timeoutMs
    this._deadlines = new Deadlines(timeoutMs)
    this.retryMs = retryMs
    this.whenUnavailable = whenUnavailable
    this.outage = OUTAGE[whenUnavailable]
  }

  pace (name: string, perSecond: number, local: Pace, log: FastifyBaseLogger): SharedPace {
    if (perSecond > MAX_RATE) {
      throw new TypeError(`exchangepace: RedisStore counts rates up to ${MAX_RATE} per second exactly; pace ${JSON.stringify(name)} declares perSecond ${perSecond}`)
    }
    return new RedisPace(this, this.#commands, `${this.prefix}${keyName(name)}:`, perSecond, this.whenUnavailable === 'fallback' ? local : null, log)
  }

  /** Whether Redis is treated as unavailable (since a failure, until it answers again). */
  get unavailable (): boolean {
    return this.#unavailable
  }

  /** @internal The current outage's number (the last one's while Redis answers). */
  get _outage (): number {
    return this.#outages
  }

  /** @internal Whether a request should ask Redis: always while it answers; once per `retryMs` while not. */
  _mayTry (): boolean {
    if (!this.#unavailable) return true
    const now = performance.now()
    if (now - this.#triedAt < this.retryMs) return false
    this.#triedAt = now
    return true
  }

  /** @internal Redis failed or timed out: warn once per outage. */
  _failed (err: Error, log: FastifyBaseLogger): void {
    this.#triedAt = performance.now()
    if (this.#unavailable) return
    this.#unavailable = true
    this.#outages++
    const fallback = this.whenUnavailable === 'fallback' ? 'pacing per replica in memory' : `failing ${this.whenUnavailable}`
    log.warn({ err }, `exchangepace: Redis store unavailable (${err.message}); ${fallback} until it answers again`)
  }

  /** @internal `pace` granted from its memory, which may now hold rows. */
  _track (pace: RedisPace): void {
    this.#tracked.add(pace)
  }

  /**
   * @internal Redis answered a reservation sent during outage number `sentIn` (or after it, while
   * Redis answered): end the outage when that is the current one. The answer to a reservation sent
   * before it began (in flight when another timed out) ends nothing: with Redis's latency around
   * `timeoutMs`, such answers would end each outage as it began, and retryMs would never hold
   * requests back from a slow Redis.
   *
   * A pace's memory is swept inside its own reserves; one whose routes get no more requests (an
   * app closed while the store lives on included) would keep its rows, so each answer also tidies
   * one tracked pace other than `answered` (whose reserve has just swept it when a sweep was due),
   * in turn, and a pace left with no rows is no longer tracked: the work per answer is the same
   * however many paces the store has had.
   */
  _answered (answered: RedisPace, sentIn: number, log: FastifyBaseLogger): void {
    // Nothing to do when the only tracked pace is `answered`.
    if (this.#tracked.size > (answered._tracked ? 1 : 0)) {
      let next = this.#tidyNext.next()
      if (next.done === true) {
        this.#tidyNext = this.#tracked.values()
        next = this.#tidyNext.next()
      }
      const pace = next.value as RedisPace
      if (pace !== answered && !pace._tidy()) this.#tracked.delete(pace)
    }
    if (!this.#unavailable || sentIn !== this.#outages) return
    this.#unavailable = false
    log.info('exchangepace: Redis store answers again; paces are shared by all replicas again')
  }
}
