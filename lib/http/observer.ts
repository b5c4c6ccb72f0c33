import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { PaceOutcome } from './ticket.js'
import { auditedKey } from '../keys/audited.js'
import type { PaceCounts, PaceKeyName } from '../paces/counts.js'
import type { AuditEntry } from '../store.js'

/**
 * What the plugin tells an operator about its decisions: counts per pace, log lines through the
 * request's logger, and the `onEvent` hook. Nothing here decides anything; the hooks call it where
 * they decide.
 */

/** One decision of a pace, as `onEvent` receives it. */
export interface PaceEvent {
  /**
   * `'refused'`: the pace refused the request (429). `'refunded'`: a unit the request held went
   * back to the pace (its outcome asked for it, or another pace refused the request). `'invalid'`:
   * the request's key for this pace was malformed (400 invalid_request). `'reset'` and
   * `'blocked'`: an operator reset or blocked the key (`fastify.pace.reset`, `block`), with no
   * request. `'shadow-refusal'`: a pace in shadow would have refused the request, which went on.
   * `'near-limit'`: a grant left the pace's `warnAt` share of the key's bucket spent (once per key
   * until its bucket is full again).
   */
  readonly type: 'refused' | 'refunded' | 'invalid' | 'reset' | 'blocked' | 'shadow-refusal' | 'near-limit'
  /** The pace's name (its table in `fastify.pace`). */
  readonly name: string
  readonly keyKind: PaceKeyName
  /**
   * The key: a declared client id, a source, a pair, a custom key, the hash of a device code or
   * bearer token (never the secret); undefined for `'invalid'`.
   */
  readonly key: string | undefined
  /**
   * For `'refunded'`: the exchange's outcome that gave the unit back, or null when the unit went
   * back because the request was refused or malformed. Null otherwise.
   */
  readonly outcome: PaceOutcome | null
  /**
   * For `'refused'` and `'shadow-refusal'`: the exact wait until one unit is back; for `'blocked'`,
   * the block's length; for `'near-limit'`, the time until the bucket is full again; in
   * milliseconds. 0 otherwise.
   */
  readonly retryAfterMs: number
}

/**
 * The `onEvent` hook: each decision, with the request it was made for, or null for an operator's
 * action (`'reset'`, `'blocked'`).
 */
export type PaceEventHook = (event: PaceEvent, request: FastifyRequest | null) => void

/** A unit as the observer needs it: its pace, kind of key and counts. */
export interface Observed {
  readonly name: string
  readonly keyKind: PaceKeyName
  readonly counts: PaceCounts
}

/**
 * One plugin instance's observer. Log levels: a refusal, a shadow refusal, an early warning and a
 * malformed key at info, a refund at
 * debug (every failed exchange has one). A declared client id (alone, in a pair, or a custom key,
 * which may be one) is logged only with `logClientIds`; a source address always, as Fastify's own
 * request log has it (the address of a pair too, as `source`), and so is the hash that keys a
 * device code or a bearer token. A hook that throws is logged once per pace, at error, and ignored.
 */
export class Observer {
  readonly #onEvent: PaceEventHook | undefined
  readonly #logClientIds: boolean
  readonly #log: FastifyBaseLogger
  readonly #failedHooks = new Set<string>()

  constructor (onEvent: PaceEventHook | undefined, logClientIds: boolean, log: FastifyBaseLogger) {
    this.#onEvent = onEvent
    this.#logClientIds = logClientIds
    this.#log = log
  }

