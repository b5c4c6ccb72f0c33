import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { checkKey, declaredClientId, grantType, pairKey, sourceKey } from '../keys/parse.js'
import { bearerKey, deviceCodeKey } from '../keys/secrets.js'
import type { PaceRule } from './route-config.js'
import { ignoreRejection, isThenable } from '../values.js'

/**
 * Reading a pace's key from a Fastify request: the request's parts handed to keys/parse.ts, which knows
 * nothing of Fastify. A reader returns the key, or undefined when the request declares none (the
 * pace then takes nothing from it); a malformed declaration throws `InvalidRequest` (a 400), a key
 * function that returns something other than a string throws a TypeError (a 500: the server's
 * mistake, not the client's).
 */
export type KeyReader = (request: FastifyRequest) => string | undefined

/**
 * The source key of a request without a source address: on a Unix socket Fastify's `request.ip`
 * can be undefined. Such requests share one bucket per pace, as they come through one peer;
 * failing them would take the route down.
 */
const NO_ADDRESS = 'unknown'

/** The readers of one plugin instance: its key length and IPv6 grouping, and one warning per instance for requests without an address. */
export class KeyReaders {
  readonly client: KeyReader
  readonly source: KeyReader
  readonly #maxKeyLength: number

  /** The key of `['client', 'source']` (see `pairKey`); undefined when the request declares no client id. */
  readonly #pair: KeyReader = request => {
    const client = this.client(request)
    return client === undefined ? undefined : pairKey(client, this.source(request) as string)
  }

  constructor (ipv6Subnet: number, maxKeyLength: number, log: FastifyBaseLogger) {
    this.#maxKeyLength = maxKeyLength
    this.client = request => declaredClientId(request.headers.authorization, request.body, maxKeyLength)
    let warned = false
    this.source = request => {
      const address = request.ip as string | undefined
      if (address !== undefined) return sourceKey(address, ipv6Subnet, maxKeyLength)
      if (!warned) {
        warned = true
        log.warn(`exchangepace: a request has no source address (request.ip is undefined, as on a Unix socket): every such request is paced by source as one, under the key ${JSON.stringify(NO_ADDRESS)}. To pace clients apart there, give the pace a key function that reads the address your proxy forwards.`)
      }
      return NO_ADDRESS
    }
  }

  /**
   * The reader of `rule`'s key on the route `route`: undefined for a request of a grant type the
   * pace excepts. A request that names no grant type is not excepted: leaving grant_type out must
   * not escape a pace.
   */
  of (rule: PaceRule, route: string): KeyReader {
    const read = this.#reader(rule, route)
    const { exceptGrantTypes } = rule
    if (exceptGrantTypes === null) return read
    return request => {
      const type = grantType(request.body)
      return type !== undefined && exceptGrantTypes.includes(type) ? undefined : read(request)
    }
  }

  #reader (rule: PaceRule, route: string): KeyReader {
    const { key } = rule
    if (key === 'client') return this.client
    if (key === 'source') return this.source
    if (key === 'client+source') return this.#pair
    if (key === 'device_code') return readDeviceCode
    if (key === 'bearer') return readBearer
    return customReader(key, rule.name, route, this.#maxKeyLength)
  }
}

/** The hashed device_code of a device's token request (keys/secrets.ts): the code is never a key. */
function readDeviceCode (request: FastifyRequest): string | undefined {
  return deviceCodeKey(request.body)
}

/** The hashed bearer token a request presents (keys/secrets.ts): the token is never a key. */
function readBearer (request: FastifyRequest): string | undefined {
  return bearerKey(request.headers.authorization, request.body)
}

/** A key function's reader: its string checked as a client's key, anything else a TypeError naming the route and pace. */
function customReader (key: (request: FastifyRequest) => string | undefined, name: string, route: string, maxKeyLength: number): KeyReader {
  const what = `the key of pace ${JSON.stringify(name)}`
  return request => {
    const value: unknown = key(request)
    if (value === undefined) return undefined
    if (typeof value !== 'string') {
      // A Promise left behind would end the process if it rejected: Node treats an unhandled
      // rejection as an uncaught exception. The 500 that follows already reports the mistake.
      if (isThenable(value)) value.then(undefined, ignoreRejection)
      throw new TypeError(`exchangepace: route ${route}: the key function of pace ${JSON.stringify(name)} returned ${notAKey(value)}; it must return a string or undefined`)
    }
    return checkKey(value, what, maxKeyLength)
  }
}

/** What a key function returned instead of a key, for the error that says so. */
function notAKey (value: unknown): string {
  if (isThenable(value)) return 'a Promise (key functions run synchronously: read the key from the request, or resolve it in an earlier hook)'
  if (value === null) return 'null'
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`
}
