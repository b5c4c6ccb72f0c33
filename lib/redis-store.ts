import type { FastifyBaseLogger } from 'fastify'
import type { Pace } from './pace.js'
import type { PaceReservation, PaceStore, SharedPace } from './store.js'

/**
 * The pace in Redis, with the in-process Pace's semantics. A key holds one number: the Redis TIME
 * at which its bucket is full again. No key means a full bucket, and every write sets the key to
 * expire at that moment (PX), so Redis holds only the keys that spent within the last second. Each
 * operation is one script on one key: atomic on the server, no read-then-write from Node, and valid
 * on Redis Cluster. The clock is the server's, so every replica shares it.
 *
 * Time is counted in microticks: one microsecond of TIME is `rate` microticks, so one unit refills
 * in exactly 1e6 microticks and a bucket holds 1e6 x rate, and a debit or a refund adds or
 * subtracts an exact integer (as `Pace` does with its ticks). Readings are taken modulo 2^32
 * microseconds (71 minutes), which keeps every value an exact integer for integer rates up to 2^21
 * per second; a stored time is never more than one second ahead of now (the key expires when it
 * is reached), so its distance to now is read unambiguously from the modular difference. Every
 * number goes to Redis as a string formatted with %d: Redis would format a Lua number argument as
 * a 17-digit double, which costs more than the arithmetic. Lua replies truncate numbers to
 * integers (the reading of the clock goes back truncated, which is how the refund compares it);
 * the wait goes back as a string.
 */
const CLOCK = `
local rate = tonumber(ARGV[1])
local wrap = 4294967296 * rate
local time = redis.call('TIME')
local now = ((time[1] * 1000000 + time[2]) % 4294967296) * rate
`

/**
 * Takes one unit if the bucket holds one. `spent` is how far ahead of now the stored time is (0 for
 * a full bucket or a time already past); the write stores the new time and sets the key to expire
 * at that moment. The scripts are straight-line code (no local functions, which Lua would build on
 * every call) and let Lua's arithmetic read the stored string: bench/instructions.js counts what
 * each line costs Redis.
 */
const RESERVE = `${CLOCK}
local full = redis.call('GET', KEYS[1])
local after = 1000000
if full then
  local spent = (full - now) % wrap
  if spent <= wrap / 2 then after = spent + 1000000 end
end
local shortfall = after - 1000000 * rate
if shortfall > 0.5 then
  return {0, 0, tostring(shortfall / rate / 1000)}
end
redis.call('SET', KEYS[1], string.format('%d', math.floor(now + after + 0.5) % wrap), 'PX', string.format('%d', math.ceil(after / rate / 1000)))
return {1, math.floor((0.5 - shortfall) / 1000000), '0', now}
`

/**
 * Gives one unit back, never past a full bucket: a refund that fills the bucket deletes the key.
 * ARGV[2] is the reservation's own reading of the clock: a unit reserved one horizon (one second)
 * ago or more has refilled already, and giving it back would grant one more than the rate, so such
 * a refund gives nothing, as with the in-process pace.
 */
const REFUND = `
local full = redis.call('GET', KEYS[1])
if not full then return 0 end
${CLOCK}
local age = (now - ARGV[2]) % wrap
if age < wrap / 2 and age + 0.5 >= 1000000 * rate then return 0 end
local spent = (full - now) % wrap
if spent > wrap / 2 then spent = 0 end
local left = spent - 1000000
if left <= 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], string.format('%d', math.floor(now + left + 0.5) % wrap), 'PX', string.format('%d', math.ceil(left / rate / 1000)))
end
return 1
`

/** The part of an ioredis client (`Redis` or `Cluster`) the store uses. */
export interface RedisClientLike {
  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void
}

/** The reserve script's reply: granted with the units left and its reading of the clock, or refused with the wait in ms. */
type ReserveReply = [granted: 1, remaining: number, wait: '0', reservedAt: number] | [refused: 0, remaining: 0, wait: string]

