// What the examples read from their environment to run as a fleet of replicas behind a proxy:
//
//   REDIS_URL=redis://10.0.0.5:6379               the paces live in Redis, shared by every replica
//   REDIS_CLUSTER=10.0.0.5:7000,10.0.0.6:7000     or in a Redis Cluster, given by some of its nodes
//   TRUST_PROXY=10.0.0.0/8                        the proxies whose X-Forwarded-For is believed
//                                                 (Fastify's trustProxy: true, a hop count, or
//                                                 addresses and CIDR ranges, comma-separated)
//
// Without them, each replica paces in its own memory and request.ip is the peer's address.

import { Cluster, Redis } from 'ioredis'
import { RedisStore } from 'exchangepace'

/**
 * The store and the trusted proxies `env` gives, and a function that closes the Redis connection
 * (call it after the app has closed). A URL that is not one, or both REDIS_URL and REDIS_CLUSTER,
 * throws a TypeError saying so.
 */
export function fleetFromEnv (env) {
  const { REDIS_URL: url, REDIS_CLUSTER: cluster, TRUST_PROXY: proxies } = env
  if (url && cluster) throw new TypeError('give REDIS_URL or REDIS_CLUSTER, not both')
  const client = url ? new Redis(url, { lazyConnect: true }) : cluster ? new Cluster(clusterNodes(cluster), { lazyConnect: true }) : null
  return {
    store: client === null ? undefined : new RedisStore({ client }),
    trustProxy: trustProxyOf(proxies),
    close: async () => { if (client !== null) await client.quit() }
  }
}

/** `host:port,host:port` as ioredis's Cluster takes its seed nodes. */
function clusterNodes (list) {
  return list.split(',').map(node => {
    const at = node.lastIndexOf(':')
    const port = Number(node.slice(at + 1))
    if (at < 1 || !Number.isInteger(port)) throw new TypeError(`REDIS_CLUSTER must be host:port,host:port..., got ${JSON.stringify(list)}`)
    return { host: node.slice(0, at), port }
  })
}

/** TRUST_PROXY as Fastify's trustProxy: undefined when unset, true, a hop count, or a list of addresses and ranges. */
function trustProxyOf (text) {
  if (text === undefined || text === '') return undefined
  if (text === 'true') return true
  if (/^\d+$/.test(text)) return Number(text)
  return text.split(',').map(part => part.trim())
}
