import type { FastifyRequest } from 'fastify'
import type { PaceRate } from '../bucket/pace.js'
import { MAX_QUOTA, MAX_WINDOW_SECONDS } from '../limits.js'
import type { PaceKeyName } from '../paces/counts.js'
import type { RateOf } from '../paces/named-pace.js'
import { describe } from '../values.js'
import { refusalShaper, type PaceRefusalOption, type RefusalShaper } from './refusal-shape.js'
import type { PaceSpend } from './ticket.js'

/**
 * Which key a pace spends from:
 * - `'client'`: the client id the request DECLARES (HTTP Basic, body `client_id`, client assertion
 *   `sub`), before anything verifies it. For token endpoints, with `spend: 'accepted'`.
 * - `'source'`: the source address (`request.ip`), IPv6 grouped by `ipv6Subnet`.
 * - `['client', 'source']`: the declared client id and the source address together, the key of a
 *   failure budget (`spend: 'rejected'`): a guesser spends its own pair, never the real client's.
 *   A request that declares no client id takes nothing from it.
 * - `'device_code'`: the body's `device_code` (RFC 8628), hashed: a device polling the token endpoint.
 * - `'bearer'`: the bearer token (RFC 6750: `Authorization: Bearer`, or the body's `access_token`),
 *   hashed: userinfo and other resources. The token never becomes a key, only its hash.
 * - a function: returns the key, or undefined to take nothing from this pace for that request.
 */
export type PaceKey = 'client' | 'source' | readonly ['client', 'source'] | 'device_code' | 'bearer' | ((request: FastifyRequest) => string | undefined)

/** A key as a pace rule holds it: the kind of a built-in key, or the function. */
export type PaceKeyKind = 'client' | 'source' | 'client+source' | 'device_code' | 'bearer' | ((request: FastifyRequest) => string | undefined)

/** A route's pace, as written in `config.pace`: its rate (`perSecond`, or `limit` per `window` seconds), its key and how it is spent. */
export type PaceRouteOptions = PaceRate & {
  key: PaceKey
  /**
   * `'accepted'`: only exchanges that took place spend; the unit is refunded when the handler sets
   * `request.pace.outcome = 'rejected'` (the token endpoint). `'rejected'`: only exchanges that did
   * not take place spend; the unit is refunded unless the handler sets the outcome to `'rejected'`
   * (a failure budget). `'every'`: every request spends and nothing is refunded (the authorization
   * endpoint).
   */
  spend: PaceSpend
  /**
   * The table this pace keeps, shared by every route naming it. Default: the route URL (so GET,
   * HEAD and POST of one URL share it; a route at `/` under a prefix with the default
   * `prefixTrailingSlash`: the prefix), followed, when the route declares several paces, by
   * `#client`, `#source`, `#client+source` or `#key`, and `:rejected` for a failure budget.
   */
  name?: string | undefined
  /**
   * A key's own rate, for clients registered at different rates: `perSecond` for a per-second
   * pace, `limit` (over the declared window) for a `limit`/`window` pace, or undefined for the
   * declared rate. Asked with the declared client id (for a pair, its client id; for a source
   * pace, the source key; otherwise the key) before anything is verified, so a stranger naming a
   * client spends that client's bucket at that client's rate, and is refunded as ever. It must
   * answer at once: a Promise is a TypeError (a 500). Default: none, every key at the declared rate.
   */
  rateOf?: RateOf | undefined
  /**
   * What this pace answers when it refuses, instead of 429 with the `errorResponseBuilder` body:
   * `{ statusCode, body, headers }`, each optional, or a function `(request, refusal)` returning
   * one. RFC 8628's device poll: `{ statusCode: 400, body: { error: 'slow_down' } }`.
   */
  refusal?: PaceRefusalOption | undefined
  /**
   * Requests whose body `grant_type` is one of these take nothing from this pace. Default: none.
   * For a token endpoint paced per grant: the device grant's polls, paced by `'device_code'`, need
   * not spend their public client's pace. A request that names no grant type is not excepted.
   */
  exceptGrantTypes?: readonly string[] | undefined
  /**
   * Decide but do not enforce: a request this pace would refuse goes on to the handler, holding
   * nothing of it, and is counted (`counts(name).shadowRefused`), logged at info and told to
   * `onEvent` as `'shadow-refusal'`. Grants and refunds go on as when enforcing, so the bucket
   * evolves exactly as it would, and turning `shadow` off refuses what the shadow reported. A
   * shadow pace writes no quota headers. Default: the plugin's `shadow`, itself false.
   */
  shadow?: boolean | undefined
  /**
   * Warn before refusing: when a grant leaves this share of a key's bucket spent (a number above
   * 0 and at most 1, e.g. `0.8`), the pace counts it (`counts(name).nearLimit`), logs it at info
   * and tells `onEvent` (`'near-limit'`), once per key until its bucket is full again (per
   * replica). Default: none.
   */
  warnAt?: number | undefined
}

