import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Registry } from 'prom-client'
import Fastify, { type FastifyInstance } from 'fastify'
import { exchangePace, RedisStore } from '../../lib/index.js'
import { paceMetrics } from '../../examples/metrics.js'
import { buildServer } from '../../examples/server.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

/**
 * examples/metrics.js: exchangepace's counts exported with prom-client, read back by scraping
 * /metrics as Prometheus would.
 */

const form = { 'content-type': 'application/x-www-form-urlencoded' }

/** An ioredis client as the store sees it, whose every reserve fails: Redis is down. */
class FailingRedis {
  defineCommand (): void {}
  exchangepaceReserveBuffer (): Promise<Buffer> {
    return Promise.reject(new Error('connect ECONNREFUSED 127.0.0.1:6379'))
  }
}

/** The samples of a Prometheus text exposition: `name{labels}` -> value. */
function samples (text: string): Map<string, number> {
  const parsed = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    parsed.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return parsed
}

async function scrape (app: FastifyInstance): Promise<Map<string, number>> {
  const response = await app.inject({ url: '/metrics' })
  t.match(response.headers['content-type'], /^text\/plain/)
  return samples(response.body)
}

t.test('the pace counts and rows are scraped from /metrics, labelled by pace name only', async t => {
  const app = buildServer({ now: () => 0 })
  t.teardown(() => app.close())
  const register = paceMetrics(app)
  t.type(register, Registry)
  const token = (secret: string, address = '203.0.113.9') => app.inject({ method: 'POST', url: '/token', remoteAddress: address, headers: form, payload: `grant_type=client_credentials&client_id=reporting&client_secret=${secret}` })
  for (let i = 0; i < 7; i++) await token(`guess-${i}`)
  for (let i = 0; i < 6; i++) await token('reporting-secret', '198.51.100.7')
  await app.inject({ method: 'POST', url: '/token', headers: form, payload: 'client_id=vic%01tim' })
  const scraped = await scrape(app)
  const decisions = (pace: string) => ['granted', 'refused', 'refunded', 'invalid'].map(decision => scraped.get(`exchangepace_decisions_total{pace="${pace}",decision="${decision}"}`))
  t.same(decisions('/token#client+source:rejected'), [11, 2, 6, 1], 'failures: five kept, two refused; the exchanges\' units refunded')
  t.same(decisions('/token#client'), [10, 1, 5, 0], 'exchanges: the five failures refunded, one refused past 5/s')
  t.same(decisions('/token#source'), [14, 0, 0, 0])
  t.equal(scraped.get('exchangepace_rows{pace="/token#client+source:rejected"}'), 1, 'one pair failed')
  t.equal(scraped.get('exchangepace_rows{pace="/token#client"}'), 1)
  t.notOk([...scraped.keys()].some(name => name.includes('reporting') || name.includes('203.0.113.9')), 'no client id or address in any label')
  t.equal(scraped.get('exchangepace_store_unavailable'), undefined, 'no store, no store gauge')
  t.same([scraped.get('exchangepace_decided_without_store_total{pace="/token#client",decision="granted"}'), scraped.get('exchangepace_decided_without_store_total{pace="/token#client",decision="refused"}')], [0, 0], 'no store: nothing decided without it')
})

t.test('what a shared store did not decide is scraped per pace: grants and refusals made without its answer', async t => {
  const client = new FailingRedis()
  const store = new RedisStore({ client, whenUnavailable: 'fallback', retryMs: 60_000 })
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store })
  // A minute's window: a refusal in memory waits longer than a second, so Redis would decide it.
  app.post('/token', { config: { pace: { limit: 2, window: 60, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
  paceMetrics(app, { register: new Registry(), store })
  for (let i = 0; i < 3; i++) await app.inject({ method: 'POST', url: '/token', payload: { client_id: 'reporting' } })
  const scraped = await scrape(app)
  const without = (decision: string) => scraped.get(`exchangepace_decided_without_store_total{pace="/token",decision="${decision}"}`)
  t.same([without('granted'), without('refused')], [2, 1], 'Redis never answered: two granted in memory, the third refused there')
  t.equal(scraped.get('exchangepace_decisions_total{pace="/token",decision="granted"}'), 2)
  t.equal(scraped.get('exchangepace_store_unavailable'), 1)
})

/**
 * The warnings scraped from an app on the plugin options `options` whose pace, in shadow and
 * warning at half its bucket of 2 a minute, one client asks 4 times: [shadow_refusal, near_limit].
 */
async function scrapedWarnings (t: TapTest, options: Record<string, unknown>): Promise<Array<number | undefined>> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, options)
  app.post('/token', { config: { pace: { limit: 2, window: 60, key: 'client', spend: 'every', shadow: true, warnAt: 0.5 } } }, async () => ({ ok: true }))
  paceMetrics(app, { register: new Registry() })
  for (let i = 0; i < 4; i++) await app.inject({ method: 'POST', url: '/token', payload: { client_id: 'reporting' } })
  const scraped = await scrape(app)
  return ['shadow_refusal', 'near_limit'].map(warning => scraped.get(`exchangepace_warnings_total{pace="/token",warning="${warning}"}`))
}

t.test('the warnings are scraped per pace: shadow refusals and keys near the limit', async t => {
  t.same(await scrapedWarnings(t, { now: () => 0 }), [2, 1], 'the first grant spent half: one warning; the third and fourth would have been refused')
})

t.test('with a shared store, its availability is a gauge', async t => {
  const store = { scope: 'shared by all replicas', outage: 'it holds per replica', unavailable: false, pace: () => { throw new Error('not used') } }
  const app = buildServer({ now: () => 0 })
  t.teardown(() => app.close())
  paceMetrics(app, { register: new Registry(), store })
  t.equal((await scrape(app)).get('exchangepace_store_unavailable'), 0)
  store.unavailable = true
  t.equal((await scrape(app)).get('exchangepace_store_unavailable'), 1)
})

t.test('node examples/metrics.js serves the example server with /metrics', async t => {
  const script = fileURLToPath(new URL('../../examples/metrics.js', import.meta.url))
  const child = spawn(process.execPath, [script], { env: { ...process.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'ignore'] })
  t.teardown(() => { child.kill() })
  let output = ''
  for await (const chunk of child.stdout) {
    output += String(chunk)
    if (output.includes('/metrics\n')) break
  }
  const url = /metrics on (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(output)![1]
  const scraped = samples(await (await fetch(url)).text())
  t.equal(scraped.get('exchangepace_decisions_total{pace="/token#client",decision="granted"}'), 0)
})

const redis = await redisOrSkip()
if (redis !== null) {
  t.test('the warnings are scraped per pace on a RedisStore too, as Redis decided them', async t => {
    // A unit of the pace refills in 30 s on Redis's clock: none while the test runs.
    t.same(await scrapedWarnings(t, { store: new RedisStore({ client: redis, prefix: uniquePrefix('metrics'), timeoutMs: 1000 }) }), [2, 1])
  })
}
