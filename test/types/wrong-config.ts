// Type test: wrong uses of exchangepace fail to compile. Each `@ts-expect-error` fails the build
// if the line below it compiles.
import Fastify from 'fastify'
import exchangePace from 'exchangepace'

const app = Fastify()
const handler = async () => ({ ok: true })

// @ts-expect-error perSecond is a number, not a string
app.post('/a', { config: { pace: { perSecond: '10', key: 'client', spend: 'accepted' } } }, handler)

// @ts-expect-error spend is 'accepted' or 'every'
app.post('/b', { config: { pace: { perSecond: 10, key: 'client', spend: 'sometimes' } } }, handler)

// @ts-expect-error key is 'client', 'source' or a function
app.post('/c', { config: { pace: { perSecond: 10, key: 'ip', spend: 'every' } } }, handler)

// @ts-expect-error a pace is an object, not a string
app.post('/d', { config: { pace: 'x' } }, handler)

// @ts-expect-error spend is required
app.post('/e', { config: { pace: { perSecond: 10, key: 'client' } } }, handler)

// @ts-expect-error a key function returns a string or undefined
app.post('/f', { config: { pace: { perSecond: 10, key: () => 42, spend: 'every' } } }, handler)

app.post('/g', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async (request) => {
  // @ts-expect-error the outcome is 'accepted' or 'rejected'
  request.pace!.outcome = 'maybe'
  // @ts-expect-error request.pace may be null (unpaced routes)
  request.pace.outcome = 'rejected'
  return { ok: true }
})

// @ts-expect-error ipv6Subnet is a number
await app.register(exchangePace, { ipv6Subnet: '64' })

// @ts-expect-error now is a clock function
await app.register(exchangePace, { now: 0 })

// @ts-expect-error fastify.pace.get returns a Pace or undefined
export const size = app.pace.get('/a').size
