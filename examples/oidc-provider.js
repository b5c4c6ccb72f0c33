// panva's oidc-provider (a Koa app, OpenID Certified) mounted in Fastify 5 with @fastify/middie,
// as its docs show, its endpoints paced by exchangepace as docs/endpoints.md recommends
// (docs/oidc-provider.md says how). oidc-provider has no rate limiting of its own.
//
// The endpoints exchangepace paces are Fastify routes: each reads the body (the client id from
// HTTP Basic, the form's client_id or a client assertion), reserves, and hands the request, its
// body still readable, to oidc-provider on the raw response. oidc-provider answers as it always
// does; exchangepace reads the exchange's outcome from that answer (RFC 6749 section 5.2: a 401,
// or a 400 invalid_client, is a failed client authentication) and adds the quota headers to it.
// Everything else (discovery, JWKS, sign-in and consent) is the provider mounted with
// @fastify/middie, unpaced.
//
// oidc-provider 9 runs on Node 22 and later (on Node 20 it warns "Unsupported runtime").

import { generateKeyPairSync } from 'node:crypto'
import { Readable } from 'node:stream'
import Fastify from 'fastify'
import middie from '@fastify/middie'
import Provider from 'oidc-provider'
import exchangePace from 'exchangepace'
import { CLIENTS } from './client-auth.js'
import { DEVICE_INTERVAL } from './device-flow.js'
import { PACES } from './endpoint-paces.js'
import { bodyBytes, keepBodyBytes } from './form-bytes.js'

/** Where the provider is mounted: the path of the issuer. */
export const MOUNT = '/oidc'

/** oidc-provider's endpoints (its default paths, under MOUNT) and their paces. */
const PACED = [
  ['POST', '/token', PACES.token],
  ['POST', '/device/auth', PACES.deviceAuthorization],
  [['GET', 'POST'], '/auth', PACES.authorization],
  ['POST', '/request', PACES.par],
  ['POST', '/token/introspection', PACES.introspection],
  ['POST', '/token/revocation', PACES.revocation],
  [['GET', 'POST'], '/me', PACES.userinfo]
]

/** examples/client-auth.js's clients, as oidc-provider registers them: each authenticates one way. */
function clientMetadata () {
  const methods = { reporting: 'client_secret_basic', billing: 'client_secret_post', webapp: 'client_secret_basic', mobile: 'client_secret_post', tv: 'none', analytics: 'private_key_jwt' }
  return [...CLIENTS].map(([id, client]) => ({
    client_id: id,
    ...(client.secret === undefined ? {} : { client_secret: client.secret }),
    ...(client.jwk === undefined ? {} : { jwks: { keys: [client.jwk] } }),
    token_endpoint_auth_method: methods[id],
    grant_types: client.grantTypes,
    response_types: client.grantTypes.includes('authorization_code') ? ['code'] : [],
    redirect_uris: client.redirectUris,
    ...(id === 'mobile' ? { application_type: 'native' } : {}),
    id_token_signed_response_alg: 'ES256',
    scope: ['openid', ...client.scopes].join(' ')
  }))
}

/** A stateful store for oidc-provider in this process's memory (a real one is in a database): its adapter contract. */
export function memoryAdapter () {
  const rows = new Map()
  const live = key => {
    const row = rows.get(key)
    if (row === undefined || row.expiresAt < Date.now()) return undefined
    return row.payload
  }
  return class MemoryAdapter {
    constructor (model) { this.model = model }
    key (id) { return `${this.model}:${id}` }
    async upsert (id, payload, expiresIn = 3600) {
      const expiresAt = Date.now() + expiresIn * 1000
      rows.set(this.key(id), { payload, expiresAt })
      if (payload.userCode !== undefined) rows.set(`userCode:${payload.userCode}`, { payload: id, expiresAt })
      if (payload.uid !== undefined) rows.set(`uid:${payload.uid}`, { payload: id, expiresAt })
    }

    async find (id) { return live(this.key(id)) }
    async findByUserCode (userCode) { const id = live(`userCode:${userCode}`); return id === undefined ? undefined : live(this.key(id)) }
    async findByUid (uid) { const id = live(`uid:${uid}`); return id === undefined ? undefined : live(this.key(id)) }
    async consume (id) { const payload = live(this.key(id)); if (payload !== undefined) payload.consumed = Math.floor(Date.now() / 1000) }
    async destroy (id) { rows.delete(this.key(id)) }
    async revokeByGrantId (grantId) {
      for (const [key, row] of rows) if (row.payload?.grantId === grantId) rows.delete(key)
    }
  }
}

