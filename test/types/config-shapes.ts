// Type test: the shapes a route's config takes in an app's code compile as they did before
// `config.pace` was checked against the object written (lib/http/pace-config.ts): typed route
// options, requests handed to helpers, configs spread and intersected, and `config.pace` read back.
import Fastify, { type FastifyContextConfig, type FastifyRequest, type RouteOptions, type RouteShorthandOptions } from 'fastify'
import exchangePace, { type PaceRouteOptions } from 'exchangepace'

const app = Fastify()
await app.register(exchangePace)
const handler = async () => ({ ok: true })

const budget: PaceRouteOptions = { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' }
const paces: PaceRouteOptions[] = [budget, { perSecond: 5, key: 'client', spend: 'accepted' }]
const options: RouteShorthandOptions = { config: { pace: paces } }
app.post('/typed-options', options, handler)
app.post('/variable', { config: { pace: budget } }, handler)
app.post('/satisfies', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } satisfies PaceRouteOptions } }, handler)

const route: RouteOptions = { method: 'POST', url: '/route', config: { pace: budget }, handler }
app.route(route)

const base: FastifyContextConfig = { pace: budget }
app.post('/spread', { config: { ...base } }, handler)
const marked: FastifyContextConfig & { audit?: boolean } = { ...base, audit: true }
export const same: FastifyContextConfig = marked

function clientOf (request: FastifyRequest): string | undefined {
  const pace = request.routeOptions.config.pace
  return Array.isArray(pace) ? undefined : request.headers.authorization
}
app.post('/helper', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, async (request) => ({ client: clientOf(request) }))

export const read: PaceRouteOptions | readonly PaceRouteOptions[] | undefined = route.config?.pace
