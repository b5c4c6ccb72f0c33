import t from 'tap'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { PaceEvent, PaceRouteOptions } from '../../lib/index.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'
import { logSink } from '../helpers/log-sink.js'

/**
 * What an operator sees without reading response codes: counts per pace on `fastify.pace`, log
 * lines through the request's logger, and the `onEvent` hook.
 */

const PACES: PaceRouteOptions[] = [
  { limit: 2, window: 600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 1, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' }
]

async function tokenApp (t: TapTest, options: Record<string, unknown> = {}) {
  const sink = logSink()
  const events: PaceEvent[] = []
  const app = await build(t, { now: () => 0, onEvent: (event: PaceEvent) => { events.push(event) }, ...options }, app => {
    app.post('/token', { config: { pace: PACES } }, async (request: FastifyRequest, reply: FastifyReply) => {
      const body = request.body as Record<string, string>
      if (body.client_secret !== 'right-secret') {
        request.pace.outcome = 'rejected'
        return reply.code(401).send({ error: 'invalid_client' })
      }
      return { access_token: 'token' }
    })
  }, { logger: { level: 'debug', stream: sink.stream } })
  return { app, events, lines: sink.lines }
}

const post = (app: FastifyInstance, secret: string, id = 'victim') =>
  app.inject({ method: 'POST', url: '/token', remoteAddress: '203.0.113.9', ...form(['client_id', id], ['client_secret', secret]) })

t.test('fastify.pace counts what each pace granted, refused, refunded and found malformed', async t => {
  const { app } = await tokenApp(t)
  await post(app, 'right-secret') // granted by all three
  await post(app, 'right-secret') // refused by the client pace: the pair's unit goes back
  await post(app, 'guess-1') // refused by the client pace again
  await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'a'], ['client_id', 'b']) }) // a repeated id: 400
  t.same({ ...app.pace.counts('/token#client+source:rejected') }, { granted: 3, refused: 0, refunded: 3, invalid: 1, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
  t.same({ ...app.pace.counts('/token#client') }, { granted: 1, refused: 2, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
  t.same({ ...app.pace.counts('/token#source') }, { granted: 4, refused: 0, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
  t.equal(app.pace.counts('/nothing'), undefined)
  const counts = app.pace.counts('/token#client')!
  await post(app, 'right-secret')
  t.equal(counts.refused, 2, 'a copy: it does not change afterwards')
})

t.test('onEvent hears of every refusal, refund and malformed key, with the pace, its key, the outcome and the wait', async t => {
  const { app, events } = await tokenApp(t)
  await post(app, 'guess-1') // a failure: the client unit is refunded (rejected), the pair's kept
  await post(app, 'right-secret') // accepted: the pair's unit is refunded (accepted)
  await post(app, 'right-secret') // refused by the client pace: the pair's unit goes back (null)
  await app.inject({ method: 'POST', url: '/token', remoteAddress: '203.0.113.9', ...form(['client_id', 'vic\u0001tim']) })
  t.same(events, [
    { type: 'refunded', name: '/token#client', keyKind: 'client', key: 'victim', outcome: 'rejected', retryAfterMs: 0 },
    { type: 'refunded', name: '/token#client+source:rejected', keyKind: 'client+source', key: 'victim\u001f203.0.113.9', outcome: 'accepted', retryAfterMs: 0 },
    { type: 'refunded', name: '/token#client+source:rejected', keyKind: 'client+source', key: 'victim\u001f203.0.113.9', outcome: null, retryAfterMs: 0 },
    { type: 'refused', name: '/token#client', keyKind: 'client', key: 'victim', outcome: null, retryAfterMs: 1000 },
    { type: 'invalid', name: '/token#client+source:rejected', keyKind: 'client+source', key: undefined, outcome: null, retryAfterMs: 0 }
  ])
})

t.test('log lines: a refusal and a malformed key at info, a refund at debug; the client id only when the operator opts in, never the secret', async t => {
  for (const logClientIds of [false, true]) {
    const { app, lines } = await tokenApp(t, { logClientIds })
    await post(app, 'guess-secret-1')
    await post(app, 'right-secret')
    await post(app, 'right-secret')
    await app.inject({ method: 'POST', url: '/token', remoteAddress: '203.0.113.9', ...form(['client_id', 'x'.repeat(300)]) })
    const ours = lines.filter(line => String(line.msg).startsWith('exchangepace:'))
    const refused = ours.filter(line => line.msg === 'exchangepace: refused, the pace is spent')
    t.same(refused.map(line => [line.level, line.pace, line.keyKind, line.retryAfterMs, line.key]),
      [[30, '/token#client', 'client', 1000, logClientIds ? 'victim' : undefined]], `logClientIds ${logClientIds}: the refusal at info`)
    t.ok(refused[0].reqId !== undefined, 'through the request\'s logger')
    const refunds = ours.filter(line => line.msg === 'exchangepace: unit refunded')
    t.same(refunds.map(line => line.source), [undefined, '203.0.113.9', '203.0.113.9'], 'a pair\'s address is logged whatever logClientIds says')
    t.same(refunds.map(line => [line.level, line.pace, line.outcome, line.key]), [
      [20, '/token#client', 'rejected', logClientIds ? 'victim' : undefined],
      [20, '/token#client+source:rejected', 'accepted', logClientIds ? 'victim @ 203.0.113.9' : undefined],
      [20, '/token#client+source:rejected', null, logClientIds ? 'victim @ 203.0.113.9' : undefined]
    ], `logClientIds ${logClientIds}: refunds at debug`)
    const invalid = ours.filter(line => line.msg === 'exchangepace: malformed key, answered 400 invalid_request')
    t.same(invalid.map(line => [line.level, line.pace, line.description]), [[30, '/token#client+source:rejected', 'client_id is longer than 255 characters']])
    t.notOk(JSON.stringify(lines).includes('guess-secret-1'), 'no secret in any log line')
  }
})

t.test('a source key is logged: Fastify\'s own request log has the address', async t => {
  const sink = logSink()
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/authorize', { config: { pace: { perSecond: 1, key: 'source', spend: 'every' } } }, async () => 'ok')
  }, { logger: { level: 'info', stream: sink.stream } })
  await app.inject({ url: '/authorize', remoteAddress: '2001:db8:1:2::7' })
  await app.inject({ url: '/authorize', remoteAddress: '2001:db8:1:2::8' })
  const refused = sink.lines.find(line => line.msg === 'exchangepace: refused, the pace is spent')!
  t.same([refused.pace, refused.keyKind, refused.key], ['/authorize', 'source', '2001:db8:1:2::/64'])
})

t.test('an onEvent that throws never fails the request nor keeps a unit: it is logged once per pace and ignored', async t => {
  const { stream, lines } = logSink()
  const app = await build(t, { now: () => 0, onEvent: () => { throw new Error('dashboard down') } }, app => {
    app.post('/token', { config: { pace: PACES } }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  }, { logger: { level: 'info', stream } })
  const statuses = []
  for (let i = 0; i < 4; i++) statuses.push((await post(app, `guess-${i}`)).statusCode)
  t.same(statuses, [401, 401, 429, 429], 'the failure budget of 2 holds, and every request is answered')
  t.equal(app.pace.get('/token#client')!.size, 0, 'every refund happened, hook or not')
  const errors = lines.filter(line => line.msg === 'exchangepace: onEvent threw; the request goes on, and further throws for this pace are not logged')
  t.same(errors.map(line => [line.level, line.pace, line.err.message]), [
    [50, '/token#client', 'dashboard down'],
    [50, '/token#client+source:rejected', 'dashboard down']
  ], 'once for each pace whose event threw')
})

t.test('onEvent and logClientIds are checked when the plugin registers', async t => {
  for (const [options, message] of [
    [{ onEvent: 'count' }, 'exchangepace: onEvent must be a function, got string'],
    [{ logClientIds: 'yes' }, 'exchangepace: logClientIds must be a boolean, got string']
  ] as const) {
    await t.rejects(build(t, options, () => {}), { name: 'TypeError', message })
  }
})
