/**
 * When a RedisStore counts Redis as unavailable, one master at a time: a failure of a key's
 * request starts an outage of the master serving the key's slot, and only that master's keys take
 * the `whenUnavailable` path until it answers again (or its slots move to another master, as a
 * Cluster's failover moves them to a promoted replica). A client with one server has one master.
 */
import type { FastifyBaseLogger } from 'fastify'
import { keySlot } from './key-slot.js'
import type { RedisUnavailable } from './store.js'

/**
 * What the store reads of an ioredis client to tell masters apart: a `Cluster` has `isCluster`
 * set and keeps `slots`, each slot's addresses (`host:port`), master first, refreshed by ioredis
 * on a MOVED redirection and when the topology changes. Read only on the outage path.
 */
export interface SlotMap {
  readonly isCluster?: boolean
  readonly slots?: ReadonlyArray<readonly string[] | undefined>
}

/** A Cluster's slot map (ioredis 5 and 6 keep it so). */
type ClusterSlots = Required<SlotMap>

/** A Cluster's answer that the key's slot is served elsewhere (MOVED) or being moved there (ASK). */
const REDIRECTED = /^(?:MOVED|ASK) /

/** One master's outage. */
interface Outage {
  /** Its number among the store's outages: an answer to a request sent before it began ends nothing. */
  readonly number: number
  /** The slot of the key whose failure began it: once another master serves that slot, the outage is over. */
  readonly slot: number
  /** When a request last tried this master, or failed on it (performance.now()). */
  triedAt: number
  /** The logger that warned of it, which says when it ends. */
  readonly log: FastifyBaseLogger
}

/**
 * The outages of a store's masters. Invariants: `#down` is the number of masters in outage, and
 * while it is 0 (Redis answers) deciding whether to ask Redis is that one comparison, with no slot
 * computed; each master in outage warns once when its outage begins and says once, at info, when
 * it ends; while it lasts, one request per `retryMs` for its keys asks it again.
 */
export class Outages {
  readonly #retryMs: number
  readonly #mode: RedisUnavailable
  /** The client's slot map, or null for a client with one server (one master, named ''). */
  readonly #map: ClusterSlots | null
  readonly #byMaster = new Map<string, Outage>()
  #down = 0
  /** Outages begun so far. */
  #begun = 0

  constructor (client: SlotMap, retryMs: number, mode: RedisUnavailable) {
    this.#retryMs = retryMs
    this.#mode = mode
    this.#map = client.isCluster === true ? client as ClusterSlots : null
  }

  /** Whether any master is in outage. */
  get any (): boolean {
    return this.#down > 0
  }

  /** The number of the latest outage begun (0 before any): what a request sent now carries. */
  get begun (): number {
    return this.#begun
  }

  /** Whether a request for `key` should ask Redis: always while its master answers; once per `retryMs` while not. */
  mayTry (key: string): boolean {
    if (this.#down === 0) return true
    this.#endMoved()
    const outage = this.#byMaster.get(this.#masterOf(this.#slotOf(key)))
    if (outage === undefined) return true
    const now = performance.now()
    if (now - outage.triedAt < this.#retryMs) return false
    outage.triedAt = now
    return true
  }

  /**
   * A request for `key` failed, or timed out: its master is in outage, which warns when it begins.
   * A redirection the client passed on instead of following is no outage: ioredis does so for a
   * command of an auto-pipelined batch whose other commands were answered (a failover moving the
   * slots mid-batch), and has read the new master from it; the next request goes there.
   */
  failed (key: string, err: Error, log: FastifyBaseLogger): void {
    if (REDIRECTED.test(err.message)) return
    const slot = this.#slotOf(key)
    const master = this.#masterOf(slot)
    const now = performance.now()
    const outage = this.#byMaster.get(master)
    if (outage !== undefined) {
      outage.triedAt = now
      return
    }
    this.#byMaster.set(master, { number: ++this.#begun, slot, triedAt: now, log })
    this.#down++
    const mode = this.#mode
    const cluster = master !== ''
    const path = mode === 'fallback'
      ? `pacing ${cluster ? 'its keys ' : ''}per replica in memory`
      : `failing ${mode}${cluster ? ' for its keys' : ''}`
    if (deniedByAcl(err.message)) {
      log.error(cluster ? { err, master } : { err }, `exchangepace: ${label(master)} denies the RedisStore's user a command (${err.message}): a permission is missing, not the server; ${path} until it is granted (docs/stores.md gives the ACL SETUSER line)`)
    } else {
      log.warn(cluster ? { err, master } : { err }, `exchangepace: ${label(master)} unavailable (${err.message}); ${path} until it answers again`)
    }
  }

  /**
   * Redis answered a request for `key` sent when outage number `sentIn` was the latest begun: the
   * outage of the key's master ends if it began no later. An answer to a request sent before
   * (in flight when another timed out) ends nothing: with Redis's latency around `timeoutMs`, such
   * answers would end each outage as it began, and `retryMs` would never hold requests back.
   */
  answered (key: string, sentIn: number): void {
    if (this.#down === 0) return
    this.#endMoved()
    const master = this.#masterOf(this.#slotOf(key))
    const outage = this.#byMaster.get(master)
    if (outage === undefined || sentIn < outage.number) return
    this.#end(master, outage, master === ''
      ? 'exchangepace: Redis store answers again; paces are shared by all replicas again'
      : `exchangepace: Redis master ${master} answers again; its keys are shared by all replicas again`)
  }

  #slotOf (key: string): number {
    return this.#map === null ? 0 : keySlot(key)
  }

  #masterOf (slot: number): string {
    return this.#map?.slots[slot]?.[0] ?? ''
  }

  /**
   * Ends the outage of each master that no longer serves the slot it failed on: the cluster moved
   * its slots (a replica promoted in its place), whose keys now go to a master that has not
   * failed. A client with one server never moves a slot.
   */
  #endMoved (): void {
    if (this.#map === null) return
    for (const [master, outage] of this.#byMaster) {
      const now = this.#masterOf(outage.slot)
      if (now !== master) this.#end(master, outage, `exchangepace: ${label(master)} no longer serves its keys (${now === '' ? 'no master' : now} does); they are shared by all replicas again`)
    }
  }

  #end (master: string, outage: Outage, message: string): void {
    this.#byMaster.delete(master)
    this.#down--
    if (master === '') outage.log.info(message)
    else outage.log.info({ master }, message)
  }
}

/** How log lines name a master: by its address in a cluster whose slot map names it. */
function label (master: string): string {
  return master === '' ? 'Redis store' : `Redis master ${master}`
}

/**
 * Whether Redis's error `message` is its ACL denying the user a command, a key or a channel: a
 * NOPERM reply, or the error a script gets for a command it may not call.
 */
export function deniedByAcl (message: string): boolean {
  return message.includes('NOPERM') || message.includes('user executing the script can')
}
