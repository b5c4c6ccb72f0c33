// Part 8's guessing through a gateway (bench/parts/guessing/guessing.js): the same attacker and real client, sent
// to a Fastify gateway in front of oidc-provider started unpaced (examples/oidc-provider.js's
// `provider`, the clients of examples/client-auth.js), over real HTTP from the gateway to it, the
// gateway's clock and Date.now simulated. The client is `billing` (client_secret_post). A guess is
// checked when it reaches oidc-provider, which answers it 401 invalid_client.
//
//   exchangepace, the gateway         examples/gateway.js: the token paces of examples/endpoint-paces.js
//                                     (the README's four), given the upstream's client ids (`isClient`,
//                                     CLIENTS) as the recommended set-up is, the outcome read from
//                                     oidc-provider's answer
//   @fastify/rate-limit, the gateway  @fastify/reply-from with @fastify/rate-limit's per-route limit as
//                                     its README shows it (`config: { rateLimit: { max, timeWindow } }`),
//                                     5 a minute per address: a proxy's limiter cannot tell a failure
//                                     from a success, so it counts every request
//
// oidc-provider 9 supports Node 22 and later: on an older Node the runs are skipped, and say why.

import http from 'node:http'
import Fastify from 'fastify'
import rateLimit from '@fastify/rate-limit'
import replyFrom from '@fastify/reply-from'
import { bodyBytes, keepBodyBytes } from '../../../examples/form-bytes.js'
import { PACES } from '../../../examples/endpoint-paces.js'
import { buildGateway } from '../../../examples/gateway.js'
import { CLIENTS } from '../../../examples/client-auth.js'
import { countedLocalStore } from '../../shared/login-limiters.js'

export const GATEWAY_CLIENT = { id: 'billing', secret: 'billing-secret' }
export const GATEWAY_LIMIT = { max: 5, timeWindow: '1 minute' }

/** Why the runs cannot happen on this Node, or null. */
export function gatewaySkipped () {
  const major = Number(process.versions.node.split('.')[0])
  return major >= 22 ? null : `oidc-provider 9 needs Node 22 or later, this is ${process.version}`
}

/** oidc-provider unpaced on a port of its own: its base URL and how to close it. Made inside the simulation, so its times follow Date.now. */
async function upstream () {
  const { provider } = await import('../../../examples/oidc-provider.js')
  const server = http.createServer()
  await new Promise(resolve => server.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${server.address().port}`
  server.on('request', provider(base).callback())
  return { base, close: () => new Promise(resolve => server.close(resolve)) }
}

/** The gateway's token pace that sets a client's rate: 5/s per client id. */
const CLIENT_PACE = PACES.token.find(pace => pace.name === 'token')

/**
 * The two gateways. `build(clock)` resolves with the app, how to close it and upstream, and
 * `rows()`: what the limiter holds (exchangepace: rows over the gateway's paces;
 * @fastify/rate-limit: the entries of its route's LRU); exchangepace's also `rowsByPace()`, its
 * rows by pace name. `client` is the real client; `rate` its rate as each limits it, `limit`
 * requests a `window` of seconds.
 */
export const GATEWAY_CONFIGURATIONS = [
  {
    name: 'exchangepace, the gateway',
    library: 'exchangepace',
    setup: 'examples/gateway.js (the token paces of examples/endpoint-paces.js), isClient: the upstream\'s CLIENTS',
    client: GATEWAY_CLIENT,
    rate: { limit: CLIENT_PACE.perSecond, window: 1, per: 'client id' },
    async build (clock) {
      const server = await upstream()
      // The upstream's client ids, as the recommended set-up gives them (docs/gateway.md).
      const app = await buildGateway({ upstream: server.base, paths: { token: '/token' }, now: clock.now, isClient: id => CLIENTS.has(id) })
      const rowsByPace = () => Object.fromEntries(app.pace.names().map(name => [name, app.pace.get(name).size]))
      const rows = () => Object.values(rowsByPace()).reduce((sum, size) => sum + size, 0)
      return { app, rows, rowsByPace, close: async () => { await app.close(); await server.close() } }
    }
  },
  {
    name: '@fastify/rate-limit, the gateway',
    library: '@fastify/rate-limit',
    setup: { route: { config: { rateLimit: GATEWAY_LIMIT } }, keyGenerator: 'request.ip (default)' },
    client: GATEWAY_CLIENT,
    rate: { limit: GATEWAY_LIMIT.max, window: 60, per: 'address' }, // GATEWAY_LIMIT's '1 minute'
    async build () {
      const server = await upstream()
      const app = Fastify()
      // Its default store, an LRU of 5000 per route, with the route's store kept to count its entries.
      const routeStores = []
      await app.register(rateLimit, { global: false, store: countedLocalStore(routeStores) })
      await app.register(replyFrom, { base: server.base })
      keepBodyBytes(app)
      app.post('/token', { config: { rateLimit: GATEWAY_LIMIT } }, (request, reply) => reply.from(request.url, { body: bodyBytes(request), contentType: request.headers['content-type'] }))
      const rows = () => routeStores.reduce((sum, store) => sum + store.lru.size, 0)
      return { app, rows, close: async () => { await app.close(); await server.close() } }
    }
  }
]
