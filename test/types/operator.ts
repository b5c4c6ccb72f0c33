// Type test: the operator's API and per-key rates, as docs/reference.md and docs/operating.md use
// them. Compiled by `tsc -p test/types/tsconfig.json` against the built package.
import Fastify from 'fastify'
import exchangePace, { type PaceClientInspection, type PaceInspection, type PaceReservation, type PaceWho, type RateOf, type StoredBucket, RedisStore } from 'exchangepace'

const app = Fastify()
await app.register(exchangePace)

const registered = new Map<string, number>([['batch', 50]])
const rateOf: RateOf = client => registered.get(client)
app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', rateOf } } }, async () => 'ok')
app.post('/introspect', { config: { pace: { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected', rateOf: () => undefined } } }, async () => 'ok')

const pair: PaceWho = { client: 'batch', source: '203.0.113.9' }
const seen: PaceInspection = await app.pace.inspect('/token#client+source:rejected', pair)
export const lockedFor: number = seen.retryAfterMs + seen.fullInMs + seen.remaining
export const blockedUntil: Date | null = seen.blockedUntil
// A client alone on a pair pace: every address of it, the most held back first.
const client = await app.pace.inspect('/token#client+source:rejected', { client: 'batch' })
export const heldFrom: string | null = 'pairsHeldBack' in client ? (client satisfies PaceClientInspection).source : null
export const anyway: PaceInspection = client
await app.pace.reset('/token', { client: 'batch' })
export const ends: Date = await app.pace.block('/authorize', { source: '2001:db8::/64' }, 600)
const taken: PaceReservation = await app.pace.reserve('/tenant', { key: 'acme' })
if (taken.granted) taken.refund()

export async function fromTheStore (store: RedisStore): Promise<number | null> {
  const row: StoredBucket = await store.inspect('/token', 'batch')
  await store.reset('/token', 'batch')
  const until: Date = await store.block('/token', 'batch', 60_000)
  return until.getTime() > 0 ? row.limit : row.windowMs
}

// @ts-expect-error rateOf gives a number or undefined
app.post('/wrong-rate', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', rateOf: () => 'fast' } } }, async () => 'ok')
// @ts-expect-error a block lasts a number of seconds
await app.pace.block('/token', { client: 'batch' }, '60')
// @ts-expect-error who is given by its parts
await app.pace.reset('/token', 'batch')