/** The commands `defineCommand` adds (ioredis loads each script once and calls it by SHA). */
interface PaceCommands {
  exchangepaceReserve (key: string, perSecond: number): Promise<ReserveReply>
  exchangepaceRefund (key: string, perSecond: number, reservedAt: number): Promise<number>
}

/** What a request gets while Redis is unavailable. */
export type RedisUnavailable = 'fallback' | 'open' | 'closed'

export interface RedisStoreOptions {
  /** An ioredis client (`new Redis(...)`, a `Cluster`, or the one @fastify/redis decorates). */
  client: RedisClientLike
  /** Every key starts with it, followed by the pace name, ':' and the key. Default: 'exchangepace:'. */
  prefix?: string
  /** Longest wait for Redis before a request takes the `whenUnavailable` path, in ms. Default: 50. */
  timeoutMs?: number
  /**
   * While Redis fails or is slow: 'fallback' (default) paces in this replica's memory, so the rate
   * holds per replica again; 'open' grants without pacing; 'closed' refuses with 429.
   */
  whenUnavailable?: RedisUnavailable
  /** While unavailable, how often one request tries Redis again, in ms. Default: 1000. */
  retryMs?: number
}

/** What route descriptions say of each `whenUnavailable` mode. */
const OUTAGE: Record<RedisUnavailable, string> = {
  fallback: 'it holds per replica (each replica paces in its own memory)',
  open: 'requests are not paced',
  closed: 'paced requests are refused with 429'
}

const OPEN: PaceReservation = Object.freeze({ granted: true, remaining: 0, retryAfterMs: 0, refund () {} })

/** A unit Redis granted: refunded in Redis, once, without waiting for the answer. */
class RedisReservation implements PaceReservation {
  readonly granted = true
  readonly remaining: number
  readonly retryAfterMs = 0
  #pace: RedisPace | null

  /** `reservedAt` is the reserve script's reading of Redis TIME, in the scripts' microticks. */
  constructor (pace: RedisPace, readonly redisKey: string, remaining: number, readonly reservedAt: number) {
    this.#pace = pace
    this.remaining = remaining
  }

  refund (): void {
    const pace = this.#pace
    if (pace === null) return
    this.#pace = null
    pace.giveBack(this.redisKey, this.reservedAt)
  }
}

const REFUSED_BY_REDIS = (retryAfterMs: number): PaceReservation =>
  ({ granted: false, remaining: 0, retryAfterMs, refund () {} })

class RedisPace implements SharedPace {
  readonly #store: RedisStore
  readonly #commands: PaceCommands
  readonly #prefix: string
  readonly #perSecond: number
  readonly #local: Pace
  readonly #log: FastifyBaseLogger
  readonly #closed: PaceReservation

  constructor (store: RedisStore, commands: PaceCommands, prefix: string, perSecond: number, local: Pace, log: FastifyBaseLogger) {
    this.#store = store
    this.#commands = commands
    this.#prefix = prefix
    this.#perSecond = perSecond
    this.#local = local
    this.#log = log
    this.#closed = Object.freeze({ granted: false, remaining: 0, retryAfterMs: store.retryMs, refund () {} })
  }

  reserve (key: string): Promise<PaceReservation> {
    if (!this.#store._mayTry()) return Promise.resolve(this.#unavailable(key))
    const redisKey = this.#prefix + key
    return new Promise(resolve => {
      let answered = false
      const timer = setTimeout(() => {
        answered = true
        this.#store._failed(new Error(`no answer within ${this.#store.timeoutMs} ms`), this.#log)
        resolve(this.#unavailable(key))
      }, this.#store.timeoutMs)
      this.#commands.exchangepaceReserve(redisKey, this.#perSecond).then(reply => {
        if (answered) {
          // Too late for its request, which went the unavailable path: give the unit back.
          if (reply[0] === 1) this.giveBack(redisKey, reply[3])
          return
        }
        answered = true
        clearTimeout(timer)
        this.#store._answered(this.#log)
        resolve(reply[0] === 1 ? new RedisReservation(this, redisKey, reply[1], reply[3]) : REFUSED_BY_REDIS(Number(reply[2])))
      }, (err: Error) => {
        if (answered) return
        answered = true
        clearTimeout(timer)
        this.#store._failed(err, this.#log)
        resolve(this.#unavailable(key))
      })
    })
  }

  /**
   * Refunds one unit of `redisKey`, reserved at `reservedAt`, in Redis. Nobody waits for it; a
   * failure only leaves it spent.
   */
  giveBack (redisKey: string, reservedAt: number): void {
    this.#commands.exchangepaceRefund(redisKey, this.#perSecond, reservedAt).catch((err: Error) => {
      this.#log.debug({ err }, 'exchangepace: a refund did not reach Redis; the unit stays spent until it refills')
    })
  }

