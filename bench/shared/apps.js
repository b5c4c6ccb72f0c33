// The token endpoint every HTTP-level part measures, built four ways:
//
//   bare           the route alone: @fastify/formbody and a client_credentials handler
//   onresponse     the same, plus a no-op onResponse on the route alone: what that hook costs by
//                  itself (Fastify then attaches response listeners to every request, as it does
//                  for every route of a server with a logger)
//   empty          the same, plus a no-op preHandler and onResponse on the route: the hooks the
//                  design card names, with nothing in them (a gauge of each run's noise; exchangepace
//                  itself settles in onSend and adds no onResponse)
//   exchangepace   paced per declared client id, spend 'accepted' (refunded when the secret is wrong)
//   exchangepace-hook
//                  the same with an `onEvent` hook set: a no-op counter of the events (refusals,
//                  refunds), what an operator's metrics hook costs at the least
//   ratelimit      @fastify/rate-limit, keyed by the body's client_id (so in preHandler, after the
//                  body is parsed), its in-memory LocalStore with the default LRU of 5000
//   floor          the hooks exchangepace adds with no pace in them: a no-op preHandler and an
//                  onSend writing the two quota headers (RateLimit-Policy and RateLimit) with fixed
//                  values: the least any plugin of this shape that sends the draft's headers can
//                  cost
//   floor-429      the floor with the 429 response in the route's schema, as exchangepace documents
//                  it: Fastify then looks up a serializer by status code on every response
//   headers        no hook at all: the handler writes the same two headers with the same fixed
//                  values before it answers: what the draft's headers cost by themselves
//   unpaced       exchangepace registered, the route not paced: what the plugin costs a route it
//                  does not pace (bench/tools/unpaced.js)
//   unpaced-read  the same, the handler reading `request.pace` (an inert ticket) on every request
//   exchangepace-redis, ratelimit-redis
//                  the same two on Redis (127.0.0.1:6379, or REDIS_URL): exchangepace's RedisStore
//                  and @fastify/rate-limit's Redis store, each with its own ioredis client with
//                  auto-pipelining on
//   exchangepace-redis-three
//                  the README's recommended token route on the RedisStore: a failure budget per
//                  (client id, source), an exchange pace per client id, a ceiling per source, each
//                  at a rate nobody reaches (bench/parts/latency/latency.js)
//   ratelimit-redis-three
//                  @fastify/rate-limit's Redis store (its script, its calls) asked for the same
//                  three keys at once in one preHandler hook, no headers: the least a limiter
//                  keeping three keys in Redis waits for (bench/parts/latency/latency.js)
//
// Routes: POST /token at `perSecond` (default: a rate nobody reaches, so no request is refused),
// and POST /token-tight at `tightPerSecond` (default 1/s), for the 429 path.

import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import rateLimit from '@fastify/rate-limit'
import RateLimitRedisStore from '@fastify/rate-limit/store/RedisStore.js'
import Redis from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'

export const KINDS = ['bare', 'onresponse', 'empty', 'floor', 'floor-429', 'headers', 'exchangepace', 'exchangepace-hook', 'ratelimit', 'exchangepace-redis', 'ratelimit-redis', 'exchangepace-redis-three', 'ratelimit-redis-three', 'unpaced', 'unpaced-read']
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
/** The RedisStore's `timeoutMs` (REDIS_TIMEOUT_MS), or its default: the latency part sets one no answer reaches. */
const REDIS_TIMEOUT_MS = process.env.REDIS_TIMEOUT_MS === undefined ? undefined : Number(process.env.REDIS_TIMEOUT_MS)

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

/** The exchangepace-hook server's `onEvent`: counts events, as a metrics hook would. */
const seen = { events: 0 }
const countEvent = () => { seen.events++ }

/** What exchangepace writes on an accepted response of a route paced at `rate`, as fixed strings. */
function quotaHeaderValues (url, rate) {
  return { policy: `"${url}";q=${rate};w=1`, quota: `"${url}";r=${rate - 1};t=1` }
}

/** An onSend hook writing those headers. */
function fixedQuotaHeaders (url, rate) {
  const { policy, quota } = quotaHeaderValues(url, rate)
  return (request, reply, payload, done) => {
    reply.header('ratelimit-policy', policy).header('ratelimit', quota)
    done(null, payload)
  }
}

/** The 429 response exchangepace adds to a paced route's schema (lib/http/route-description.ts). */
const RESPONSE_429 = {
  429: {
    description: 'Too many requests: the pace is spent (per replica). Retry after the Retry-After header, in seconds.',
    type: 'object',
    properties: { error: { type: 'string' }, error_description: { type: 'string' } },
    additionalProperties: true
  }
}

/** The token handler writing those headers itself, with no hook. */
function tokenWithQuotaHeaders (url, rate) {
  const { policy, quota } = quotaHeaderValues(url, rate)
  return (request, reply) => {
    reply.header('ratelimit-policy', policy).header('ratelimit', quota)
    token(request, reply)
  }
}

/** The token handler reading `request.pace` first, as a handler shared with paced routes might. */
function tokenReadingPace (request, reply) {
  if (request.pace.paced) throw new Error('bench: the route is not paced')
  token(request, reply)
}

/**
 * A preHandler asking @fastify/rate-limit's Redis `store` for the keys of the README's three paces
 * (the pair, the client id, the source) at once, each limited to `max` a second, and answering 429
 * when one is over. The work of the three calls alone: no headers, no refund.
 */
