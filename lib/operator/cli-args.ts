import { readFileSync } from 'node:fs'
import { userInfo } from 'node:os'
import { parseArgs } from 'node:util'
import { MAX_BLOCK_SECONDS } from '../limits.js'
import type { PaceKeyName } from '../paces/counts.js'
import { whoKey, type PaceWho } from '../paces/who.js'

/**
 * The command line of `exchangepace`, read into a command the CLI can run, or refused whole with a
 * `UsageError` that says what is wrong. Nothing here touches Redis: a command that parses is one
 * the CLI may send, and one that does not changes nothing anywhere.
 */

/** A command line the CLI cannot run: a missing or malformed part. Exit code 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError'
}

/** What the CLI does to one key of one pace. */
export type CliAction = 'inspect' | 'reset' | 'block'

/** Where the CLI connects, and how it prints: what every command has. */
export interface CliConnection {
  readonly redis: string
  /** The CA certificate (PEM) the server's was signed with, read from `--tls-ca`; null for the system's CAs. */
  readonly tlsCa: Buffer | null
  readonly cluster: boolean
  readonly prefix: string
  readonly json: boolean
  /** The longest wait for Redis, to connect and for each command, in ms. */
  readonly timeoutMs: number
  /** Who acts, for the audit trail: `--by`, default the OS user. */
  readonly by: string
}

/** A command line read, with every part checked and the key made as a request's would be. */
export interface CliKeyCommand extends CliConnection {
  readonly action: CliAction
  readonly pace: string
  readonly keyKind: PaceKeyName
  readonly who: PaceWho
  /** The key in the pace's table, made by `whoKey` exactly as the plugin makes a request's. */
  readonly key: string
  /** How long a block lasts, in seconds; null for inspect and reset. */
  readonly seconds: number | null
}

/** `list`: the keys a pace holds back, a client's pairs with `client`, at most `limit`. */
export interface CliListCommand extends CliConnection {
  readonly action: 'list'
  readonly pace: string
  readonly client: string | null
  readonly limit: number
}

/** `audit`: the latest `limit` entries of the audit trail. */
export interface CliAuditCommand extends CliConnection {
  readonly action: 'audit'
  readonly limit: number
}

/** `paces`: the catalog the apps recorded. */
export interface CliPacesCommand extends CliConnection {
  readonly action: 'paces'
}

export type CliCommand = CliKeyCommand | CliListCommand | CliPacesCommand | CliAuditCommand

const ACTIONS: readonly string[] = ['paces', 'list', 'inspect', 'reset', 'block', 'audit']

const OPTIONS = {
  redis: { type: 'string' },
  'tls-ca': { type: 'string' },
  cluster: { type: 'boolean' },
  prefix: { type: 'string' },
  pace: { type: 'string' },
  client: { type: 'string' },
  source: { type: 'string' },
  key: { type: 'string' },
  'ipv6-subnet': { type: 'string' },
  'max-key-length': { type: 'string' },
  seconds: { type: 'string' },
  timeout: { type: 'string' },
  json: { type: 'boolean' },
  limit: { type: 'string' },
  by: { type: 'string' },
  help: { type: 'boolean', short: 'h' }
} as const

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS, allowPositionals: true, tokens: true }>>['values']

/** The kind of key each combination of parts names: the CLI cannot ask the app how a pace is keyed. */
const KINDS: Record<string, PaceKeyName> = {
  client: 'client',
  source: 'source',
  'client,source': 'client+source',
  key: 'function'
}

/** `argv` read into a command, or 'help' when help was asked for; a UsageError when it is not one. */
export function parseCommandLine (argv: readonly string[], env: Readonly<Record<string, string | undefined>>): CliCommand | 'help' {
  const { values, positionals, tokens } = readArgs(argv)
  if (values.help === true) return 'help'
  const repeated = tokens.find((token, at) => token.kind === 'option' && tokens.findIndex(other => other.kind === 'option' && other.name === token.name) !== at)
  if (repeated?.kind === 'option') throw new UsageError(`--${repeated.name} is given twice; give it once`)
  const [action, ...extra] = positionals
  if (action === undefined) throw new UsageError(`give a command: ${ACTIONS.join(', ')}`)
  if (!ACTIONS.includes(action)) throw new UsageError(`unknown command ${JSON.stringify(action)}; the commands are ${ACTIONS.join(', ')}`)
  if (extra.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(extra[0])}; options start with --`)
  const connection: CliConnection = connectionOf(values, env)
  if (action === 'paces' || action === 'audit') {
    const extraOption = (['pace', 'client', 'source', 'key', 'seconds', ...(action === 'paces' ? ['limit'] as const : [])] as const).find(option => values[option] !== undefined)
    if (extraOption !== undefined) throw new UsageError(`${action} ${action === 'paces' ? 'lists every pace' : 'prints the latest actions'}; it takes no --${extraOption}`)
    if (action === 'paces') return { action, ...connection }
    return { action, limit: integer('--limit', values.limit ?? '20', 1, 10_000), ...connection }
  }
  const pace = values.pace
  if (pace === undefined || pace === '') throw new UsageError('give --pace NAME, the pace\'s name in the app (exchangepace paces lists them; by default a route\'s URL, such as /token#client)')
  if (action === 'list') {
    const extraOption = (['source', 'key', 'seconds'] as const).find(option => values[option] !== undefined)
    if (extraOption !== undefined) throw new UsageError(`list takes --pace, and --client for a pair's pace; not --${extraOption}`)
    const client = values.client === undefined ? null : keyOf(pace, values).who.client as string
    return { action, pace, client, limit: integer('--limit', values.limit ?? '100', 1, 10_000), ...connection }
  }
  if (values.limit !== undefined) throw new UsageError(`--limit is for list only; ${action} takes none`)
  const seconds = blockSeconds(action as CliAction, values.seconds)
  const { keyKind, who, key } = keyOf(pace, values)
  return { action: action as CliAction, pace, keyKind, who, key, seconds, ...connection }
}

