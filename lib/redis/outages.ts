/**
 * When a RedisStore counts Redis as unavailable, one master at a time: a failure of a key's
 * request starts an outage of the master serving the key's slot, and only that master's keys take
 * the `whenUnavailable` path until Redis answers a reservation of one of them (the master itself,
 * or the one its slots moved to, as a Cluster's failover moves them to a promoted replica). A
 * client with one server has one master.
 */
import { keySlot } from './key-slot.js'
import type { PaceLog } from '../store.js'

/** What a request gets while Redis is unavailable. */
export type RedisUnavailable = 'fallback' | 'open' | 'closed'

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

/** Whether `err` is a Cluster's redirection: the command did not run, and another node would run it. */
export function isRedirection (err: Error): boolean {
  return REDIRECTED.test(err.message)
}

/**
 * ioredis 5's refusal of an auto-pipelined batch whose keys the slot map, read again when the
 * batch is sent, no longer puts on one node (it changed since the batch was queued): nothing was
 * sent.
 */
const REGROUPED = 'All keys in the pipeline should belong to the same slots allocation group'

/** Whether `err` says the command did not run and would run if sent again on its own: a redirection, or a batch ioredis would not send. */
export function isResendable (err: Error): boolean {
  return isRedirection(err) || err.message === REGROUPED
}

/** How often, at most, requests decided in memory outside any outage are warned of: once a minute. */
const STRAY_WARN_MS = 60_000

/** One master's outage. */
interface Outage {
  /** Its number among the store's outages: an answer to a request sent before it began ends nothing. */
  readonly number: number
  /**
   * The slots the master served when it began (1 for each), on a Cluster whose map named it; null
   * for a client with one server, or a map that named no master: every key is its key.
   */
  readonly owned: Uint8Array | null
  /** When it began (performance.now()). */
  readonly began: number
  /** When a request last tried this master, or failed on it (performance.now()). */
  triedAt: number
  /** Requests for its keys decided without Redis's answer since it began: this replica's memory (or 'open'/'closed') decided them alone. */
  alone: number
  /** The logger that warned of it, which says when it ends. */
  readonly log: PaceLog
}

