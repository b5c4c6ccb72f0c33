import { bucketState } from '../bucket/state.js'
import type { AuditEntry, StoredBucket } from '../store.js'
import type { CliKeyCommand } from './cli-args.js'
import type { PaceCatalogEntry } from '../store.js'
import type { PaceWho } from '../paces/who.js'

/**
 * What the CLI prints of a key's row in Redis, as text for a person or as JSON for a script. A row
 * carries the rate and window it was written at, so a spent bucket is read with its own rate; a
 * full bucket has no row, and the pace's declared rate lives in the app, not in Redis: that is
 * said, never guessed.
 */

/** Said of a key without a row: what Redis cannot tell. */
export const NO_ROW = 'full (no row in Redis); the pace\'s declared rate is not stored there, so how many units it holds is not known from here'

/** Said with NO_ROW without a catalog: a misspelt pace name or key reads as full too. */
const NAMES_NOT_STORED = 'No app recorded a catalog of its paces under this prefix, so the pace name is not checked: if a row was expected, check --pace against the app\'s fastify.pace.names(), the parts, and --prefix.'

/** Said with NO_ROW when the catalog knows the pace: the parts may still be wrong. */
const NAME_CATALOGUED = 'The app\'s catalog declares this pace: if a row was expected, check the parts.'

/** A key's row as both outputs state it: waits in whole ms (rounded up), a block's end by Redis's clock. */
export interface RowReport {
  readonly state: 'full' | 'spent' | 'blocked'
  readonly remaining: number | null
  readonly retryAfterMs: number
  readonly fullInMs: number
  readonly blockedUntil: Date | null
  readonly limit: number | null
  readonly windowMs: number | null
}

/** The row `stored` read with its own rate; a block refuses until its end, then the bucket is full. */
export function rowReport (stored: StoredBucket): RowReport {
  const { limit, windowMs, blockedUntil, blockedMs } = stored
  if (blockedUntil !== null) {
    const ms = Math.ceil(blockedMs)
    return { state: 'blocked', remaining: 0, retryAfterMs: ms, fullInMs: ms, blockedUntil, limit: null, windowMs: null }
  }
  if (limit === null || windowMs === null) return { state: 'full', remaining: null, retryAfterMs: 0, fullInMs: 0, blockedUntil: null, limit: null, windowMs: null }
  const { remaining, retryAfterMs, fullInMs } = bucketState(stored.spentMs, limit, windowMs)
  return { state: 'spent', remaining, retryAfterMs: Math.ceil(retryAfterMs), fullInMs: Math.ceil(fullInMs), blockedUntil: null, limit, windowMs }
}

/** The key as the command names it: `client reporting-service from 192.0.2.1`. */
export function whoText ({ who }: Pick<CliKeyCommand, 'who'>): string {
  if (who.key !== undefined) return `key ${who.key}`
  if (who.client === undefined) return `source ${String(who.source)}`
  return who.source === undefined ? `client ${who.client}` : `client ${who.client} from ${who.source}`
}

/** The lines of an inspection, for a person. */
export function inspectionText (command: CliKeyCommand, row: RowReport, redisKey: string, now: number, catalogued: boolean): string {
  const head = `${command.pace}, ${whoText(command)} (Redis key ${JSON.stringify(redisKey)})`
  if (row.state === 'full') return `${head}\n  ${NO_ROW}.\n  ${catalogued ? NAME_CATALOGUED : NAMES_NOT_STORED}\n`
  if (row.state === 'blocked') {
    return `${head}\n  blocked until  ${(row.blockedUntil as Date).toISOString()} (in ${duration(row.retryAfterMs)}); every request is refused until then, and the bucket is full after it.\n` +
      '  reset lifts it: exchangepace reset with the same options.\n'
  }
  const rate = `${String(row.limit)} per ${duration(row.windowMs as number)}`
  return `${head}\n` +
    `  remaining      ${String(row.remaining)} (of ${rate}: the rate this row was written at)\n` +
    `  next unit      ${row.retryAfterMs === 0 ? 'now' : at(now, row.retryAfterMs)}\n` +
    `  full again     ${at(now, row.fullInMs)}\n` +
    '  blocked until  not blocked\n'
}

