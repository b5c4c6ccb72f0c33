import t from 'tap'
import fc from 'fast-check'
import type { FastifyInstance } from 'fastify'
import { RedisStore, type PaceEvent, type PaceRouteOptions } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'
import { logSink } from '../helpers/log-sink.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'

/**
 * Shadow mode: a pace that decides as ever but refuses nothing. Its refusals are counted, logged
 * and told to onEvent; its bucket evolves as when enforcing; it writes no quota headers.
 */

interface Shadowed {
  app: FastifyInstance
  events: PaceEvent[]
  lines: Array<Record<string, any>>
  clock: { now: number }
}

async function tokenApp (t: TapTest, paces: PaceRouteOptions | PaceRouteOptions[], options: Record<string, unknown> = {}): Promise<Shadowed> {
  const sink = logSink()
  const events: PaceEvent[] = []
  const clock = { now: 0 }
  const app = await build(t, { now: () => clock.now, onEvent: (event: PaceEvent) => { events.push(event) }, ...options }, app => {
    app.post('/token', { config: { pace: paces } }, async request => {
      const body = request.body as Record<string, string>
      if (body.client_secret !== 'right') request.pace.outcome = 'rejected'
      return { ok: true }
    })
  }, { logger: { level: 'info', stream: sink.stream } })
  return { app, events, lines: sink.lines, clock }
}

const post = (app: FastifyInstance, id = 'c1', secret = 'right', remoteAddress = '203.0.113.9') =>
  app.inject({ method: 'POST', url: '/token', remoteAddress, ...form(['client_id', id], ['client_secret', secret]) })

t.test('a pace in shadow lets through what it would refuse, and counts, logs and reports it', async t => {
  const { app, events, lines } = await tokenApp(t, { limit: 2, window: 60, key: 'client', spend: 'every', shadow: true })
  const codes = []
  for (let i = 0; i < 4; i++) codes.push((await post(app)).statusCode)
  t.same(codes, [200, 200, 200, 200], 'nothing refused')
  t.same({ ...app.pace.counts('/token') }, { granted: 2, refused: 0, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 2, nearLimit: 0 })
  t.same(events, [
    { type: 'shadow-refusal', name: '/token', keyKind: 'client', key: 'c1', outcome: null, retryAfterMs: 30000 },
    { type: 'shadow-refusal', name: '/token', keyKind: 'client', key: 'c1', outcome: null, retryAfterMs: 30000 }
  ])
  const shadowLines = lines.filter(line => line.msg === 'exchangepace: would refuse (shadow), the pace is spent; the request goes on')
  t.equal(shadowLines.length, 2)
  t.match(shadowLines[0], { level: 30, pace: '/token', keyKind: 'client', retryAfterMs: 30000 })
  t.notOk('key' in shadowLines[0], 'a client id is logged only with logClientIds')
})

t.test('a pace in shadow writes no quota headers; an enforcing pace beside it writes its own', async t => {
  const { app } = await tokenApp(t, [
    { limit: 1, window: 60, key: 'source', spend: 'every', shadow: true, name: 'shadowed' },
    { limit: 5, window: 60, key: 'source', spend: 'accepted', name: 'enforced' }
  ])
  const first = await post(app)
  const second = await post(app)
  t.equal(second.statusCode, 200)
  t.equal(first.headers['ratelimit-policy'], '"enforced";q=5;w=60')
  t.equal(second.headers.ratelimit, '"enforced";r=3;t=24')
  t.equal(second.headers['retry-after'], undefined)
})

t.test('the plugin option puts every pace in shadow but those that say shadow: false', async t => {
  const { app, events } = await tokenApp(t, [
    { limit: 1, window: 60, key: 'client', spend: 'every', name: 'trial' },
    { limit: 1, window: 60, key: 'client', spend: 'every', name: 'kept', shadow: false }
  ], { shadow: true })
  t.equal((await post(app)).statusCode, 200)
  const second = await post(app)
  t.equal(second.statusCode, 429, 'the pace that says shadow: false enforces')
  t.same(events.map(event => [event.type, event.name]), [['shadow-refusal', 'trial'], ['refused', 'kept']])
})

t.test('the route description says a pace is in shadow', async t => {
  const descriptions: string[] = []
  await build(t, {}, app => {
    app.addHook('onRoute', route => { descriptions.push(String(route.schema?.description)) })
    app.post('/token', { config: { pace: { limit: 1, window: 60, key: 'client', spend: 'every', shadow: true } } }, async () => 'ok')
  })
  t.match(descriptions[0], '1 request per minute per declared client id (every request counts), in shadow (refusals reported, not enforced)')
})