/**
 * The outages of a store's masters. Invariants: `#down` is the number of masters in outage, and
 * while it is 0 (Redis answers) deciding whether to ask Redis is that one comparison, with no slot
 * computed; each master in outage warns once when its outage begins and says once, at info, when
 * it ends, which is only when Redis answered a reservation of one of its keys (from it, or from the
 * master its slots moved to: a map that names another master proves nothing until that master
 * answers); while it lasts, one request per `retryMs` for the keys it still serves asks it again.
 * Every request decided without Redis's answer is counted: in its master's outage, said when the
 * outage ends, or, outside any outage (a redirection the client handed back instead of following),
 * in a warning at most once a minute.
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
  /** Requests decided in memory outside any outage since the latest such warning, and when it was. */
  #stray = 0
  #strayWarnedAt = -Infinity

  constructor (client: SlotMap, retryMs: number, mode: RedisUnavailable) {
    this.#retryMs = retryMs
    this.#mode = mode
    this.#map = client.isCluster === true ? client as ClusterSlots : null
  }

  /** Whether any master is in outage (until Redis answered for its keys). */
  get any (): boolean {
    return this.#down > 0
  }

  /** The number of the latest outage begun (0 before any): what a request sent now carries. */
  get begun (): number {
    return this.#begun
  }

  /**
   * Whether a request for `key` should ask Redis: always while its master answers; once per
   * `retryMs` while not. A request held back is decided without Redis, and counted in the outage.
   */
  mayTry (key: string): boolean {
    if (this.#down === 0) return true
    const outage = this.#byMaster.get(this.#masterOf(this.#slotOf(key)))
    if (outage === undefined) return true
    const now = performance.now()
    if (now - outage.triedAt < this.#retryMs) {
      outage.alone++
      return false
    }
    outage.triedAt = now
    return true
  }

  /**
   * A request for `key` failed, or timed out, and was decided without Redis: its master is in
   * outage, which warns when it begins. A redirection is no outage (the cluster answered; the
   * client's map is behind): the store resends such a request as a command of its own, which
   * ioredis follows; one that reaches here all the same (the client did not follow it) is counted
   * as decided outside any outage.
   */
  failed (key: string, err: Error, log: PaceLog): void {
    if (isRedirection(err)) {
      this.#strayed(err, log)
      return
    }
    const master = this.#masterOf(this.#slotOf(key))
    const now = performance.now()
    const outage = this.#byMaster.get(master)
    if (outage !== undefined) {
      outage.triedAt = now
      outage.alone++
      return
    }
    this.#byMaster.set(master, { number: ++this.#begun, owned: this.#ownedBy(master), began: now, triedAt: now, alone: 1, log })
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
   * outage of the master serving the key ends if it began no later, and so does that of a master
   * that served the key's slot when its outage began (its slots moved: a failover, a resharding).
   * An answer to a request sent before (in flight when another timed out) ends nothing: with
   * Redis's latency around `timeoutMs`, such answers would end each outage as it began, and
   * `retryMs` would never hold requests back.
   */
  answered (key: string, sentIn: number): void {
    if (this.#down === 0) return
    const slot = this.#slotOf(key)
    const current = this.#masterOf(slot)
    for (const [master, outage] of this.#byMaster) {
      if (sentIn < outage.number || (master !== current && outage.owned !== null && outage.owned[slot] === 0)) continue
      const said = master === current
        ? (master === '' ? 'Redis store answers again; paces are shared by all replicas again' : `${label(master)} answers again; its keys are shared by all replicas again`)
        : `${label(master)} no longer serves its keys (${current === '' ? 'another master' : current} answered for them); they are shared by all replicas again`
      this.#end(master, outage, said)
    }
  }

  #slotOf (key: string): number {
    return this.#map === null ? 0 : keySlot(key)
  }

  #masterOf (slot: number): string {
    return this.#map?.slots[slot]?.[0] ?? ''
  }

  /** The slots `master` serves now, by the map; null without a map, or for the master the map does not name (''). */
  #ownedBy (master: string): Uint8Array | null {
    if (this.#map === null || master === '') return null
    const owned = new Uint8Array(16384)
    const slots = this.#map.slots
    for (let slot = 0; slot < 16384; slot++) if (slots[slot]?.[0] === master) owned[slot] = 1
    return owned
  }

  #end (master: string, outage: Outage, said: string): void {
    this.#byMaster.delete(master)
    this.#down--
    const outageMs = Math.round(performance.now() - outage.began)
    const message = `exchangepace: ${said} (after ${(outageMs / 1000).toFixed(1)} s, in which this replica decided ${outage.alone} ${outage.alone === 1 ? 'request' : 'requests'} for them without Redis)`
    if (master === '') outage.log.info({ outageMs, decidedAlone: outage.alone }, message)
    else outage.log.info({ master, outageMs, decidedAlone: outage.alone }, message)
  }

  /** A request decided without Redis outside any outage: counted, and warned of at most once a minute, with the count since the last warning. */
  #strayed (err: Error, log: PaceLog): void {
    this.#stray++
    const now = performance.now()
    if (now - this.#strayWarnedAt < STRAY_WARN_MS) return
    const count = this.#stray
    this.#stray = 0
    this.#strayWarnedAt = now
    const path = this.#mode === 'fallback' ? 'paced in this replica\'s memory' : `failed ${this.#mode}`
    log.warn({ err, decidedAlone: count }, `exchangepace: ${count} ${count === 1 ? 'request' : 'requests'} ${path} though Redis answered: the client handed back a redirection (${err.message}) instead of following it, so their keys were not shared (counted since the previous such warning; one a minute at most)`)
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