  refused (request: FastifyRequest, pace: Observed, key: string, retryAfterMs: number): void {
    pace.counts.refused++
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), source: sourceOf(pace, key), retryAfterMs }, 'exchangepace: refused, the pace is spent')
    this.#emit(request, pace, 'refused', key, null, retryAfterMs)
  }

  /** A pace in shadow would have refused `key`, whose unit is back in `retryAfterMs`; the request goes on. */
  shadowRefused (request: FastifyRequest, pace: Observed, key: string, retryAfterMs: number): void {
    pace.counts.shadowRefused++
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), source: sourceOf(pace, key), retryAfterMs }, 'exchangepace: would refuse (shadow), the pace is spent; the request goes on')
    this.#emit(request, pace, 'shadow-refusal', key, null, retryAfterMs)
  }

  /** A grant left `key` of a pace with `warnAt` that share spent, its bucket full again in `fullInMs`. */
  nearLimit (request: FastifyRequest, pace: Observed, key: string, fullInMs: number): void {
    pace.counts.nearLimit++
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), source: sourceOf(pace, key), fullInMs }, 'exchangepace: near the limit, the key has spent its warnAt share of the pace')
    this.#emit(request, pace, 'near-limit', key, null, fullInMs)
  }

  /** A ticket gave `held` back (the observer is every ticket's refund listener). */
  refunded (request: unknown, held: { readonly bound: Observed, readonly key: string }, outcome: PaceOutcome | null): void {
    const { bound: pace, key } = held
    pace.counts.refunded++
    ;(request as FastifyRequest).log.debug({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), source: sourceOf(pace, key), outcome }, 'exchangepace: unit refunded')
    this.#emit(request as FastifyRequest, pace, 'refunded', key, outcome, 0)
  }

  invalid (request: FastifyRequest, pace: Observed, description: string): void {
    pace.counts.invalid++
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, description }, 'exchangepace: malformed key, answered 400 invalid_request')
    this.#emit(request, pace, 'invalid', undefined, null, 0)
  }

  /**
   * An operator reset or blocked `key` (for `ms`), through `fastify.pace`, as `entry` records it
   * for the audit trail: logged at info with the entry's fields, and told to `onEvent` without a
   * request.
   */
  operated (pace: Observed, key: string, action: 'reset' | 'blocked', ms: number, entry: AuditEntry): void {
    this.#log.info({ pace: pace.name, keyKind: pace.keyKind, key: entry.key, source: sourceOf(pace, key), action, blockedMs: action === 'blocked' ? ms : undefined, by: entry.by, host: entry.host }, `exchangepace: operator ${action === 'reset' ? 'reset' : 'blocked'} a key`)
    this.#emit(null, pace, action, key, null, ms)
  }

  /** The key as the audit trail records it (see `auditedKey`), under this instance's `logClientIds`. */
  audited (pace: Observed, key: string): string {
    return auditedKey(pace.keyKind, key, this.#logClientIds)
  }

  /**
   * The key as a log line may show it: a source, or the hash of a device code or bearer token,
   * always; a client id only when the operator opted in; undefined, which the logger leaves out,
   * otherwise.
   */
  #shown (pace: Observed, key: string): string | undefined {
    if (pace.keyKind === 'source' || pace.keyKind === 'device_code' || pace.keyKind === 'bearer') return key
    if (!this.#logClientIds) return undefined
    return pace.keyKind === 'client+source' ? key.replace('\u001f', ' @ ') : key
  }

  #emit (request: FastifyRequest | null, pace: Observed, type: PaceEvent['type'], key: string | undefined, outcome: PaceOutcome | null, retryAfterMs: number): void {
    const onEvent = this.#onEvent
    if (onEvent === undefined) return
    try {
      onEvent({ type, name: pace.name, keyKind: pace.keyKind, key, outcome, retryAfterMs }, request)
    } catch (err) {
      if (this.#failedHooks.has(pace.name)) return
      this.#failedHooks.add(pace.name)
      this.#log.error({ err, pace: pace.name }, 'exchangepace: onEvent threw; the request goes on, and further throws for this pace are not logged')
    }
  }
}

/**
 * The source address of a pair's key, which every log line of a pair pace carries whatever
 * `logClientIds` says (as Fastify's request line does); undefined for any other kind of key.
 */
function sourceOf (pace: Observed, key: string): string | undefined {
  return pace.keyKind === 'client+source' ? key.slice(key.indexOf('\u001f') + 1) : undefined
}
