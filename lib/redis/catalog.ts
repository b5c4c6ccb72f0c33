import type { PaceCatalogEntry } from '../store.js'

/**
 * The catalog of an app's paces, which a `RedisStore` writes to Redis when the app is ready, so
 * that the CLI, which has no app, knows the names and kinds of key there are: a hash at
 * `prefix + 'catalog'`, one field per pace name, its value the entry as JSON. Every replica writes
 * the same fields; a pace a newer deploy no longer declares stays until the hash is deleted.
 */

/** The catalog's key under a store's prefix. */
export function catalogKey (prefix: string): string {
  return `${prefix}catalog`
}

/** A client as the catalog uses it. */
export interface CatalogClient {
  hset: (key: string, fields: Record<string, string>) => Promise<unknown>
  hgetall: (key: string) => Promise<Record<string, string>>
}

/** Records `entries` under `prefix`, each replacing the field of its name. */
export async function writeCatalog (client: CatalogClient, prefix: string, entries: readonly PaceCatalogEntry[]): Promise<void> {
  if (entries.length === 0) return
  await client.hset(catalogKey(prefix), Object.fromEntries(entries.map(entry => [entry.name, JSON.stringify(entry)])))
}

/** The catalog under `prefix`, by name; empty when no app recorded one. A field that is not an entry's JSON is left out. */
export async function readCatalog (client: CatalogClient, prefix: string): Promise<PaceCatalogEntry[]> {
  const fields = await client.hgetall(catalogKey(prefix))
  const entries: PaceCatalogEntry[] = []
  for (const value of Object.values(fields)) {
    try {
      const entry = JSON.parse(value) as PaceCatalogEntry
      if (typeof entry?.name === 'string' && typeof entry.keyKind === 'string') entries.push(entry)
    } catch {}
  }
  // The names are the hash's fields: no two are equal.
  return entries.sort((a, b) => a.name < b.name ? -1 : 1)
}
