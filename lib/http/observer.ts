import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { PaceOutcome } from './ticket.js'
import type { PaceCounts, PaceKeyName } from '../paces/counts.js'

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
   * request.
   */
  readonly type: 'refused' | 'refunded' | 'invalid' | 'reset' | 'blocked'
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
  /** For `'refused'`: the exact wait until one unit is back; for `'blocked'`, the block's length; in milliseconds. 0 otherwise. */
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
 * One plugin instance's observer. Log levels: a refusal and a malformed key at info, a refund at
 * debug (every failed exchange has one). A declared client id (alone, in a pair, or a custom key,
 * which may be one) is logged only with `logClientIds`; a source address always, as Fastify's own
 * request log has it, and so is the hash that keys a device code or a bearer token. A hook that throws is logged once per pace, at error, and ignored.
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
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), retryAfterMs }, 'exchangepace: refused, the pace is spent')
    this.#emit(request, pace, 'refused', key, null, retryAfterMs)
  }

  /** A ticket gave `held` back (the observer is every ticket's refund listener). */
  refunded (request: unknown, held: { readonly bound: Observed, readonly key: string }, outcome: PaceOutcome | null): void {
    const { bound: pace, key } = held
    pace.counts.refunded++
    ;(request as FastifyRequest).log.debug({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), outcome }, 'exchangepace: unit refunded')
    this.#emit(request as FastifyRequest, pace, 'refunded', key, outcome, 0)
  }

  invalid (request: FastifyRequest, pace: Observed, description: string): void {
    pace.counts.invalid++
    request.log.info({ pace: pace.name, keyKind: pace.keyKind, description }, 'exchangepace: malformed key, answered 400 invalid_request')
    this.#emit(request, pace, 'invalid', undefined, null, 0)
  }

  /** An operator reset or blocked `key` (for `ms`), through `fastify.pace`: logged at info, and told to `onEvent` without a request. */
  operated (pace: Observed, key: string, action: 'reset' | 'blocked', ms: number): void {
    this.#log.info({ pace: pace.name, keyKind: pace.keyKind, key: this.#shown(pace, key), action, blockedMs: action === 'blocked' ? ms : undefined }, `exchangepace: operator ${action === 'reset' ? 'reset' : 'blocked'} a key`)
    this.#emit(null, pace, action, key, null, ms)
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
