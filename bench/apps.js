// The token endpoint every HTTP-level part measures, built four ways:
//
//   bare           the route alone: @fastify/formbody and a client_credentials handler
//   empty          the same, plus a no-op preHandler and onResponse on the route: the shape of
//                  exchangepace's hooks with nothing in them (the floor of the design, and a gauge
//                  of each run's noise)
//   exchangepace   paced per declared client id, spend 'accepted' (refunded when the secret is wrong)
//   ratelimit      @fastify/rate-limit, keyed by the body's client_id (so in preHandler, after the
//                  body is parsed), its in-memory LocalStore with the default LRU of 5000
//
// Routes: POST /token at `perSecond` (default: a rate nobody reaches, so no request is refused),
// and POST /token-tight at `tightPerSecond` (default 1/s), for the 429 path.

import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import rateLimit from '@fastify/rate-limit'
import exchangePace from 'exchangepace'

export const KINDS = ['bare', 'empty', 'exchangepace', 'ratelimit']

export const CLIENT_ID = 'reporting'
export const CLIENT_SECRET = 'reporting-secret'
const CLIENTS = new Map([[CLIENT_ID, CLIENT_SECRET], ['billing', 'billing-secret']])

/** A client_credentials request body (client_secret_post). */
export function tokenBody (clientId = CLIENT_ID, secret = CLIENT_SECRET) {
  return `grant_type=client_credentials&client_id=${encodeURIComponent(clientId)}&client_secret=${encodeURIComponent(secret)}`
}

export const FORM = 'application/x-www-form-urlencoded'
export const NEVER = 1e6

const TOKEN = { access_token: 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJyZXBvcnRpbmcifQ.', token_type: 'Bearer', expires_in: 3600 }

/** The handler: client authentication, then a token. A wrong secret marks the exchange rejected. */
function token (request, reply) {
  const body = request.body
  const expected = CLIENTS.get(body.client_id)
  reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
  if (expected === undefined || body.client_secret !== expected) {
    if (request.pace) request.pace.outcome = 'rejected'
    reply.code(401).send({ error: 'invalid_client' })
    return
  }
  reply.send(TOKEN)
}

const noop = (request, reply, done) => done()

/**
 * A Fastify instance serving the token routes for `kind`. `now` is exchangepace's clock (tests of
 * fidelity inject one); @fastify/rate-limit reads Date.now, which the caller may replace.
 */
export async function buildTokenApp (kind, { perSecond = NEVER, tightPerSecond = 1, now, logger = false } = {}) {
  if (!KINDS.includes(kind)) throw new TypeError(`bench: kind must be one of ${KINDS.join(', ')}, got ${kind}`)
  const app = Fastify({ logger })
  await app.register(formbody)
  if (kind === 'exchangepace') await app.register(exchangePace, now === undefined ? {} : { now })
  if (kind === 'ratelimit') await app.register(rateLimit, { global: false })

  const route = (url, rate) => {
    const options = { config: {} }
    if (kind === 'empty') {
      options.preHandler = noop
      options.onResponse = noop
    } else if (kind === 'exchangepace') {
      options.config.pace = { perSecond: rate, key: 'client', spend: 'accepted' }
    } else if (kind === 'ratelimit') {
      options.config.rateLimit = {
        max: rate,
        timeWindow: 1000,
        hook: 'preHandler',
        keyGenerator: request => request.body?.client_id ?? request.ip
      }
    }
    app.post(url, options, token)
  }
  route('/token', perSecond)
  route('/token-tight', tightPerSecond)
  await app.ready()
  return app
}