/** One key `list` found held back, with its row read at its own rate. */
export interface ListedRow {
  readonly who: PaceWho
  readonly key: string
  readonly row: RowReport
}

/** The lines of a list, for a person: one per key, least remaining first. */
export function listText (pace: string, listed: readonly ListedRow[], now: number): string {
  if (listed.length === 0) return `${pace}: no key is held back (every bucket is full).\n`
  const lines = listed.map(({ who, row }) => {
    const state = row.state === 'blocked'
      ? `blocked until ${(row.blockedUntil as Date).toISOString()} (in ${duration(row.retryAfterMs)})`
      : `remaining ${String(row.remaining)} of ${String(row.limit)} per ${duration(row.windowMs as number)}, next unit ${row.retryAfterMs === 0 ? 'now' : at(now, row.retryAfterMs)}, full again ${at(now, row.fullInMs)}`
    return `  ${whoText({ who })}: ${state}\n`
  })
  return `${pace}: ${listed.length} key${listed.length === 1 ? '' : 's'} held back, least remaining first\n${lines.join('')}`
}

/** The catalog, for a person: one line per pace. */
export function pacesText (prefix: string, paces: readonly PaceCatalogEntry[]): string {
  const lines = paces.map(pace => {
    const rate = pace.window === 1 ? `${pace.limit}/s` : `${pace.limit} per ${duration(pace.window * 1000)}`
    const notes = [pace.shadow ? 'in shadow' : '', pace.warnAt === null ? '' : `warnAt ${pace.warnAt}`].filter(note => note !== '')
    return `  ${pace.name}  keyed by ${pace.keyKind}, ${rate}, spend ${pace.spend.join('/')}${notes.length > 0 ? `, ${notes.join(', ')}` : ''} (${pace.routes.join(', ')})\n`
  })
  return `The paces the apps on ${prefix} recorded:\n${lines.join('')}`
}

/** The audit trail's latest entries, for a person: one line each, newest first. */
export function auditText (prefix: string, entries: readonly AuditEntry[]): string {
  if (entries.length === 0) return `The audit trail under ${prefix} is empty: no reset or block has been recorded.\n`
  const lines = entries.map(entry => `  ${entry.time}  ${entry.action} ${entry.pace} (${entry.keyKind}) ${entry.key}${entry.blockedMs === undefined ? '' : ` for ${duration(entry.blockedMs)}`}, by ${entry.by} on ${entry.host}\n`)
  return `The latest ${entries.length} action${entries.length === 1 ? '' : 's'} of the audit trail under ${prefix}, newest first:\n${lines.join('')}`
}

/** A bucket as JSON: the figures in ms, a block's end in ISO 8601, and what Redis cannot tell. */
export function bucketJson (row: RowReport): Record<string, unknown> {
  return { ...row, blockedUntil: row.blockedUntil?.toISOString() ?? null, ...(row.state === 'full' ? { note: NO_ROW } : {}) }
}

/** `in 11 min (2026-12-06T03:12:00.000Z)`: a wait, and when it ends by this machine's clock. */
function at (now: number, ms: number): string {
  return `in ${duration(ms)} (${new Date(now + ms).toISOString()})`
}

const UNITS: ReadonlyArray<[string, number]> = [['d', 86_400_000], ['h', 3_600_000], ['min', 60_000], ['s', 1000]]

/** A duration as a person reads it, to its two largest units: `750 ms`, `12.5 s`, `11 min`, `1 h 5 min`. */
export function duration (ms: number): string {
  if (ms < 1000) return `${Math.ceil(ms)} ms`
  if (ms < 60_000) return `${Math.ceil(ms / 100) / 10} s`
  let left = Math.ceil(ms / 1000) * 1000
  const parts: string[] = []
  for (const [unit, size] of UNITS) {
    const count = Math.floor(left / size)
    left -= count * size
    if (count > 0 || parts.length > 0) parts.push(`${count} ${unit}`)
  }
  return parts.slice(0, 2).filter(part => !part.startsWith('0 ')).join(' ')
}
