// The limiters of a login-like token route, as the guessing and flood parts configure them
// (bench/parts/guessing/guessing.js, bench/parts/flood/flood.js): exchangepace with given paces, @fastify/rate-limit as its
// README's `{ increment: false }` login example shows, and rate-limiter-flexible's "Login endpoint
// protection" recipe, each on a simulated clock (bench/shared/simulated.js). Each configuration is
// `{ name, library, setup, register(app, clock), failed(request, reply), accepted?(request), rows() }`:
// `register` returns the route's options, `failed` answers a wrong secret, `rows` counts the
// records the limiter holds.

import { createRequire } from 'node:module'
import rateLimit from '@fastify/rate-limit'
import exchangePace from 'exchangepace'

const require = createRequire(import.meta.url)
const { RateLimiterMemory, RateLimiterRes } = require('rate-limiter-flexible')
const MemoryStorage = require('rate-limiter-flexible/lib/component/MemoryStorage/MemoryStorage')
const LocalStore = require('@fastify/rate-limit/store/LocalStore')

export const INVALID_CLIENT = { error: 'invalid_client' }
export const TOKEN = { access_token: 'eyJhbGciOiJub25lIn0.eyJzdWIiOiJyZXBvcnRpbmcifQ.', token_type: 'Bearer', expires_in: 3600 }

/** exchangepace with `paces` on the route: a failed authentication sets the outcome flag. */
export function exchangepaceWith (name, paces, pluginOptions = {}) {
  let registered = null
  return {
    name,
    library: 'exchangepace',
    setup: paces,
    async register (app, clock) {
      registered = app
      await app.register(exchangePace, { now: clock.now, ...pluginOptions })
      return { config: { pace: paces } }
    },
    rows: () => registered.pace.names().reduce((sum, name) => sum + registered.pace.get(name).size, 0),
    failed (request, reply) {
      request.pace.outcome = 'rejected'
      return reply.code(401).send(INVALID_CLIENT)
    }
  }
}

/**
 * @fastify/rate-limit as its README's example of `{ increment: false }` shows for a login route:
 * peek before the check, refuse when exceeded, consume only when the login fails.
 */
export function fastifyRateLimitWith (name, keyGenerator) {
  const limiterOptions = { max: 5, timeWindow: '1 minute', ...(keyGenerator === undefined ? {} : { keyGenerator }) }
  let checkRateLimit
  const routeStores = []
  return {
    name,
    library: '@fastify/rate-limit',
    setup: { createRateLimit: { ...limiterOptions, keyGenerator: keyGenerator === undefined ? 'request.ip (default)' : String(keyGenerator) } },
    rows: () => routeStores.reduce((sum, store) => sum + store.lru.size, 0),
    async register (app) {
      await app.register(rateLimit, { global: false, store: countedLocalStore(routeStores) })
      checkRateLimit = app.createRateLimit(limiterOptions)
      return {
        preHandler: async (request, reply) => {
          const status = await checkRateLimit(request, { increment: false })
          if (status.isExceeded) return reply.code(429).send({ error: 'Too many attempts' })
        }
      }
    },
    async failed (request, reply) {
      await checkRateLimit(request)
      return reply.code(401).send(INVALID_CLIENT)
    }
  }
}

/**
 * rate-limiter-flexible's in-memory storage with its records expiring by the simulated clock
 * instead of by timers: a record is gone from its `expiresAt` on, as the recipe's Redis key (PX)
 * would be. No timer is armed, so the recipe's 90-day duration does not overflow setTimeout
 * (RateLimiterMemory itself takes at most about 24 days, its documentation says).
 */
class SimulatedMemoryStorage extends MemoryStorage {
  set (key, value, durationSec) {
    const durationMs = durationSec * 1000
    this._storage.set(key, { value, expiresAt: durationMs > 0 ? Date.now() + durationMs : null, timeoutId: null })
    return new RateLimiterRes(0, durationMs > 0 ? durationMs : -1, value, true)
  }

  get (key) {
    const expiresAt = this._storage.get(key)?.expiresAt
    if (expiresAt != null && expiresAt <= Date.now()) this._storage.delete(key)
    return super.get(key)
  }
}