/** A pace of one route, checked and with its defaults filled in. */
export interface PaceRule {
  readonly name: string
  /** Units the bucket holds, refilled over `window` seconds. */
  readonly limit: number
  readonly window: number
  /** `limit / window`: units refilled per second. */
  readonly perSecond: number
  /** The rate as the route declared it, for errors and descriptions. */
  readonly rate: PaceRate
  readonly key: PaceKeyKind
  readonly spend: PaceSpend
  readonly rateOf: RateOf | undefined
  /** The pace's own refusal, or null for the plugin's 429. */
  readonly refusal: RefusalShaper | null
  /** The grant types this pace takes nothing from, or null for none. */
  readonly exceptGrantTypes: readonly string[] | null
  /** Refusals are reported, not enforced (see `PaceRouteOptions.shadow`). */
  readonly shadow: boolean
  /** The share of a bucket spent at which a grant warns, or null for none. */
  readonly warnAt: number | null
  /**
   * Reserved in onRequest, before the body is read, so that a request failing parsing or
   * validation still spends: a source key spent on every request (the authorization endpoint's
   * "every request that got past the method check spends"). Every other pace reserves in preHandler.
   */
  readonly early: boolean
}

/** The name of a kind of key, as events, logs and the registry give it: 'function' for a key function. */
export function keyKindName (kind: PaceKeyKind): PaceKeyName {
  return typeof kind === 'string' ? kind : 'function'
}

/** Structured-field strings (RFC 8941) allow printable ASCII only; the name goes into headers. */
const PRINTABLE_ASCII = /^[\x20-\x7e]+$/

const OPTIONS = ['perSecond', 'limit', 'window', 'key', 'spend', 'name', 'rateOf', 'refusal', 'exceptGrantTypes', 'shadow', 'warnAt']

/** Reports a bad option: the route, where the option sits, what was expected and what came; `prefix` starts every error of the route. */
type Fail = ((option: string, expected: string, value: unknown) => never) & { prefix: string }

/**
 * Checks `config.pace` of the route `route` (e.g. "POST /token") and fills in defaults, `shadow`
 * the plugin's; then places each pace's hook. Throws a TypeError naming the route, the option and
 * the value.
 */
export function paceRules (config: unknown, route: string, url: string, shadow = false): PaceRule[] {
  const prefix = `exchangepace: route ${route}: `
  const fail: Fail = Object.assign((option: string, expected: string, value: unknown): never => {
    throw new TypeError(`${prefix}${option} must be ${expected}, got ${describe(value)}`)
  }, { prefix })
  const list = Array.isArray(config) ? config : [config]
  if (list.length === 0) fail('config.pace', 'a pace or a non-empty array of paces', config)
  const defaults: PaceDefaults = { url, paces: list.length, shadow, fail }
  const rules = list.map((entry: unknown, index) => placed(checkPace(entry, Array.isArray(config) ? `config.pace[${index}]` : 'config.pace', defaults)))
  const names = new Set<string>()
  for (const rule of rules) {
    if (names.has(rule.name)) fail('config.pace', `paces with distinct names (two are named ${JSON.stringify(rule.name)})`, rule.name)
    names.add(rule.name)
  }
  return rules
}

/** A pace's options, checked and with their defaults: its rule, but for where its hook goes. */
type CheckedPace = Omit<PaceRule, 'early'>

/** What a pace's defaults come from: the route's URL and number of paces, and the plugin's `shadow`; and how a bad option fails. */
interface PaceDefaults {
  readonly url: string
  readonly paces: number
  readonly shadow: boolean
  readonly fail: Fail
}

/** Checks the options of the pace `entry`, at `at` in the route's config, and fills in their defaults. */
function checkPace (entry: unknown, at: string, defaults: PaceDefaults): CheckedPace {
  const { fail } = defaults
  if (entry === null || typeof entry !== 'object') return fail(at, 'an object { perSecond or limit and window, key, spend, name? }', entry)
  const options = entry as Record<string, unknown>
  // A misspelt option would otherwise be dropped without a word (a misspelt name, say, leaves the
  // pace its default name); one set to undefined says nothing, as a missing one does.
  for (const [option, value] of Object.entries(options)) {
    if (value !== undefined && !OPTIONS.includes(option)) throw new TypeError(`${fail.prefix}${at}.${option} is not an option of a pace (${OPTIONS.join(', ')})`)
  }
  const rate = checkRate(options, at, fail)
  const key = checkKeyOption(options.key, at, fail)
  const spend = options.spend
  if (spend !== 'accepted' && spend !== 'rejected' && spend !== 'every') fail(`${at}.spend`, "'accepted', 'rejected' or 'every'", spend)
  const rateOf = options.rateOf
  if (rateOf !== undefined && typeof rateOf !== 'function') fail(`${at}.rateOf`, 'a function (key) => number | undefined', rateOf)
  const name = checkName(options.name, defaultName(defaults.url, defaults.paces, key, spend as PaceSpend), at, fail)
  const exceptGrantTypes = checkGrantTypes(options.exceptGrantTypes, at, fail)
  if (options.shadow !== undefined && typeof options.shadow !== 'boolean') fail(`${at}.shadow`, 'a boolean', options.shadow)
  const warnAt = options.warnAt
  if (warnAt !== undefined && !(typeof warnAt === 'number' && warnAt > 0 && warnAt <= 1)) fail(`${at}.warnAt`, 'a number above 0 and at most 1 (a share of the bucket)', warnAt)
  return {
    name,
    ...rate,
    key,
    spend: spend as PaceSpend,
    rateOf: rateOf as RateOf | undefined,
    refusal: refusalShaper(options.refusal, at, fail.prefix, name),
    exceptGrantTypes,
    shadow: (options.shadow as boolean | undefined) ?? defaults.shadow,
    warnAt: (warnAt as number | undefined) ?? null
  }
}