/** The account a subject names (a real server looks it up): its claims are its subject alone. */
export async function findAccount (_ctx, sub) {
  return { accountId: sub, claims: async () => ({ sub }) }
}

/** An error oidc-provider would render as a page, answered as JSON (the example has no pages). */
export async function renderError (ctx, out) {
  ctx.type = 'json'
  ctx.body = out
}

/** The provider, configured so that it needs none of its development-only defaults (each of which warns). */
export function provider (issuer) {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const oidc = new Provider(issuer, {
    adapter: memoryAdapter(),
    clients: clientMetadata(),
    jwks: { keys: [{ ...privateKey.export({ format: 'jwk' }), kid: 'example', alg: 'ES256', use: 'sig' }] },
    cookies: { keys: ['exchangepace example cookie key'] },
    scopes: ['openid', ...new Set([...CLIENTS.values()].flatMap(client => client.scopes))],
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      deviceFlow: { enabled: true },
      introspection: { enabled: true, allowedPolicy: async () => true },
      revocation: { enabled: true, allowedPolicy: async () => true }
    },
    interactions: { url: (_ctx, interaction) => `${new URL(issuer).pathname.replace(/\/$/, '')}/interaction/${interaction.uid}` },
    findAccount,
    renderError,
    ttl: { AccessToken: 3600, ClientCredentials: 3600, DeviceCode: 600, Grant: 3600, IdToken: 3600, Interaction: 600, Session: 3600, RefreshToken: 86400 }
  })
  // RFC 8628 section 3.2: the device authorization response tells the device how long to wait
  // between polls; oidc-provider leaves `interval` out (its default, 5 seconds, is what the pace holds).
  oidc.use(async (ctx, next) => {
    await next()
    if (ctx.oidc?.route === 'device_authorization' && ctx.status === 200) ctx.body = { ...ctx.body, interval: DEVICE_INTERVAL }
  })
  return oidc
}

/**
 * The request handed to oidc-provider: the same method, headers and socket, its URL relative to
 * the mount (as @fastify/middie hands it), and the body Fastify read, readable again.
 */
function replayed (request) {
  const raw = request.raw
  const bytes = bodyBytes(request)
  const replay = new Readable({
    read () {
      if (bytes !== undefined) this.push(bytes)
      this.push(null)
    }
  })
  return Object.assign(replay, {
    method: raw.method,
    url: raw.url.slice(MOUNT.length),
    originalUrl: raw.url,
    headers: raw.headers,
    rawHeaders: raw.rawHeaders,
    httpVersion: raw.httpVersion,
    httpVersionMajor: raw.httpVersionMajor,
    httpVersionMinor: raw.httpVersionMinor,
    socket: raw.socket,
    connection: raw.socket
  })
}

/**
 * Fastify serving oidc-provider at `issuer` (its path is the mount, `/oidc`), paced on the memory
 * of this process or on `store` (a RedisStore), on the clock `now` (for tests). The plugin's
 * `isClient` reads the registry oidc-provider serves (CLIENTS): a flood of made-up client ids
 * leaves a row per address, not per id.
 */
export async function buildServer ({ issuer, store, now, logger = false } = {}) {
  const app = Fastify({ logger })
  const oidc = provider(issuer)
  const callback = oidc.callback()
  await app.register(middie)
  // isClient: the clients oidc-provider serves (clientMetadata above); a declared id that names none
  // takes nothing from the paces keyed by the client id, and its failure spends its address's budget.
  await app.register(exchangePace, { store, now, isClient: id => CLIENTS.has(id) })
  keepBodyBytes(app)
  for (const [method, path, pace] of PACED) {
    app.route({
      method,
      url: `${MOUNT}${path}`,
      config: { pace },
      handler (request, reply) {
        reply.hijack()
        callback(replayed(request), reply.raw)
      }
    })
  }
  // The rest of the provider, mounted as its docs show; the paced endpoints are the routes above.
  const paced = new Set(PACED.map(([, path]) => path))
  app.use(MOUNT, (req, res, next) => paced.has(req.url.split('?')[0]) ? next() : callback(req, res))
  return app
}