function threeLimitsHook (store, max) {
  const count = key => new Promise((resolve, reject) => {
    store.incr(key, (err, result) => { if (err) reject(err); else resolve(result.current) }, 1000, max)
  })
  return async (request, reply) => {
    const client = request.body?.client_id ?? ''
    const counts = await Promise.all([count(`${client}|${request.ip}`), count(client), count(request.ip)])
    if (counts.some(current => current > max)) return reply.code(429).send({ error: 'too_many_requests' })
  }
}

/** The Redis server's version, or why it cannot be reached. */
export async function probeRedis () {
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  // Without a listener, ioredis prints a refused connection as "[ioredis] Unhandled error event".
  // The error is the reason to give: connect() itself rejects with "Connection is closed."
  const errors = []
  client.on('error', err => { errors.push(err) })
  try {
    await client.connect()
    const info = await client.info('server')
    return { version: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown' }
  } catch (err) {
    return { unreachable: (errors[0] ?? err).message }
  } finally {
    client.disconnect()
  }
}

/**
 * An ioredis client for a benchmark server, closed with the app. A request still settling when the
 * parent ends the server may send its refund after QUIT: Redis resets that write (EPIPE, an 'error'
 * event), and the reset can lose QUIT's own answer. The connection is closed either way, so the
 * error is heard here (the store reports outages of its own) and a QUIT left unanswered ends in a
 * disconnect, not in a rejection of the app's close.
 */
function redisClient (app) {
  const client = new Redis(REDIS_URL, { enableAutoPipelining: true, maxRetriesPerRequest: 1 })
  client.on('error', () => {})
  app.addHook('onClose', async () => { await client.quit().catch(() => { client.disconnect() }) })
  return client
}

/**
 * A Fastify instance serving the token routes for `kind`. `now` is exchangepace's clock (tests of
 * fidelity inject one); @fastify/rate-limit reads Date.now, which the caller may replace, and
 * `rateLimitStore`, when given, is the store class @fastify/rate-limit builds (its `store` option).
 * `verifying(body)`, when given, is awaited by the handler before it checks the secret: the time
 * client authentication takes, which a simulation decides.
 */
export async function buildTokenApp (kind, { perSecond = NEVER, tightPerSecond = 1, now, logger = false, verifying, rateLimitStore } = {}) {
  if (!KINDS.includes(kind)) throw new TypeError(`bench: kind must be one of ${KINDS.join(', ')}, got ${kind}`)
  const app = Fastify({ logger })
  await app.register(formbody)
  if (kind === 'exchangepace' || kind.startsWith('unpaced')) await app.register(exchangePace, now === undefined ? {} : { now })
  if (kind === 'exchangepace-hook') await app.register(exchangePace, { onEvent: countEvent })
  if (kind === 'ratelimit') await app.register(rateLimit, rateLimitStore === undefined ? { global: false } : { global: false, store: rateLimitStore })
  if (kind.startsWith('exchangepace-redis')) await app.register(exchangePace, { store: new RedisStore({ client: redisClient(app), prefix: 'bench:exchangepace:', timeoutMs: REDIS_TIMEOUT_MS }) })
  if (kind === 'ratelimit-redis') await app.register(rateLimit, { global: false, redis: redisClient(app), nameSpace: 'bench:ratelimit:' })
  const threeLimits = kind === 'ratelimit-redis-three' ? new RateLimitRedisStore(false, false, redisClient(app), 'bench:ratelimit-three:') : null

  const route = (url, rate) => {
    const options = { config: {} }
    if (kind === 'onresponse') {
      options.onResponse = noop
    } else if (kind === 'empty') {
      options.preHandler = noop
      options.onResponse = noop
    } else if (kind === 'floor' || kind === 'floor-429') {
      options.preHandler = noop
      options.onSend = fixedQuotaHeaders(url, rate)
      if (kind === 'floor-429') options.schema = { response: RESPONSE_429 }
    } else if (kind === 'exchangepace-redis-three') {
      options.config.pace = [
        // Refunded on every accepted exchange; a RedisStore counts at most 2^16 per window other than a second.
        { limit: 60_000, window: 3600, key: ['client', 'source'], spend: 'rejected' },
        { perSecond: rate, key: 'client', spend: 'accepted' },
        { perSecond: rate, key: 'source', spend: 'every' }
      ]
    } else if (threeLimits !== null) {
      options.preHandler = threeLimitsHook(threeLimits, rate)
    } else if (kind.startsWith('exchangepace')) {
      options.config.pace = { perSecond: rate, key: 'client', spend: 'accepted' }
    } else if (kind.startsWith('ratelimit')) {
      options.config.rateLimit = {
        max: rate,
        timeWindow: 1000,
        hook: 'preHandler',
        keyGenerator: request => request.body?.client_id ?? request.ip
      }
    }
    const handler = kind === 'headers' ? tokenWithQuotaHeaders(url, rate) : kind === 'unpaced-read' ? tokenReadingPace : token
    app.post(url, options, verifying === undefined
      ? handler
      : async (request, reply) => {
        await verifying(request.body)
        token(request, reply)
        return reply
      })
  }
  route('/token', perSecond)
  route('/token-tight', tightPerSecond)
  await app.ready()
  return app
}
