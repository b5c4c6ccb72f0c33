import { RedisStore } from '../redis/store.js'
import { redisPaceName } from '../redis/scripts.js'
import { pairKey } from '../keys/parse.js'
import type { PaceCatalogEntry } from '../store.js'
import { parseCommandLine, UsageError, type CliCommand, type CliKeyCommand, type CliListCommand } from './cli-args.js'
import { auditText, bucketJson, duration, inspectionText, listText, pacesText, rowReport, whoText, type ListedRow } from './cli-report.js'
import { whoOf } from '../paces/who.js'
import { hostname } from 'node:os'
import { auditedKey } from '../keys/audited.js'
import type { PaceKeyName } from '../paces/counts.js'

/**
 * `exchangepace inspect|reset|block`: the operator's actions on one key of a pace shared through
 * Redis, from a shell, without deploying anything. It acts as `fastify.pace` does with a
 * RedisStore (the same scripts, the same keys), so every replica follows. Exit codes: 0 done,
 * 1 Redis failed or did not answer, 2 the command line is wrong (and nothing was sent).
 */

/** Where the CLI writes, what it reads, and (for tests) how it loads ioredis. */
export interface CliIo {
  readonly stdout: { write: (text: string) => unknown }
  readonly stderr: { write: (text: string) => unknown }
  readonly env: Readonly<Record<string, string | undefined>>
  /** Loads ioredis; `import('ioredis')` unless a test gives another. */
  readonly ioredis?: (() => Promise<unknown>) | undefined
}

export const USAGE = `Usage: exchangepace paces|list|inspect|reset|block|audit --redis URL [--pace NAME] [key] [options]

Acts on the paces an app shares through RedisStore, for every replica at once. The apps record
their paces in Redis when they start (the catalog); a pace name, or key parts, the catalog does not
know are refused (exit 2) and nothing is written.

Commands:
  paces              the paces the apps recorded: name, kind of key, rate, spend, routes
  list               the keys --pace holds back, least remaining first (--client ID: a pair
                     pace's keys of that client; --limit N, default 100)
  inspect            what the key's bucket holds now, read with the rate its row was written at;
                     on a pair's pace, --client alone: how many addresses of that client are
                     held back, and the most held back
  reset              makes the bucket full again and lifts a block (prints what it held); on a
                     pair's pace, --client alone resets every address of that client
  block              grants the key nothing for --seconds N; then its bucket is full
  audit              the latest resets and blocks (--limit N, default 20), newest first: when,
                     what, which key (a client id as its hash), by whom, from which host

Every reset and block is appended to the audit trail in Redis, with --by.

Options:
  --redis URL        redis:// or rediss:// URL of the store's Redis (default: $REDIS_URL)
  --tls-ca FILE      for rediss://, the CA certificate (PEM) that signed the server's
                     (default: the system's CAs)
  --cluster          the URL is a seed node of a Redis Cluster
  --prefix P         the RedisStore's prefix (default: exchangepace:)
  --pace NAME        the pace's name in the app, such as /token#client (exchangepace paces)
  --client ID        the declared client id (a pace keyed by client, or with --source by the pair)
  --source ADDR      an IP address, or an IPv6 prefix as the logs show it (2001:db8::/64)
  --key KEY          the key of a pace with a key function
  --ipv6-subnet N    the app's ipv6Subnet (default: 64)
  --max-key-length N the app's maxKeyLength (default: 255)
  --seconds N        how long a block lasts, up to a year
  --limit N          the most keys list prints (default: 100), or audit entries (default: 20)
  --by NAME          who acts, for the audit trail (default: the OS user)
  --timeout S        the longest wait for Redis, in seconds (default: 5)
  --json             print JSON
  -h, --help         print this

Exit codes: 0 done, 1 Redis failed or did not answer, 2 a wrong command line, or a pace or key
the catalog does not know (nothing written).
`

/** An ioredis client as the CLI uses it: the store's commands, and the connection's life. */
interface Client {
  defineCommand: (name: string, definition: { numberOfKeys: number, lua: string }) => void
  connect: () => Promise<void>
  disconnect: () => void
  on: (event: 'error' | 'end' | 'ready', listener: (err: Error) => void) => unknown
}

interface Ioredis {
  Redis: new (url: string, options: object) => Client
  Cluster: new (nodes: object[], options: object) => Client
}

