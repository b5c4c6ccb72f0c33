import { appendAudit, readAudit, type AuditClient } from './audit.js'
import { BlockNews } from './block-news.js'
import { readCatalog, writeCatalog, type CatalogClient } from './catalog.js'
import { Deadlines } from './deadlines.js'
import type { Pace } from '../bucket/pace.js'
import { Outages, type RedisUnavailable, type SlotMap } from './outages.js'
import { RedisPace } from './pace.js'
import { Refunds } from './refunds.js'
import { defineCommands, redisPaceName, scriptWindow, type PaceCommands, type RedisClientLike } from './scripts.js'
import type { AuditEntry, PaceBucket, PaceCatalogEntry, PaceStore, SharedPace, StoredBucket, PaceLog } from '../store.js'

export type { RedisClientLike } from './scripts.js'

const MAX_TIMER_MS = 2 ** 31 - 1

export interface RedisStoreOptions {
  /** An ioredis client (`new Redis(...)`, a `Cluster`, or the one @fastify/redis decorates). */
  client: RedisClientLike
  /**
   * Every key starts with it, followed by the pace name (with ':' written %3A and '%' written %25),
   * ':' and the key. Default: 'exchangepace:'.
   */
  prefix?: string | undefined
  /** Longest wait for Redis before a request takes the `whenUnavailable` path, in ms. Default: 250 (docs/stores.md gives the measurement). */
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

/**
 * A pace shared by every replica through Redis (or Valkey), so the declared rate holds in total.
 * Pass it as the plugin's `store` option. While Redis fails or answers slower than `timeoutMs`, no
 * request fails because of it: by default each replica paces in its own memory (the rate then
 * holds per replica, as without a store), one warning is logged per outage, and one request per
 * `retryMs` tries Redis again until it answers. So that the rate holds per replica across the
 * switches too, that memory also paces every request while Redis answers (see `RedisPace`): it
 * holds a row per key this replica granted within the last window, as the default store does. A
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
  readonly #client: RedisClientLike
  /** @internal The timeout of every reservation waiting for Redis, with one timer. */
  readonly _deadlines: Deadlines
  /** @internal The refunds not yet sent, which every command on a row waits behind (refunds.ts). */
  readonly _refunds = new Refunds()
  /** Which masters are unavailable (one, for a client with one server), and when to try them again. */
  readonly #outages: Outages
  /** The blocks this replica heard of, and how it hears of them. */
  readonly #news: BlockNews
  /** The paces whose memory may hold rows (with `whenUnavailable: 'fallback'`), and where tidying them goes on. */
  readonly #tracked = new Set<RedisPace>()
  #tidyNext = this.#tracked.values()

  constructor (options: RedisStoreOptions) {
    const { client, prefix = 'exchangepace:', timeoutMs = 250, whenUnavailable = 'fallback', retryMs = 1000 } = options ?? {}
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
    this.#commands = defineCommands(client)
    this.#client = client
    this.prefix = prefix
    this.timeoutMs = timeoutMs
    this._deadlines = new Deadlines(timeoutMs)
    this.retryMs = retryMs
    this.whenUnavailable = whenUnavailable
    this.outage = OUTAGE[whenUnavailable]
    this.#outages = new Outages(client as SlotMap, retryMs, whenUnavailable)
    this.#news = new BlockNews(client, prefix)
  }