  #unavailable (key: string): PaceReservation {
    const mode = this.#store.whenUnavailable
    if (mode === 'fallback') return this.#local.reserve(key)
    return mode === 'open' ? OPEN : this.#closed
  }
}

/**
 * A pace shared by every replica through Redis (or Valkey), so the declared rate holds in total.
 * Pass it as the plugin's `store` option. While Redis fails or answers slower than `timeoutMs`, no
 * request fails because of it: by default each replica paces in its own memory (the rate then
 * holds per replica, as without a store), one warning is logged per outage, and one request per
 * `retryMs` tries Redis again until it answers. A unit is always refunded in the store that
 * granted it.
 */
export class RedisStore implements PaceStore {
  readonly scope = 'shared by all replicas (Redis)'
  readonly outage: string
  readonly prefix: string
  readonly timeoutMs: number
  readonly retryMs: number
  readonly whenUnavailable: RedisUnavailable
  readonly #commands: PaceCommands
  #unavailable = false
  #triedAt = 0

  constructor (options: RedisStoreOptions) {
    const { client, prefix = 'exchangepace:', timeoutMs = 50, whenUnavailable = 'fallback', retryMs = 1000 } = options ?? {}
    if (client === null || typeof client !== 'object' || typeof client.defineCommand !== 'function') {
      throw new TypeError('exchangepace: RedisStore client must be an ioredis client (Redis or Cluster)')
    }
    if (typeof prefix !== 'string') throw new TypeError(`exchangepace: RedisStore prefix must be a string, got ${typeof prefix}`)
    if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new TypeError(`exchangepace: RedisStore timeoutMs must be a number > 0, got ${String(timeoutMs)}`)
    if (!Number.isFinite(retryMs) || retryMs <= 0) throw new TypeError(`exchangepace: RedisStore retryMs must be a number > 0, got ${String(retryMs)}`)
    if (whenUnavailable !== 'fallback' && whenUnavailable !== 'open' && whenUnavailable !== 'closed') {
      throw new TypeError(`exchangepace: RedisStore whenUnavailable must be 'fallback', 'open' or 'closed', got ${String(whenUnavailable)}`)
    }
    client.defineCommand('exchangepaceReserve', { numberOfKeys: 1, lua: RESERVE })
    client.defineCommand('exchangepaceRefund', { numberOfKeys: 1, lua: REFUND })
    this.#commands = client as unknown as PaceCommands
    this.prefix = prefix
    this.timeoutMs = timeoutMs
    this.retryMs = retryMs
    this.whenUnavailable = whenUnavailable
    this.outage = OUTAGE[whenUnavailable]
  }

  pace (name: string, perSecond: number, local: Pace, log: FastifyBaseLogger): SharedPace {
    return new RedisPace(this, this.#commands, `${this.prefix}${name}:`, perSecond, local, log)
  }

  /** Whether Redis is treated as unavailable (since a failure, until it answers again). */
  get unavailable (): boolean {
    return this.#unavailable
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
    const fallback = this.whenUnavailable === 'fallback' ? 'pacing per replica in memory' : `failing ${this.whenUnavailable}`
    log.warn({ err }, `exchangepace: Redis store unavailable (${err.message}); ${fallback} until it answers again`)
  }

  /** @internal Redis answered: end the outage, if there was one. */
  _answered (log: FastifyBaseLogger): void {
    if (!this.#unavailable) return
    this.#unavailable = false
    log.info('exchangepace: Redis store answers again; paces are shared by all replicas again')
  }
}