/** Runs the command line `argv` and resolves to the exit code; never rejects. */
export async function main (argv: readonly string[], io: CliIo): Promise<number> {
  let command: CliCommand | 'help'
  try {
    command = parseCommandLine(argv, io.env)
  } catch (err) {
    io.stderr.write(`exchangepace: ${(err as UsageError).message}\nRun exchangepace --help for usage.\n`)
    return 2
  }
  if (command === 'help') {
    io.stdout.write(USAGE)
    return 0
  }
  try {
    const ioredis = await loadIoredis(io.ioredis ?? importIoredis)
    const client = await connect(ioredis, command)
    try {
      const store = new RedisStore({ client, prefix: command.prefix })
      const catalog = await store.catalog()
      if (command.action === 'audit') {
        const entries = await store.auditTrail(command.limit)
        io.stdout.write(command.json ? jsonLine({ action: 'audit', prefix: command.prefix, entries }) : auditText(command.prefix, entries))
        return 0
      }
      if (command.action === 'paces') {
        io.stdout.write(command.json ? jsonLine({ action: 'paces', prefix: command.prefix, paces: catalog }) : catalog.length === 0 ? `${NO_CATALOG(command.prefix)}.\n` : pacesText(command.prefix, catalog))
        return 0
      }
      const entry = catalogued(command, catalog)
      if (catalog.length === 0) io.stderr.write(`exchangepace: ${NO_CATALOG(command.prefix)}: the pace name and the kind of key are not checked.\n`)
      if (command.action === 'list') {
        io.stdout.write(await list(command, store, entry))
        return 0
      }
      const done = await run(command, store, entry)
      io.stdout.write(done.text)
      for (const failure of await audited(command, done.keys, store, entry)) io.stderr.write(`exchangepace: done, but the audit trail did not record it (${failure.message}).\n`)
    } finally {
      client.disconnect()
    }
    return 0
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`exchangepace: ${err.message}\nNothing was written.\n`)
      return 2
    }
    io.stderr.write(`exchangepace: ${(err as Error).message.replace(/^exchangepace: /, '')}\n`)
    return 1
  }
}

/** ioredis, a peer dependency: loaded only when a command needs Redis. */
async function importIoredis (): Promise<unknown> {
  return await import('ioredis')
}

