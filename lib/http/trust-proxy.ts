import type { FastifyInstance } from 'fastify'

/**
 * Warns, once the server is ready, when Fastify's `trustProxy` makes `request.ip` (every source
 * pace's key) something other than the address of the client: `true` trusts the leftmost
 * X-Forwarded-For, which the client writes; a hop count trusts no proxy at all since Fastify
 * 5.12.1. Addresses, CIDRs or a function are what a deployment behind proxies should give.
 */
export function warnOfTrustProxy (fastify: FastifyInstance): void {
  const trustProxy = trustProxyOf(fastify)
  if (trustProxy === true) {
    fastify.log.warn('exchangepace: trustProxy is true and a route is paced by source: request.ip is then the leftmost X-Forwarded-For, which the client writes. Trust only your proxies, by their addresses (IPs or CIDRs) or a function.')
  } else if (typeof trustProxy === 'number' && trustProxy > 0) {
    fastify.log.warn('exchangepace: trustProxy is a hop count and a route is paced by source: Fastify 5.12.1 and later trust no proxy for a hop count, so request.ip is your proxy\'s address and every client behind it shares each source pace (earlier versions let a client that reaches the server directly write its own address). Trust your proxies by their addresses (IPs or CIDRs) or a function.')
  }
}

/**
 * The server's `trustProxy` option (false when Fastify's options cannot be found). Fastify keeps its
 * options under a symbol and leaves trustProxy out of `initialConfig`, so this looks the symbol up
 * by its description.
 */
function trustProxyOf (fastify: FastifyInstance): unknown {
  const symbols: symbol[] = []
  for (let instance: object | null = fastify; instance !== null; instance = Object.getPrototypeOf(instance) as object | null) {
    symbols.push(...Object.getOwnPropertySymbols(instance))
  }
  const optionsKey = symbols.find(symbol => symbol.description === 'fastify.options')
  return optionsKey !== undefined && (fastify as unknown as Record<symbol, { trustProxy?: unknown }>)[optionsKey].trustProxy
}
