import t from 'tap'
import Fastify from 'fastify'
import exchangePace from '../../lib/index.js'

// RateLimit-Policy's quota is an integer in the IETF draft: a fractional rate is stated over the
// shortest whole window that makes it one.

async function policyOf (perSecond: number): Promise<string | undefined> {
  const app = Fastify()
  await app.register(exchangePace, { now: () => 0 })
  app.get('/authorize', { config: { pace: { perSecond, key: 'source', spend: 'every' } } }, async () => 'ok')
  const response = await app.inject('/authorize')
  await app.close()
  return response.headers['ratelimit-policy'] as string | undefined
}

t.test('a whole rate is its quota over one second', async t => {
  t.equal(await policyOf(10), '"/authorize";q=10;w=1')
})

t.test('a fractional rate is stated over the shortest window that makes the quota whole', async t => {
  t.equal(await policyOf(1.5), '"/authorize";q=3;w=2')
  t.equal(await policyOf(7.3), '"/authorize";q=73;w=10')
})

t.test('a rate no window up to 1000 s makes whole is stated as the units one second holds', async t => {
  t.equal(await policyOf(Math.PI), '"/authorize";q=3;w=1')
})