/** The rule of a checked pace: where its hook goes (see `PaceRule.early`). */
function placed (pace: CheckedPace): PaceRule {
  // A pace that excepts grant types reads the body, which onRequest has not parsed yet.
  return { ...pace, early: pace.key === 'source' && pace.spend === 'every' && pace.exceptGrantTypes === null }
}

/** The rate of a pace: `perSecond`, or `limit` with `window`, never both. */
function checkRate (options: Record<string, unknown>, at: string, fail: Fail): Pick<PaceRule, 'limit' | 'window' | 'perSecond' | 'rate'> {
  const { perSecond, limit, window } = options
  if (perSecond === undefined && limit === undefined && window === undefined) throw new TypeError(`${fail.prefix}${at} declares no rate: give perSecond, or limit with window`)
  if (perSecond !== undefined) {
    if (limit !== undefined || window !== undefined) throw new TypeError(`${fail.prefix}${at} declares perSecond and ${limit !== undefined ? 'limit' : 'window'}: give perSecond, or limit with window, not both`)
    if (typeof perSecond !== 'number' || !(perSecond >= 1 && perSecond <= MAX_QUOTA)) fail(`${at}.perSecond`, `a number from 1 to ${MAX_QUOTA}`, perSecond)
    return { limit: perSecond as number, window: 1, perSecond: perSecond as number, rate: { perSecond: perSecond as number } }
  }
  if (typeof limit !== 'number' || !(limit >= 1 && limit <= MAX_QUOTA)) fail(`${at}.limit`, `a number from 1 to ${MAX_QUOTA}`, limit)
  if (typeof window !== 'number' || !(window > 0 && window <= MAX_WINDOW_SECONDS)) fail(`${at}.window`, `a number of seconds > 0 and <= ${MAX_WINDOW_SECONDS} (a year)`, window)
  return { limit: limit as number, window: window as number, perSecond: (limit as number) / (window as number), rate: { limit: limit as number, window: window as number } }
}

/** The `key` option of a pace: the kind of key it counts against. */
function checkKeyOption (key: unknown, at: string, fail: Fail): PaceKeyKind {
  if (key === 'client' || key === 'source' || key === 'device_code' || key === 'bearer' || typeof key === 'function') return key as PaceKeyKind
  if (Array.isArray(key) && key.length === 2 && key[0] === 'client' && key[1] === 'source') return 'client+source'
  return fail(`${at}.key`, "'client', 'source', ['client', 'source'], 'device_code', 'bearer' or a function (request) => string | undefined", key)
}

function checkGrantTypes (grantTypes: unknown, at: string, fail: Fail): readonly string[] | null {
  if (grantTypes === undefined) return null
  if (!Array.isArray(grantTypes) || grantTypes.length === 0 || !grantTypes.every(type => typeof type === 'string' && type !== '')) {
    fail(`${at}.exceptGrantTypes`, 'a non-empty array of grant_type values', grantTypes)
  }
  return Object.freeze([...grantTypes as string[]])
}

/**
 * The default name of a pace: the route's URL when it is the route's only pace; otherwise the URL
 * and what the pace counts (`/token#client`, `/token#client+source:rejected`).
 */
function defaultName (url: string, paces: number, key: PaceKeyKind, spend: PaceSpend): string {
  if (paces === 1) return url
  return `${url}#${typeof key === 'string' ? key : 'key'}${spend === 'rejected' ? ':rejected' : ''}`
}

function checkName (name: unknown, defaultName: string, at: string, fail: Fail): string {
  if (name !== undefined && (typeof name !== 'string' || !PRINTABLE_ASCII.test(name))) {
    fail(`${at}.name`, 'a non-empty string of printable ASCII', name)
  }
  if (name === undefined && !PRINTABLE_ASCII.test(defaultName)) {
    fail(`${at}.name`, `given when the route's URL is not printable ASCII (the default name, ${JSON.stringify(defaultName)}, would go into headers)`, name)
  }
  return (name as string | undefined) ?? defaultName
}