/** Where to connect and how to print, checked. */
function connectionOf (values: Values, env: Readonly<Record<string, string | undefined>>): CliConnection {
  const redis = redisUrl(values.redis ?? env.REDIS_URL)
  return {
    redis,
    tlsCa: tlsCa(values['tls-ca'], redis),
    cluster: values.cluster === true,
    prefix: values.prefix ?? 'exchangepace:',
    json: values.json === true,
    timeoutMs: number('--timeout', values.timeout ?? '5', 0.001, 600) * 1000,
    by: operator(values.by)
  }
}

/** Who acts: `--by`, or the OS user; a name of 1 to 200 printable characters. */
function operator (given: string | undefined): string {
  const by = given ?? osUser()
  if (!/^[\x20-\x7e\u00a0-\uffff]{1,200}$/.test(by)) throw new UsageError(`--by must name the operator in 1 to 200 printable characters, got ${JSON.stringify(by)}`)
  return by
}

/** The OS user running the CLI (`userInfo` throws where the system has no name for it: give --by there). */
function osUser (): string {
  return userInfo().username
}

function readArgs (argv: readonly string[]) {
  try {
    return parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true, tokens: true })
  } catch (err) {
    throw new UsageError((err as Error).message)
  }
}

/** The seconds of a block: required by block, refused elsewhere, > 0 and at most a year. */
function blockSeconds (action: CliAction, given: string | undefined): number | null {
  if (action !== 'block') {
    if (given !== undefined) throw new UsageError(`--seconds is for block only; ${action} takes none`)
    return null
  }
  if (given === undefined) throw new UsageError('block needs --seconds N, how long the block lasts')
  return number('--seconds', given, Number.MIN_VALUE, MAX_BLOCK_SECONDS)
}

/** The kind of key the parts given name, and the key, made as the plugin makes a request's. */
function keyOf (pace: string, values: Values): { keyKind: PaceKeyName, who: PaceWho, key: string } {
  const parts = (['client', 'source', 'key'] as const).filter(part => values[part] !== undefined)
  const keyKind = KINDS[parts.join(',')]
  if (keyKind === undefined) {
    const given = parts.length === 0 ? 'none' : parts.map(part => `--${part}`).join(' and ')
    throw new UsageError(`give the key by --client ID, --source ADDR, both (a pair's failure budget), or --key KEY alone (a key function's pace); got ${given}`)
  }
  const who: PaceWho = Object.fromEntries(parts.map(part => [part, values[part]]))
  const making = {
    ipv6Subnet: integer('--ipv6-subnet', values['ipv6-subnet'] ?? '64', 1, 128),
    maxKeyLength: integer('--max-key-length', values['max-key-length'] ?? '255', 1, Number.MAX_SAFE_INTEGER)
  }
  try {
    return { keyKind, who, key: whoKey(pace, keyKind, who, making) }
  } catch (err) {
    throw new UsageError((err as Error).message.replace(/^exchangepace: /, ''))
  }
}

/** The Redis URL, which must be one: the CLI never guesses a server to act on. */
function redisUrl (given: string | undefined): string {
  if (given === undefined || given === '') throw new UsageError('give --redis URL (or set REDIS_URL), such as redis://10.0.0.5:6379')
  let url: URL | null = null
  try {
    url = new URL(given)
  } catch {}
  if (url === null || (url.protocol !== 'redis:' && url.protocol !== 'rediss:') || url.hostname === '') {
    throw new UsageError(`--redis must be a redis:// or rediss:// URL with a host, got ${JSON.stringify(given)}`)
  }
  return given
}

/** The CA certificate `--tls-ca` names, for a rediss:// URL only; a file that cannot be read is a UsageError too. */
function tlsCa (file: string | undefined, redis: string): Buffer | null {
  if (file === undefined) return null
  if (!redis.startsWith('rediss:')) throw new UsageError(`--tls-ca is for a rediss:// URL (TLS); got ${new URL(redis).protocol}//`)
  try {
    return readFileSync(file)
  } catch (err) {
    throw new UsageError(`--tls-ca: cannot read ${JSON.stringify(file)} (${(err as Error).message})`)
  }
}

/** A decimal number from `min` to `max` written plainly (no sign, exponent or hex). */
function number (option: string, text: string, min: number, max: number): number {
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN
  if (!(value >= min && value <= max)) throw new UsageError(`${option} must be a number > 0 and <= ${max}, got ${JSON.stringify(text)}`)
  return value
}

function integer (option: string, text: string, min: number, max: number): number {
  const value = /^\d+$/.test(text) ? Number(text) : NaN
  if (!(value >= min && value <= max)) throw new UsageError(`${option} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`)
  return value
}
