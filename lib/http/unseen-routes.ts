import type { FastifyInstance } from 'fastify'
import { isPaced } from './request-ticket.js'

/**
 * Routes that declare `config.pace` but that the plugin never saw: added before it loaded (the
 * plugin registered without `await`, the route added in the same turn), they never passed its
 * onRoute hook, and served as they are they would be unpaced without a word.
 *
 * Fastify lists no routes to a plugin, so such a route cannot be found when the app gets ready.
 * Instead, when the router already holds routes as the plugin loads, an onRequest hook of the
 * plugin's scope answers every request of such a route with a 500, and logs the route at error
 * once: the route is never served unpaced. The hook is added only then, so that an app that
 * registers the plugin before its routes pays nothing on its unpaced routes.
 */

/** What `printRoutes` gives for a router that holds no route yet (find-my-way's words). */
const NO_ROUTES = '(empty tree)'

/** Adds the hook when routes were added before the plugin loaded (see above). */
export function guardUnseenRoutes (fastify: FastifyInstance): void {
  if (fastify.printRoutes() === NO_ROUTES) return
  const logged = new WeakSet<object>()
  fastify.addHook('onRequest', function refuseUnseenRoute (request, _reply, next) {
    const config = request.routeOptions.config
    if (config.pace === undefined || isPaced(config)) return next()
    const route = `${config.method} ${config.url}`
    const err = new Error(`exchangepace: route ${route} declares config.pace but was added before exchangepace loaded, so it is not paced: register exchangepace with await (or add the route in .after() or a later plugin)`)
    if (!logged.has(config)) {
      logged.add(config)
      request.log.error({ route }, err.message)
    }
    next(err)
  })
}
