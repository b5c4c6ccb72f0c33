// Type test: wrong uses of exchangepace fail to compile. Each `@ts-expect-error` fails the build
// if the line below it compiles.
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'

const app = Fastify()
const handler = async () => ({ ok: true })

// @ts-expect-error perSecond is a number, not a string
app.post('/a', { config: { pace: { perSecond: '10', key: 'client', spend: 'accepted' } } }, handler)

// @ts-expect-error spend is 'accepted', 'rejected' or 'every'
app.post('/b', { config: { pace: { perSecond: 10, key: 'client', spend: 'sometimes' } } }, handler)

// @ts-expect-error key is 'client', 'source', ['client', 'source'] or a function
app.post('/c', { config: { pace: { perSecond: 10, key: 'ip', spend: 'every' } } }, handler)

// @ts-expect-error a refusal's statusCode is a number
app.post('/r1', { config: { pace: { perSecond: 10, key: 'device_code', spend: 'every', refusal: { statusCode: '400' } } } }, handler)

// @ts-expect-error exceptGrantTypes is an array of strings
app.post('/g1', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted', exceptGrantTypes: 'client_credentials' } } }, handler)

// @ts-expect-error a window needs a limit
app.post('/w1', { config: { pace: { window: 600, key: 'client', spend: 'rejected' } } }, handler)

// @ts-expect-error a limit needs a window
app.post('/w2', { config: { pace: { limit: 10, key: 'client', spend: 'rejected' } } }, handler)

// @ts-expect-error perSecond, or limit with window, not both
app.post('/w3', { config: { pace: { perSecond: 10, limit: 10, window: 600, key: 'client', spend: 'rejected' } } }, handler)

// @ts-expect-error a rate is required
app.post('/w4', { config: { pace: { key: 'client', spend: 'rejected' } } }, handler)

// @ts-expect-error the pair is written ['client', 'source']
app.post('/w5', { config: { pace: { limit: 10, window: 600, key: ['source', 'client'], spend: 'rejected' } } }, handler)

// @ts-expect-error a misspelt field of a single pace: name
app.post('/m1', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', nmae: 'x' } } }, handler)

// @ts-expect-error a misspelt field of a single pace: rateOf
app.post('/m2', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', rateof: () => 1 } } }, handler)

// @ts-expect-error a misspelt field of a single pace: exceptGrantTypes
app.post('/m3', { config: { pace: { limit: 5, window: 60, key: 'client', spend: 'accepted', exceptGrantType: ['urn:x'] } } }, handler)

// @ts-expect-error a misspelt field of a single pace, through app.route
app.route({ method: 'POST', url: '/m4', config: { pace: { perSecond: 5, key: 'source', spend: 'every', nmae: 'x' } }, handler })

// @ts-expect-error a misspelt field of a pace in an array
app.post('/m5', { config: { pace: [{ perSecond: 5, key: 'client', spend: 'accepted', nmae: 'x' }] } }, handler)

// @ts-expect-error a pace is an object, not a string
app.post('/d', { config: { pace: 'x' } }, handler)

// @ts-expect-error spend is required
app.post('/e', { config: { pace: { perSecond: 10, key: 'client' } } }, handler)

// @ts-expect-error a key function returns a string or undefined
app.post('/f', { config: { pace: { perSecond: 10, key: () => 42, spend: 'every' } } }, handler)

app.post('/g', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async (request) => {
  // @ts-expect-error the outcome is 'accepted' or 'rejected'
  request.pace.outcome = 'maybe'
  // @ts-expect-error whether the route is paced is the plugin's to say
  request.pace.paced = false
  return { ok: true }
})

// @ts-expect-error ipv6Subnet is a number
await app.register(exchangePace, { ipv6Subnet: '64' })

// @ts-expect-error now is a clock function
await app.register(exchangePace, { now: 0 })

// @ts-expect-error onEvent is a function of the event and the request
await app.register(exchangePace, { onEvent: 'log' })

// @ts-expect-error an event's type is 'refused', 'refunded' or 'invalid'
await app.register(exchangePace, { onEvent: (event) => event.type === 'granted' })

// @ts-expect-error logClientIds is a boolean
await app.register(exchangePace, { logClientIds: 'yes' })

// @ts-expect-error errorResponseBuilder returns the body, an object
await app.register(exchangePace, { errorResponseBuilder: () => 'slow down' })

// @ts-expect-error maxKeyLength is a number
await app.register(exchangePace, { maxKeyLength: '255' })

// @ts-expect-error a store is a PaceStore
await app.register(exchangePace, { store: 'redis' })

// @ts-expect-error counts may be undefined (no route declared the name)
export const refused: number = app.pace.counts('/a').refused

// @ts-expect-error request.pace.held is read-only as a list of what the request holds
app.get('/h', async (request) => { request.pace.held = [] })

// @ts-expect-error request.pace is the plugin's ticket, not replaced
app.get('/i', async (request) => { request.pace = null })

// @ts-expect-error fastify.pace.get returns a Pace or undefined
export const size = app.pace.get('/a').size

// What the plugin's hooks use is not in the published types (stripInternal), and what a request
// holds is read-only to the app.
app.post('/internal', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async (request) => {
  // @ts-expect-error settling is the plugin's
  request.pace._settle()
  // @ts-expect-error the units held are read-only
  request.pace.held.push(...request.pace.held)
  // @ts-expect-error whether a pace refused the request is the plugin's to say
  request.pace.refused = true
  return { ok: true }
})

// @ts-expect-error the store's bookkeeping is not in its published type
export const tried = new RedisStore({ client: new Redis({ lazyConnect: true }) })._mayTry('key')

// @ts-expect-error the registry declares paces for the plugin only
export const declared = app.pace._declare
