import type { AuditEntry } from '../store.js'

/**
 * The audit trail of operators' actions on a shared store: every reset and block, through
 * `fastify.pace`, an admin route or the CLI, appended to a capped Redis stream at
 * `prefix + 'audit'` (`XADD ... MAXLEN ~ AUDIT_LENGTH`), so that who did what outlives any one
 * replica's log.
 */

/** The stream's approximate cap: the latest this many actions are kept. */
export const AUDIT_LENGTH = 10_000

/** The trail's key under a store's prefix. */
export function auditKey (prefix: string): string {
  return `${prefix}audit`
}

/** A client as the trail uses it. */
export interface AuditClient {
  xadd: (key: string, ...args: string[]) => Promise<unknown>
  xrevrange: (key: string, end: string, start: string, count: 'COUNT', n: number) => Promise<Array<[string, string[]]>>
}

/** Appends `entry` to the trail under `prefix`, trimming it to about `AUDIT_LENGTH` entries. */
export async function appendAudit (client: AuditClient, prefix: string, entry: AuditEntry): Promise<void> {
  const fields = Object.entries(entry).filter(([, value]) => value !== undefined).flatMap(([field, value]) => [field, String(value)])
  await client.xadd(auditKey(prefix), 'MAXLEN', '~', String(AUDIT_LENGTH), '*', ...fields)
}

/** The latest `count` entries of the trail under `prefix`, newest first. */
export async function readAudit (client: AuditClient, prefix: string, count: number): Promise<AuditEntry[]> {
  const entries = await client.xrevrange(auditKey(prefix), '+', '-', 'COUNT', count)
  return entries.map(([, fields]) => {
    const entry: Record<string, string | number> = {}
    for (let i = 0; i < fields.length; i += 2) entry[fields[i]] = fields[i + 1]
    if (entry.blockedMs !== undefined) entry.blockedMs = Number(entry.blockedMs)
    return entry as unknown as AuditEntry
  })
}