/** ioredis, the optional peer dependency the CLI needs; an error that says so when it is missing. */
async function loadIoredis (load: () => Promise<unknown>): Promise<Ioredis> {
  try {
    return await load() as Ioredis
  } catch (err) {
    // Node says ERR_MODULE_NOT_FOUND; a loader hook in between (a test runner's) may rethrow its
    // message without the code.
    const missing = (err as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND' || /^Cannot find (?:package|module) /.test((err as Error).message)
    if (!missing) throw err
    throw new Error('the CLI talks to Redis through ioredis, which is not installed here: npm install ioredis', { cause: err })
  }
}

/** A client connected to the command's Redis, or an error naming the server (without its password). */
async function connect (ioredis: Ioredis, command: CliCommand): Promise<Client> {
  const { redis, cluster, timeoutMs, tlsCa } = command
  const url = new URL(redis)
  const tls = url.protocol === 'rediss:' ? (tlsCa === null ? {} : { ca: tlsCa }) : undefined
  // No retries, and no wait longer than the timeout: not to connect, for a command, nor for a
  // server that does not answer to close the connection (ioredis's disconnectTimeout, 2 s by default).
  const options = { connectTimeout: timeoutMs, commandTimeout: timeoutMs, disconnectTimeout: timeoutMs, maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true }
  const client = cluster
    ? new ioredis.Cluster([{ host: url.hostname, port: Number(url.port || 6379) }], {
      lazyConnect: true,
      clusterRetryStrategy: () => null,
      redisOptions: { ...options, username: decodeURIComponent(url.username), password: decodeURIComponent(url.password), tls }
    })
    : new ioredis.Redis(redis, { ...options, tls })
  const errors: Error[] = []
  client.on('error', err => { errors.push(err) })
  try {
    await client.connect()
  } catch (err) {
    client.disconnect()
    // ioredis tells why in an error event before connect() rejects with "Connection is closed.":
    // the first error heard says why, and the rejection's own message follows it.
    const why = [...errors, err as Error][0]!
    throw new Error(`Redis at ${url.protocol}//${url.host} does not answer (${why.message}); nothing was changed`, { cause: err })
  }
  return client
}

/** Said when no app recorded a catalog under `prefix`. */
const NO_CATALOG = (prefix: string): string => `no app has recorded a catalog of its paces under the prefix ${JSON.stringify(prefix)} (an app with a RedisStore records it when it is ready)`

/** The kind of key each set of parts the CLI was given may name, in the catalog's words. */
const FITS: Record<string, readonly string[]> = {
  client: ['client'],
  source: ['source'],
  'client+source': ['client+source'],
  function: ['function', 'device_code', 'bearer']
}

/**
 * The catalog's entry of `command`'s pace, or null when there is no catalog. A UsageError (exit 2,
 * nothing written) when the catalog does not know the pace, or the parts do not fit its key;
 * `--client` alone fits a pair's pace for inspect, reset (every address) and list.
 */
function catalogued (command: CliKeyCommand | CliListCommand, catalog: readonly PaceCatalogEntry[]): PaceCatalogEntry | null {
  if (catalog.length === 0) return null
  const known = catalog.map(pace => `${JSON.stringify(pace.name)} (${pace.keyKind})`).join(', ')
  const entry = catalog.find(pace => pace.name === command.pace)
  if (entry === undefined) throw new UsageError(`the app's catalog has no pace named ${JSON.stringify(command.pace)}; its paces are ${known}`)
  if (command.action === 'list') {
    if (command.client !== null && entry.keyKind !== 'client+source') throw new UsageError(`pace ${JSON.stringify(entry.name)} is keyed by ${entry.keyKind}: list --client is for a pace keyed by client+source; the paces are ${known}`)
    return entry
  }
  const wholeClient = command.keyKind === 'client' && entry.keyKind === 'client+source' && command.action !== 'block'
  if (!wholeClient && !FITS[command.keyKind].includes(entry.keyKind)) {
    throw new UsageError(`pace ${JSON.stringify(entry.name)} is keyed by ${entry.keyKind}, not by what was given (${command.keyKind}); the paces are ${known}`)
  }
  return entry
}

/** The keys `command`'s pace holds back, read from every master, least remaining first. */
async function list (command: CliListCommand, store: RedisStore, entry: PaceCatalogEntry | null): Promise<string> {
  const listed = await heldBack(store, command.pace, command.client === null ? '' : pairKey(command.client, ''), entry?.keyKind ?? null)
  const shown = listed.slice(0, command.limit)
  if (command.json) return jsonLine({ action: 'list', pace: command.pace, keys: shown.map(({ who, key, row }) => ({ who, key, bucket: bucketJson(row) })) })
  return listText(command.pace, shown, Date.now())
}

/**
 * The rows of `pace` whose keys start with `prefix` and are held back (spent or blocked), read from
 * every master, least remaining first (then the longest wait). `keyKind`: the catalog's, or null.
 */
async function heldBack (store: RedisStore, pace: string, prefix: string, keyKind: string | null): Promise<ListedRow[]> {
  const listed: ListedRow[] = []
  await store.scan(pace, prefix, (key, stored) => {
    const row = rowReport(stored)
    if (row.state !== 'full') listed.push({ who: whoOf(keyKind ?? guessKind(key), key), key, row })
  })
  // A listed row is spent or blocked: it has a number of units left.
  return listed.sort((a, b) => (a.row.remaining as number) - (b.row.remaining as number) || b.row.retryAfterMs - a.row.retryAfterMs || b.row.fullInMs - a.row.fullInMs)
}

/**
 * Appends the reset or block `command` made to the audit trail: one entry per key acted on, the
 * key as the app's log would show it without `logClientIds` (client ids as their hash). Resolves
 * to the failures, which do not undo the action.
 */
async function audited (command: CliKeyCommand, actedOn: readonly string[], store: RedisStore, entry: PaceCatalogEntry | null): Promise<Error[]> {
  const keyKind = entry?.keyKind ?? command.keyKind
  const failures: Error[] = []
  for (const key of actedOn) {
    try {
      await store.audit({ time: new Date().toISOString(), action: command.action === 'block' ? 'block' : 'reset', pace: command.pace, keyKind, key: auditedKey(keyKind, key, false), by: command.by, host: hostname(), blockedMs: command.seconds === null ? undefined : command.seconds * 1000 })
    } catch (err) {
      failures.push(err as Error)
    }
  }
  return failures
}

/**
 * Does what `command` asks in `store`: what to print, and the keys it reset or blocked (none for
 * inspect; every pair of a client for a reset by client). `entry`: the catalog's of its pace, or
 * null without a catalog.
 */
async function run (command: CliKeyCommand, store: RedisStore, entry: PaceCatalogEntry | null): Promise<{ text: string, keys: string[] }> {
  const { action, pace, keyKind, key, prefix, json } = command
  const known = entry !== null
  if (entry?.keyKind === 'client+source' && keyKind === 'client') return action === 'reset' ? await resetClient(command, store) : { keys: [], text: await inspectClient(command, store) }
  const redisKey = `${prefix}${redisPaceName(pace)}:${key}`
  const head = { action, pace, keyKind, key, redisKey }
  const before = rowReport(await store.inspect(pace, key))
  if (action === 'inspect') return { keys: [], text: json ? jsonLine({ ...head, bucket: bucketJson(before) }) : inspectionText(command, before, redisKey, Date.now(), known) }
  if (action === 'reset') {
    await store.reset(pace, key)
    if (json) return { keys: [key], text: jsonLine({ ...head, before: bucketJson(before) }) }
    const held = before.state === 'full' ? 'it had no row (already full: nothing to lift; check --pace and the parts if one was expected)' : `it was ${before.state === 'blocked' ? 'blocked' : `spent (${String(before.remaining)} left)`}`
    return { keys: [key], text: `reset ${pace}, ${whoText(command)}: the bucket is full in Redis, and every replica follows at once (one that missed the news, at its next request for the key while Redis answers); ${held}.\n` }
  }
  const seconds = command.seconds as number
  const until = await store.block(pace, key, seconds * 1000)
  if (json) return { keys: [key], text: jsonLine({ ...head, seconds, blockedUntil: until.toISOString() }) }
  const text = `blocked ${pace}, ${whoText(command)} for ${duration(seconds * 1000)}, until ${until.toISOString()}: every replica refuses it until then, also while Redis does not answer (one started while Redis does not answer cannot know of it); then its bucket is full.\n` +
    `  exchangepace reset with the same options lifts it.${known ? '' : ` No catalog was found, so whether an app declares a pace named ${JSON.stringify(pace)} is not known: check it against fastify.pace.names().`}\n`
  return { keys: [key], text }
}

/** Resets every pair of `command`'s client in its pair pace: each address's budget. */
async function resetClient (command: CliKeyCommand, store: RedisStore): Promise<{ text: string, keys: string[] }> {
  const { pace, key: client, json } = command
  const keys: string[] = []
  await store.scan(pace, pairKey(client, ''), key => { keys.push(key) })
  for (const key of keys) await store.reset(pace, key)
  const sources = keys.map(key => whoOf('client+source', key).source as string)
  if (json) return { keys, text: jsonLine({ action: 'reset', pace, keyKind: 'client+source', client, sources }) }
  return { keys, text: `reset ${pace}, client ${client} from every address: ${sources.length === 0 ? 'no pair of it held a row (nothing to lift)' : `${sources.length} pair${sources.length === 1 ? '' : 's'} (${sources.join(', ')})`}; every replica follows at once.\n` }
}

/**
 * What `command`'s client holds on its pair pace, from every address: how many pairs are held
 * back, and the bucket of the most held back, as `fastify.pace.inspect` with `{ client }` tells it.
 */
async function inspectClient (command: CliKeyCommand, store: RedisStore): Promise<string> {
  const { pace, key: client, prefix, json } = command
  const held = await heldBack(store, pace, pairKey(client, ''), 'client+source')
  const worst = held[0]
  const redisKey = worst === undefined ? null : `${prefix}${redisPaceName(pace)}:${worst.key}`
  if (json) return jsonLine({ action: 'inspect', pace, keyKind: 'client+source', client, pairsHeldBack: held.length, source: worst?.who.source ?? null, key: worst?.key ?? null, redisKey, bucket: worst === undefined ? null : bucketJson(worst.row) })
  if (worst === undefined) return `${pace}, client ${client} from every address: no pair of it is held back (none holds a row in Redis: each address's budget is full).\n`
  const pairs = `${held.length} pair${held.length === 1 ? '' : 's'} held back`
  return `${pace}, client ${client} from every address: ${pairs}; the most held back:\n${inspectionText({ ...command, who: worst.who }, worst.row, redisKey as string, Date.now(), true)}` +
    (held.length > 1 ? `  exchangepace list --pace '${pace}' --client ${client} lists them all.\n` : '')
}

/** The kind of a key of a pace listed without a catalog: a pair has the separator; any other is given as `{ key }`. */
function guessKind (key: string): PaceKeyName {
  return key.includes('\u001f') ? 'client+source' : 'function'
}

function jsonLine (value: object): string {
  return `${JSON.stringify(value)}\n`
}
