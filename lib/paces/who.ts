import { isIP, isIPv6 } from 'node:net'
import { checkKey, InvalidRequest, pairKey, sourceKey } from '../keys/parse.js'
import { describe } from '../values.js'
import type { PaceKeyName } from './counts.js'

/**
 * One key of a pace, given by its parts as an operator knows them: `{ client }` for a pace keyed by
 * declared client id, `{ source }` (an IP address) by source, `{ client, source }` by the pair, and
 * `{ key }` for a pace with a key function, or for a pace keyed by device code or bearer token the
 * hash the log lines show (`secretKey` of the code or token): the secret itself is never a key.
 */
export interface PaceWho {
  client?: string | undefined
  source?: string | undefined
  key?: string | undefined
}

/** How keys are made on this plugin instance: as requests' keys are. */
export interface KeyMaking {
  readonly ipv6Subnet: number
  readonly maxKeyLength: number
}

/** The parts each kind of key is given by. */
const PARTS: Record<PaceKeyName, readonly (keyof PaceWho)[]> = {
  client: ['client'],
  source: ['source'],
  'client+source': ['client', 'source'],
  function: ['key'],
  device_code: ['key'],
  bearer: ['key']
}

/**
 * The key of `who` in a pace keyed by `kind`, made exactly as a request's is: a source by its IPv6
 * prefix, a pair by the pair's encoding, each checked as a key. Throws a TypeError naming the pace
 * and what is wrong: a missing or extra part, a part that is not a key, a source that is no IP
 * address (or the prefix `2001:db8::/64` as logs show it, of this instance's `ipv6Subnet`).
 */
export function whoKey (pace: string, kind: PaceKeyName, who: unknown, making: KeyMaking): string {
  const parts = PARTS[kind]
  const given = who !== null && typeof who === 'object' ? Object.keys(who).filter(part => (who as Record<string, unknown>)[part] !== undefined) : null
  if (given === null || given.length !== parts.length || !parts.every(part => given.includes(part))) {
    throw new TypeError(`exchangepace: pace ${JSON.stringify(pace)} is keyed by ${kind}: give { ${parts.join(', ')} }, got ${describe(who)}`)
  }
  const { client, source, key } = who as PaceWho
  try {
    if (kind === 'function' || kind === 'device_code' || kind === 'bearer') return checkKey(key, 'key', making.maxKeyLength)
    if (kind === 'source') return operatorSource(source, making)
    const id = checkKey(client, 'client', making.maxKeyLength)
    return kind === 'client' ? id : pairKey(id, operatorSource(source, making))
  } catch (err) {
    // Every check above throws an InvalidRequest: to the operator, a TypeError naming the pace.
    throw new TypeError(`exchangepace: pace ${JSON.stringify(pace)}: ${(err as InvalidRequest).message}`, { cause: err })
  }
}

/**
 * The key prefix of every pair of `who`'s client in a pace keyed by `kind`, when `who` gives the
 * client alone of a pair pace (`{ client }` on `['client', 'source']`: every address of it); null
 * for any other `who`, which names one key.
 */
export function clientPairs (pace: string, kind: PaceKeyName, who: unknown, making: KeyMaking): string | null {
  if (kind !== 'client+source' || who === null || typeof who !== 'object') return null
  const { client, source, key } = who as PaceWho
  if (client === undefined || source !== undefined || key !== undefined) return null
  return pairKey(whoKey(pace, 'client', who, making), '')
}

/** The parts of `key`, a key of a pace keyed by `kind`, as an operator gives them. */
export function whoOf (kind: string, key: string): PaceWho {
  if (kind === 'client') return { client: key }
  if (kind === 'source') return { source: key }
  if (kind !== 'client+source') return { key }
  const at = key.indexOf('\u001f')
  return { client: key.slice(0, at), source: key.slice(at + 1) }
}

/** A prefix as the source keys of IPv6 addresses read: `2001:db8:1:2::/64`. */
const PREFIX = /^([0-9A-Fa-f:]+)\/(\d{1,3})$/

/** The source key of an operator's address: an IP address, or an IPv6 prefix of the instance's length. */
function operatorSource (source: unknown, { ipv6Subnet, maxKeyLength }: KeyMaking): string {
  if (typeof source === 'string') {
    const prefix = PREFIX.exec(source)
    if (isIP(source) !== 0) return sourceKey(source, ipv6Subnet, maxKeyLength)
    if (prefix !== null && isIPv6(prefix[1]) && Number(prefix[2]) === ipv6Subnet) return sourceKey(prefix[1], ipv6Subnet, maxKeyLength)
  }
  throw new InvalidRequest(`source must be an IP address, or an IPv6 prefix /${ipv6Subnet} as the logs show it; got ${describe(source)}`)
}
