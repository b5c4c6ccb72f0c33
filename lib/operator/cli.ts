import { RedisStore } from '../redis/store.js'
import { redisPaceName } from '../redis/scripts.js'
import { parseCommandLine, UsageError, type CliCommand } from './cli-args.js'
import { bucketJson, duration, inspectionText, rowReport, whoText } from './cli-report.js'

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

export const USAGE = `Usage: exchangepace inspect|reset|block --redis URL --pace NAME (--client ID | --source ADDR | --client ID --source ADDR | --key KEY) [options]

Acts on one key of a pace that an app shares through RedisStore, for every replica at once.

Commands:
  inspect            what the key's bucket holds now, read with the rate its row was written at
  reset              makes the bucket full again and lifts a block (prints what it held)
  block              grants the key nothing for --seconds N; then its bucket is full

Options:
  --redis URL        redis:// or rediss:// URL of the store's Redis (default: $REDIS_URL)
  --tls-ca FILE      for rediss://, the CA certificate (PEM) that signed the server's
                     (default: the system's CAs)
  --cluster          the URL is a seed node of a Redis Cluster
  --prefix P         the RedisStore's prefix (default: exchangepace:)
  --pace NAME        the pace's name in the app, such as /token#client (fastify.pace.names())
  --client ID        the declared client id (a pace keyed by client, or with --source by the pair)
  --source ADDR      an IP address, or an IPv6 prefix as the logs show it (2001:db8::/64)
  --key KEY          the key of a pace with a key function
  --ipv6-subnet N    the app's ipv6Subnet (default: 64)
  --max-key-length N the app's maxKeyLength (default: 255)
  --seconds N        how long a block lasts, up to a year
  --timeout S        the longest wait for Redis, in seconds (default: 5)
  --json             print JSON
  -h, --help         print this

Exit codes: 0 done, 1 Redis failed or did not answer, 2 a wrong command line (nothing sent).
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
    const ioredis = await loadIoredis(io.ioredis ?? (() => import('ioredis')))
    const client = await connect(ioredis, command)
    try {
      io.stdout.write(await run(command, new RedisStore({ client, prefix: command.prefix })))
    } finally {
      client.disconnect()
    }
    return 0
  } catch (err) {
    io.stderr.write(`exchangepace: ${(err as Error).message.replace(/^exchangepace: /, '')}\n`)
    return 1
  }
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
    throw new Error(`Redis at ${url.protocol}//${url.host} does not answer (${(errors[0] ?? err as Error).message}); nothing was changed`, { cause: err })
  }
  return client
}

/** Does what `command` asks in `store` and returns what to print. */
async function run (command: CliCommand, store: RedisStore): Promise<string> {
  const { action, pace, keyKind, key, prefix, json } = command
  const redisKey = `${prefix}${redisPaceName(pace)}:${key}`
  const head = { action, pace, keyKind, key, redisKey }
  const before = rowReport(await store.inspect(pace, key))
  if (action === 'inspect') return json ? jsonLine({ ...head, bucket: bucketJson(before) }) : inspectionText(command, before, redisKey, Date.now())
  if (action === 'reset') {
    await store.reset(pace, key)
    if (json) return jsonLine({ ...head, before: bucketJson(before) })
    const held = before.state === 'full' ? 'it had no row (already full: nothing to lift; check --pace and the parts if one was expected)' : `it was ${before.state === 'blocked' ? 'blocked' : `spent (${String(before.remaining)} left)`}`
    return `reset ${pace}, ${whoText(command)}: the bucket is full in Redis, and every replica follows at once (one that missed the news, at its next request for the key while Redis answers); ${held}.\n`
  }
  const seconds = command.seconds as number
  const until = await store.block(pace, key, seconds * 1000)
  if (json) return jsonLine({ ...head, seconds, blockedUntil: until.toISOString() })
  return `blocked ${pace}, ${whoText(command)} for ${duration(seconds * 1000)}, until ${until.toISOString()}: every replica refuses it until then, also while Redis does not answer (one started while Redis does not answer cannot know of it); then its bucket is full.\n` +
    `  exchangepace reset with the same options lifts it. Redis cannot tell whether an app declares a pace named ${JSON.stringify(pace)}: check it against fastify.pace.names().\n`
}

function jsonLine (value: object): string {
  return `${JSON.stringify(value)}\n`
}