t.test('switching shadow off refuses exactly what the shadow reported (property, any requests, outcomes and times)', async t => {
  const step = fc.record({ id: fc.constantFrom('a', 'b'), right: fc.boolean(), advance: fc.integer({ min: 0, max: 1500 }) })
  await fc.assert(fc.asyncProperty(fc.array(step, { maxLength: 30 }), fc.constantFrom<PaceRouteOptions['spend']>('accepted', 'rejected', 'every'), async (steps, spend) => {
    const pace = { limit: 3, window: 2, key: 'client', spend } as const
    const apps = await Promise.all([tokenApp(t, { ...pace, shadow: true }), tokenApp(t, pace)])
    const shadowed: boolean[] = []
    const refused: boolean[] = []
    for (const { id, right, advance } of steps) {
      for (const app of apps) app.clock.now += advance
      const before = apps[0].app.pace.counts('/token')!.shadowRefused
      const enforced = await post(apps[1].app, id, right ? 'right' : 'wrong')
      await post(apps[0].app, id, right ? 'right' : 'wrong')
      shadowed.push(apps[0].app.pace.counts('/token')!.shadowRefused > before)
      refused.push(enforced.statusCode === 429)
    }
    await Promise.all(apps.map(({ app }) => app.close()))
    return shadowed.every((shadow, i) => shadow === refused[i])
  }), { numRuns: 40 })
})

t.test('routes naming one pace agree on shadow and warnAt; the options are checked', async t => {
  const { default: Fastify } = await import('fastify')
  const { exchangePace } = await import('../../lib/index.js')
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace)
  app.post('/a', { config: { pace: { perSecond: 1, key: 'client', spend: 'every', name: 'one', shadow: true } } }, async () => 'a')
  t.throws(() => app.post('/b', { config: { pace: { perSecond: 1, key: 'client', spend: 'every', name: 'one' } } }, async () => 'b'),
    /route POST \/b: pace "one" is declared with shadow true and warnAt null elsewhere, got shadow false and warnAt null/)
  t.throws(() => app.post('/c', { config: { pace: { perSecond: 1, key: 'client', spend: 'every', shadow: 'yes' as any } } }, async () => 'c'),
    /config\.pace\.shadow must be a boolean, got "yes"/)
  for (const warnAt of [0, 1.5, Number.NaN]) {
    t.throws(() => app.post(`/w${warnAt}`, { config: { pace: { perSecond: 1, key: 'client', spend: 'every', warnAt } } }, async () => 'w'),
      /config\.pace\.warnAt must be a number above 0 and at most 1 \(a share of the bucket\)/)
  }
  await t.rejects(build(t, { shadow: 1 }, () => {}), /exchangepace: shadow must be a boolean, got number/)
})

const client = await redisOrSkip()
if (client !== null) {
  t.test('on a RedisStore, a pace in shadow lets through what Redis refuses, and writes no quota headers', async t => {
    const store = new RedisStore({ client, prefix: uniquePrefix('shadow'), timeoutMs: 1000 })
    const { app, events } = await tokenApp(t, { limit: 2, window: 600, key: ['client', 'source'], spend: 'rejected', shadow: true }, { store })
    const responses = []
    for (let i = 0; i < 4; i++) responses.push(await post(app, 'c1', 'wrong'))
    t.same(responses.map(r => r.statusCode), [200, 200, 200, 200])
    t.same(responses.map(r => r.headers.ratelimit), [undefined, undefined, undefined, undefined])
    t.equal(app.pace.counts('/token')!.shadowRefused, 2)
    t.same(events.map(event => event.type), ['shadow-refusal', 'shadow-refusal'])
    t.match(events[0], { keyKind: 'client+source', key: 'c1\u001f203.0.113.9' })
    t.ok(events[0].retryAfterMs > 299_000, 'the wait Redis reported: half the window')
  })

  t.test('on a RedisStore, the plugin option puts a pace in shadow; a replica that enforces it refuses what the shadow reported', async t => {
    const prefix = uniquePrefix('shadow-switch')
    const pace: PaceRouteOptions = { limit: 2, window: 600, key: 'client', spend: 'every' }
    const trial = await tokenApp(t, pace, { store: new RedisStore({ client, prefix, timeoutMs: 1000 }), shadow: true })
    const codes = []
    for (let i = 0; i < 3; i++) codes.push((await post(trial.app)).statusCode)
    t.same(codes, [200, 200, 200], 'nothing refused in shadow')
    t.same(trial.events.map(event => event.type), ['shadow-refusal'])
    const enforcing = await tokenApp(t, pace, { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) })
    t.equal((await post(enforcing.app)).statusCode, 429, 'the same bucket in Redis, enforced: refused as the shadow reported')
    t.same(enforcing.events.map(event => event.type), ['refused'])
  })

  t.test('on a RedisStore, a shadow pace after an enforcing pace that refused is not reported: the request was refused', async t => {
    const store = new RedisStore({ client, prefix: uniquePrefix('shadow-after'), timeoutMs: 1000 })
    const { app, events } = await tokenApp(t, [
      { limit: 1, window: 600, key: 'client', spend: 'every', name: 'enforced' },
      { limit: 1, window: 600, key: 'source', spend: 'accepted', name: 'shadowed', shadow: true }
    ], { store })
    t.equal((await post(app)).statusCode, 200)
    t.equal((await post(app)).statusCode, 429)
    t.same(events.map(event => [event.type, event.name]), [['refused', 'enforced']])
    t.equal((await post(app, 'c2')).statusCode, 200, 'another client: the shadow pace alone would refuse')
    t.same(events.slice(1).map(event => [event.type, event.name]), [['shadow-refusal', 'shadowed']])
  })
}
