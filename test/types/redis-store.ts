// Type test: RedisStore takes the user's ioredis client (Redis or Cluster) without casts, and a
// wrong option fails to compile.
import Fastify from 'fastify'
import { Redis, Cluster } from 'ioredis'
import exchangePace, { RedisStore, type PaceStore, type RedisStoreOptions } from 'exchangepace'

const redis = new Redis({ lazyConnect: true, enableAutoPipelining: true })
const cluster = new Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true })

const options: RedisStoreOptions = { client: redis, prefix: 'pace:', timeoutMs: 25, whenUnavailable: 'fallback', retryMs: 500 }
const store: PaceStore = new RedisStore(options)
const onCluster = new RedisStore({ client: cluster, whenUnavailable: 'closed' })
// An option given as undefined is not set, under exactOptionalPropertyTypes too (this folder's tsconfig).
export const unset = new RedisStore({ client: redis, prefix: undefined, timeoutMs: undefined, whenUnavailable: undefined, retryMs: undefined })
export const scope: string = onCluster.scope
export const down: boolean = onCluster.unavailable

const app = Fastify()
await app.register(exchangePace, { store })

// @ts-expect-error whenUnavailable is 'fallback', 'open' or 'closed'
export const wrongMode = new RedisStore({ client: redis, whenUnavailable: 'retry' })
// @ts-expect-error the client is required
export const noClient = new RedisStore({ prefix: 'pace:' })
// @ts-expect-error timeoutMs is a number of milliseconds
export const wrongTimeout = new RedisStore({ client: redis, timeoutMs: '50ms' })
// @ts-expect-error prefix is a string
export const wrongPrefix = new RedisStore({ client: redis, prefix: 7 })
// @ts-expect-error retryMs is a number of milliseconds
export const wrongRetry = new RedisStore({ client: redis, retryMs: '1s' })
// @ts-expect-error the client is an ioredis client (it defines commands)
export const wrongClient = new RedisStore({ client: { get: () => null } })