  pace (name: string, rate: PaceBucket, local: Pace, log: PaceLog): SharedPace {
    const windowMs = scriptWindow(name, rate)
    const fallback = this.whenUnavailable === 'fallback' ? local : null
    this.#news.register(redisPaceName(name), fallback, log)
    return new RedisPace(this, this.#commands, this.#key(name, ''), rate.limit, windowMs, fallback, log)
  }

  async inspect (name: string, key: string): Promise<StoredBucket> {
    this._refunds.flush()
    return storedBucket(await this.#commands.exchangepaceInspectBuffer(this.#key(name, key)))
  }

  /**
   * SCANs every master (the one server of a plain client) for the keys of the pace `name` that
   * start with `keyPrefix`, a page of up to 1000 at a time, and inspects each page's keys at once
   * before it asks for the next: the work is spread in pages, never one long command.
   */
  async scan (name: string, keyPrefix: string, visit: (key: string, bucket: StoredBucket) => void): Promise<void> {
    const base = this.#key(name, '')
    const match = `${globEscaped(base + keyPrefix)}*`
    const client = this.#client as unknown as ScanningClient
    const servers = client.isCluster === true ? client.nodes('master') : [client]
    for (const server of servers) {
      let cursor = '0'
      do {
        const [next, keys] = await server.scan(cursor, 'MATCH', match, 'COUNT', 1000)
        cursor = next
        this._refunds.flush()
        const buckets = await Promise.all(keys.map(redisKey => this.#commands.exchangepaceInspectBuffer(redisKey)))
        keys.forEach((redisKey, i) => { visit(redisKey.slice(base.length), storedBucket(buckets[i])) })
      } while (cursor !== '0')
    }
  }

  /** Writes the app's paces to the catalog (`prefix + 'catalog'`), which the CLI checks its commands against. */
  async record (paces: readonly PaceCatalogEntry[]): Promise<void> {
    await writeCatalog(this.#client as unknown as CatalogClient, this.prefix, paces)
  }

  /** The paces the apps on this store recorded, by name (empty when none did). */
  async catalog (): Promise<PaceCatalogEntry[]> {
    return await readCatalog(this.#client as unknown as CatalogClient, this.prefix)
  }

  /** Appends `entry` to the audit trail, the stream `prefix + 'audit'`, capped at about 10000 entries. */
  async audit (entry: AuditEntry): Promise<void> {
    await appendAudit(this.#client as unknown as AuditClient, this.prefix, entry)
  }

  /** The latest `count` entries of the audit trail, newest first. */
  async auditTrail (count: number): Promise<AuditEntry[]> {
    return await readAudit(this.#client as unknown as AuditClient, this.prefix, count)
  }

  /** Also lifts the block in this replica's memory, and announces the reset to every replica (see `BlockNews`). */
  async reset (name: string, key: string): Promise<void> {
    const member = `${redisPaceName(name)}:${key}`
    this._refunds.flush()
    await this.#commands.exchangepaceReset(this.prefix + member)
    this.#news.reset(member)
    try {
      await this.#news.announce(member, 0)
    } catch (err) {
      throw new Error(`exchangepace: the key is reset in Redis, but telling the replicas failed (${(err as Error).message}); each follows at its next request for the key while Redis answers`, { cause: err })
    }
  }

  /** Also blocks the key in this replica's memory, and announces the block to every replica (see `BlockNews`). */
  async block (name: string, key: string, ms: number): Promise<Date> {
    const member = `${redisPaceName(name)}:${key}`
    const whole = Math.ceil(ms)
    this._refunds.flush()
    const reply = await this.#commands.exchangepaceBlockBuffer(this.prefix + member, whole)
    this.#news.block(member, whole)
    try {
      await this.#news.announce(member, whole)
    } catch (err) {
      throw new Error(`exchangepace: the key is blocked in Redis, but telling the replicas failed (${(err as Error).message}); while Redis answers every replica refuses it, and one that loses Redis before reading the blocks in force admits it: block it again`, { cause: err })
    }
    return new Date(reply.readDoubleLE(0))
  }

  /** The Redis key of `key` in the pace `name`'s table. */
  #key (name: string, key: string): string {
    return `${this.prefix}${redisPaceName(name)}:${key}`
  }

  /**
   * Whether Redis is treated as unavailable (since a failure, until it answers again): on a
   * Cluster, whether any master is.
   */
  get unavailable (): boolean {
    return this.#outages.any
  }

  /** @internal The latest outage's number, which a request sent now carries (see `Outages.answered`). */
  get _outage (): number {
    return this.#outages.begun
  }

  /** @internal Whether a request for `redisKey` should ask Redis: always while its master answers; once per `retryMs` while not. */
  _mayTry (redisKey: string): boolean {
    return this.#outages.mayTry(redisKey)
  }

  /** @internal Milliseconds left of the block of `redisKey` this replica heard of; 0 when none (read only while Redis is unavailable). */
  _blockedMs (redisKey: string): number {
    return this.#news.blockedMs(redisKey.slice(this.prefix.length))
  }

  /** @internal A request for `redisKey` failed or timed out: its master is unavailable, with one warning per outage. */
  _failed (redisKey: string, err: Error, log: PaceLog): void {
    this.#outages.failed(redisKey, err, log)
  }

  /** @internal `pace` granted from its memory, which may now hold rows. */
  _track (pace: RedisPace): void {
    this.#tracked.add(pace)
  }

  /**
   * @internal Redis answered a reservation for `redisKey` sent when outage number `sentIn` was the
   * latest: the outage of its master ends, unless it began after the request was sent (see
   * `Outages.answered`).
   *
   * A pace's memory is swept inside its own reserves; one whose routes get no more requests (an
   * app closed while the store lives on included) would keep its rows, so each answer also tidies
   * one tracked pace other than `answered` (whose reserve has just swept it when a sweep was due),
   * in turn, and a pace left with no rows is no longer tracked: the work per answer is the same
   * however many paces the store has had.
   */
  _answered (answered: RedisPace, redisKey: string, sentIn: number): void {
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
    this.#outages.answered(redisKey, sentIn)
  }
}

/** A client as `scan` reads it: a server's SCAN, and a Cluster's masters. */
interface ScanningClient {
  readonly isCluster?: boolean
  nodes: (role: 'master') => ScanningClient[]
  scan: (cursor: string, ...options: Array<string | number>) => Promise<[string, string[]]>
}

/** The inspect script's reply, read. */
function storedBucket (reply: Buffer): StoredBucket {
  const [fullInMs, ending, nowMs, limit, windowMs] = [0, 8, 16, 24, 32].map(at => reply.readDoubleLE(at))
  const blockedMs = Math.max(0, ending - nowMs)
  return {
    spentMs: fullInMs,
    blockedMs,
    blockedUntil: blockedMs > 0 ? new Date(ending) : null,
    limit: limit === 0 ? null : limit,
    windowMs: windowMs === 0 ? null : windowMs
  }
}

/** `text` as a SCAN pattern that matches it alone: the glob's special characters escaped. */
function globEscaped (text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&')
}
