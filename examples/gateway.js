// A gateway in front of an authorization server that paces nothing (Keycloak, Ory Hydra, Duende
// IdentityServer, oidc-provider unpaced): Fastify with @fastify/reply-from forwards the token,
// device authorization, authorization, PAR, introspection and revocation endpoints, each paced as
// docs/endpoints.md recommends (the same paces as examples/oidc-provider.js), and docs/gateway.md
// says how to point it at Keycloak or Hydra.
//
// The request body goes upstream byte for byte (a client_secret_post or a private_key_jwt
// assertion verifies there as if sent directly), and every upstream status and header comes back.
// exchangepace reads each exchange's outcome from the upstream's answer (RFC 6749 section 5.2: a
// 401, or a 400 invalid_client, is a failed client authentication) before it goes back, and adds
// the quota headers to it.

import Fastify from 'fastify'
import replyFrom from '@fastify/reply-from'
import exchangePace from 'exchangepace'
import { bodyBytes, keepBodyBytes } from './form-bytes.js'
import { PACES } from './endpoint-paces.js'

/** oidc-provider's default endpoint paths; another server's are given to `buildGateway` (docs/gateway.md). */
export const OIDC_PROVIDER_PATHS = {
  token: '/token',
  deviceAuthorization: '/device/auth',
  authorization: '/auth',
  par: '/request',
  introspection: '/token/introspection',
  revocation: '/token/revocation'
}

/**
 * Keycloak's, for one realm (its server administration guide's endpoint list), under
 * `/realms/{realm}/protocol/openid-connect`.
 */
export function keycloakPaths (realm) {
  const base = `/realms/${realm}/protocol/openid-connect`
  return {
    token: `${base}/token`,
    deviceAuthorization: `${base}/auth/device`,
    authorization: `${base}/auth`,
    par: `${base}/ext/par/request`,
    introspection: `${base}/token/introspect`,
    revocation: `${base}/revoke`
  }
}

/**
 * Ory Hydra's public endpoints (its API reference). Its introspection is on the admin port, which
 * resource servers reach inside the network, not through a public gateway, and it serves no PAR.
 */
export const HYDRA_PATHS = {
  token: '/oauth2/token',
  deviceAuthorization: '/oauth2/device/auth',
  authorization: '/oauth2/auth',
  revocation: '/oauth2/revoke'
}

/**
 * Fastify forwarding to `upstream` (a base URL) the endpoints at `paths`, paced in this process's
 * memory or on `store` (a RedisStore), on the clock `now` (for tests). `outcomeOf` reads a failed
 * client authentication from an upstream that does not answer it as RFC 6749 asks; `trustProxy`
 * names the proxies in front of the gateway (Fastify's option), whose forwarded addresses the
 * per-address paces key by.
 *
 * `isClient(clientId, request) => boolean` (the plugin's option) says whether a declared id names
 * one of the upstream's clients. The gateway does not know the upstream's registry, so the operator
 * gives it the set of client ids (kept from Keycloak's admin API, or a config file) and answers from
 * it at once: a made-up id then takes nothing from the paces keyed by the client id, and its failure
 * spends its address's budget, a row per address. Without it, each made-up id that failed keeps a
 * row in the failure budget per (client id, address) until its unit is back (12 minutes at 5 an
 * hour), beside its address's.
 */
export async function buildGateway ({ upstream, paths = OIDC_PROVIDER_PATHS, store, now, outcomeOf, isClient, logger = false, trustProxy } = {}) {
  const app = Fastify({ logger, trustProxy })
  await app.register(replyFrom, { base: upstream })
  await app.register(exchangePace, { store, now, outcomeOf, isClient })
  keepBodyBytes(app)
  for (const [endpoint, path] of Object.entries(paths)) {
    app.route({
      method: endpoint === 'authorization' ? ['GET', 'POST'] : 'POST',
      url: path,
      config: { pace: PACES[endpoint] },
      handler (request, reply) {
        const bytes = bodyBytes(request)
        return reply.from(request.url, bytes === undefined ? {} : { body: bytes, contentType: request.headers['content-type'] })
      }
    })
  }
  return app
}