/** A RateLimiterMemory on the simulated clock (its storage is private: replaced here, for the bench alone). */
function simulatedLimiter (opts) {
  const limiter = new RateLimiterMemory(opts)
  limiter._memoryStorage = new SimulatedMemoryStorage()
  return limiter
}

const MAX_WRONG_ATTEMPTS_BY_IP_PER_DAY = 100
const MAX_CONSECUTIVE_FAILS_BY_USERNAME_AND_IP = 10
const RLF_LIMITERS = {
  slowBruteByIP: { keyPrefix: 'login_fail_ip_per_day', points: MAX_WRONG_ATTEMPTS_BY_IP_PER_DAY, duration: 60 * 60 * 24, blockDuration: 60 * 60 * 24 },
  consecutiveFailsByUsernameAndIP: { keyPrefix: 'login_fail_consecutive_username_and_ip', points: MAX_CONSECUTIVE_FAILS_BY_USERNAME_AND_IP, duration: 60 * 60 * 24 * 90, blockDuration: 60 * 60 }
}

/** The 429 of the recipe, with its Retry-After. */
const tooMany = (reply, res) => reply.code(429).header('retry-after', String(Math.round(res.msBeforeNext / 1000) || 1)).send({ error: 'Too Many Requests' })

/**
 * rate-limiter-flexible's "Login endpoint protection" recipe, with the declared client id as the
 * username: both limiters read before the check (the route refuses when either is over its
 * points), both consumed on a failure (the named client exists, so the recipe counts its pair), the
 * pair's record deleted on a success.
 */
export function rateLimiterFlexibleRecipe () {
  const slowBruteByIP = simulatedLimiter(RLF_LIMITERS.slowBruteByIP)
  const consecutiveFailsByUsernameAndIP = simulatedLimiter(RLF_LIMITERS.consecutiveFailsByUsernameAndIP)
  const usernameIPkey = request => `${request.body.client_id}_${request.ip}`
  const seen = new WeakMap() // request -> the pair's record as read before the check
  return {
    name: 'rate-limiter-flexible, login recipe',
    library: 'rate-limiter-flexible',
    setup: RLF_LIMITERS,
    rows: () => slowBruteByIP._memoryStorage._storage.size + consecutiveFailsByUsernameAndIP._memoryStorage._storage.size,
    async register () {
      return {
        preHandler: async (request, reply) => {
          const [resUsernameAndIP, resSlowByIP] = await Promise.all([
            consecutiveFailsByUsernameAndIP.get(usernameIPkey(request)),
            slowBruteByIP.get(request.ip)
          ])
          seen.set(request, resUsernameAndIP)
          if (resSlowByIP !== null && resSlowByIP.consumedPoints > MAX_WRONG_ATTEMPTS_BY_IP_PER_DAY) return tooMany(reply, resSlowByIP)
          if (resUsernameAndIP !== null && resUsernameAndIP.consumedPoints > MAX_CONSECUTIVE_FAILS_BY_USERNAME_AND_IP) return tooMany(reply, resUsernameAndIP)
        }
      }
    },
    async failed (request, reply) {
      try {
        await Promise.all([slowBruteByIP.consume(request.ip), consecutiveFailsByUsernameAndIP.consume(usernameIPkey(request))])
        return reply.code(401).send(INVALID_CLIENT)
      } catch (rejected) {
        if (rejected instanceof Error) throw rejected
        return tooMany(reply, rejected)
      }
    },
    async accepted (request) {
      const resUsernameAndIP = seen.get(request)
      if (resUsernameAndIP !== null && resUsernameAndIP.consumedPoints > 0) await consecutiveFailsByUsernameAndIP.delete(usernameIPkey(request))
    }
  }
}

/**
 * @fastify/rate-limit's in-memory store as the plugin builds it by default (an LRU of 5000 per
 * route), which hands each route's store to `routeStores` so that its entries can be counted.
 */
export function countedLocalStore (routeStores) {
  return class extends LocalStore {
    constructor (params) {
      super(params.continueExceeding, params.exponentialBackoff)
    }

    child (routeOptions) {
      const store = super.child(routeOptions)
      routeStores.push(store)
      return store
    }
  }
}
