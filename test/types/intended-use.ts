// Type test: the intended use of exchangepace compiles without casts. Compiled by
// `tsc -p test/types/tsconfig.json` against the built package (dist, through the exports map).
import Fastify, { type FastifyRequest } from 'fastify'
import exchangePace, {
  Pace,
  PaceRegistry,
  PaceTicket,
  secretKey,
  type ExchangePaceOptions,
  type PaceCounts,
  type PaceEvent,
  type PaceKeyName,
  type PaceOutcome,
  type PaceRefusal,
  type PaceRefusalAnswer,
  type PaceRefusalOption,
  type PaceRouteOptions
} from 'exchangepace'

const app = Fastify()

const options: ExchangePaceOptions = {
  now: () => performance.now(),
  ipv6Subnet: 56,
  maxKeyLength: 128,
  errorResponseBuilder: (request: FastifyRequest, refusal: PaceRefusal) => ({
    error: 'temporarily_unavailable',
    error_description: `${request.url}: retry in ${refusal.retryAfter} s (${refusal.retryAfterMs} ms, ${refusal.limit} per ${refusal.window} s, ${refusal.perSecond}/s, on ${refusal.name})`
  })
}
await app.register(exchangePace, options)
await app.register(exchangePace, {})
await app.register(exchangePace)
// An option given as undefined is not set, under exactOptionalPropertyTypes too (this folder's tsconfig).
await app.register(exchangePace, { now: undefined, ipv6Subnet: undefined, maxKeyLength: undefined, errorResponseBuilder: undefined, store: undefined })
app.get('/unpaced', { config: { pace: undefined } }, async () => 'ok')
app.get('/unnamed', { config: { pace: { perSecond: 1, key: 'source', spend: 'every', name: undefined } } }, async () => 'ok')
export const unsetClock = new Pace({ perSecond: 1, now: undefined })
export const budget: Pace = new Pace({ limit: 10, window: 600 })
export const bucket: [number, number, number] = [budget.limit, budget.window, budget.perSecond]

// The recommended token endpoint: a failure budget per (client id, source), exchanges per client
// id, a ceiling per source; and a failure budget per source for guessers that spread over ids.
const tokenPaces: PaceRouteOptions[] = [
  { limit: 10, window: 600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 5, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' },
  { limit: 100, window: 86400, key: 'source', spend: 'rejected', name: 'guesses-per-address' }
]
app.post('/recommended', { config: { pace: tokenPaces } }, async () => 'ok')
app.post('/inline-budget', { config: { pace: { limit: 3, window: 60, key: ['client', 'source'], spend: 'rejected', perSecond: undefined } } }, async () => 'ok')

// One pace on a route, written inline.
app.post('/token', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
  const ticket = request.pace
  const first = ticket.held[0]
  if (first === undefined) {
    ticket.outcome = 'rejected'
    return reply.code(401).send({ error: 'invalid_client' })
  }
  const seen: { name: string, key: string, granted: boolean, remaining: number, settled: boolean } = {
    name: first.name,
    key: first.key,
    granted: first.reservation.granted,
    remaining: first.reservation.remaining,
    settled: ticket.settled
  }
  return seen
})

// Several paces, one of them keyed by a custom function, and a name.
app.post('/introspect', {
  config: {
    pace: [
      { perSecond: 10, key: 'client', spend: 'accepted' },
      { perSecond: 50, key: 'source', spend: 'every' },
      { name: 'tenants', perSecond: 5, key: (request: FastifyRequest) => request.headers['x-tenant'] as string | undefined, spend: 'accepted' }
    ]
  }
}, async (request) => {
  request.pace.outcome = 'rejected'
  const outcome: PaceOutcome = request.pace.outcome
  return { outcome }
})

// A custom key function declared apart, inferred from the route option type.
const perTenant: PaceRouteOptions = { perSecond: 2, key: request => request.ip.startsWith('10.') ? undefined : request.ip, spend: 'every' }
const paces: readonly PaceRouteOptions[] = [perTenant]
app.get('/authorize', { config: { pace: paces } }, async () => ({ ok: true }))
app.get('/authorize-one', { config: { pace: perTenant } }, async () => ({ ok: true }))

// Every request has a ticket: on an unpaced route an inert one, which says so.
app.get('/plain', async (request) => ({ paced: request.pace.paced, held: request.pace.held.length }))

// An error handler shared by paced and unpaced routes flags the exchange without a check.
app.setErrorHandler((error, request, reply) => {
  if ((error as { statusCode?: number }).statusCode === 401) request.pace.outcome = 'rejected'
  return reply.send(error)
})

await app.ready()

// The registry of this replica.
const registry: PaceRegistry = app.pace
const size: number | undefined = app.pace.get('/token')?.size
const pace: Pace | undefined = registry.get('tenants')
const names: string[] = registry.names()
const reservation = pace?.reserve('k')
reservation?.refund()
const ticket: PaceTicket | null = null
const counts: PaceCounts | undefined = registry.counts('/token')
const refusedSoFar: number = counts?.refused ?? 0

// Observability: a hook on every decision, and client ids in the log lines.
const seen: Array<[PaceEvent['type'], string, PaceKeyName, string | undefined, PaceOutcome | null, number]> = []
await Fastify().register(exchangePace, {
  logClientIds: true,
  onEvent: (event: PaceEvent, request: FastifyRequest | null) => {
    seen.push([event.type, event.name, event.keyKind, event.key, event.outcome, event.retryAfterMs])
    request?.log.info({ pace: event.name }, 'paced')
  }
})

// The whole server: a device polling at its interval, keyed by its hashed device_code and refused
// the RFC 8628 way; per-grant paces; a bearer token's pace with a refusal function.
const slowDown: PaceRefusalAnswer = { statusCode: 400, body: { error: 'slow_down' }, headers: { 'x-interval': 5 } }
const tokenForDevices: PaceRouteOptions[] = [
  { limit: 1, window: 5, key: 'device_code', spend: 'every', refusal: slowDown },
  { perSecond: 5, key: 'client', spend: 'accepted', exceptGrantTypes: ['urn:ietf:params:oauth:grant-type:device_code'] }
]
app.post('/device-token', { config: { pace: tokenForDevices } }, async () => ({ error: 'authorization_pending' }))
const perToken: PaceRefusalOption = (request: FastifyRequest, refusal: PaceRefusal) => ({
  statusCode: refusal.statusCode === 429 ? 429 : 503,
  headers: { 'www-authenticate': `Bearer error="rate_limited", error_uri="${request.url}"` }
})
app.get('/userinfo', { config: { pace: { perSecond: 2, key: 'bearer', spend: 'every', refusal: perToken, exceptGrantTypes: undefined } } }, async () => ({ sub: 'x' }))
const hashedKinds: PaceKeyName[] = ['device_code', 'bearer']
// A secret of the application's own, keyed by its hash as the built-in keys are.
app.post('/refresh', { config: { pace: { perSecond: 1, key: (request: FastifyRequest) => secretKey(String((request.body as { refresh_token?: unknown }).refresh_token)), spend: 'every' } } }, async () => ({}))

export { size, names, ticket, refusedSoFar, hashedKinds }
