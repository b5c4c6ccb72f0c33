import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { PaceTicket, type PaceEvent, type PaceRouteOptions } from '../../lib/index.js'
import { build, form } from '../helpers/shared-behaviour.js'

/**
 * `request.pace` is a ticket on every request (issue 33): a paced route's from whatever first
 * reads it, its hook or the app; an unpaced route's an inert one, made on its first read, that
 * holds nothing and whose outcome changes nothing. The clock is injected and stands still.
 */

const CLIENT_1: PaceRouteOptions = { perSecond: 1, key: 'client', spend: 'accepted' }

function post (app: FastifyInstance, url: string, client = 'victim') {
  return app.inject({ method: 'POST', url, ...form(['client_id', client]) })
}

t.test('an unpaced route\'s ticket is inert: not paced, holding nothing, never settled', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async () => ({ ok: true }))
    app.post('/plain', async (request) => {
      const ticket = request.pace
      ticket.outcome = 'rejected'
      return {
        same: request.pace === ticket,
        ticket: ticket instanceof PaceTicket,
        paced: ticket.paced,
        held: ticket.held.length,
        refused: ticket.refused,
        settled: ticket.settled,
        outcome: request.pace.outcome
      }
    })
  })
  const plain = await post(app, '/plain')
  t.same(plain.json(), { same: true, ticket: true, paced: false, held: 0, refused: false, settled: false, outcome: 'rejected' },
    'one ticket for the request, which keeps the outcome set on it')
  t.equal(plain.headers.ratelimit, undefined, 'and writes no quota header')
  t.equal((await post(app, '/token')).statusCode, 200, 'the paced route\'s unit is untouched')
  t.equal((await post(app, '/token')).statusCode, 429)
  t.same(app.pace.counts('/token'), { granted: 1, refused: 1, refunded: 0, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
})

t.test('an inert ticket still checks the outcome it is given', async t => {
  const app = await build(t, {}, app => {
    app.get('/plain', async (request) => {
      try {
        request.pace.outcome = 'maybe' as 'rejected'
        return { thrown: false }
      } catch (err) {
        return { thrown: (err as Error).message, outcome: request.pace.outcome }
      }
    })
  })
  t.same((await app.inject('/plain')).json(), { thrown: 'exchangepace: request.pace.outcome must be \'accepted\' or \'rejected\', got maybe', outcome: 'accepted' })
})

t.test('an unpaced route that never reads request.pace makes no ticket', async t => {
  let seen: unknown = 'unset'
  const app = await build(t, {}, app => {
    app.get('/plain', async (request) => {
      const slot = Object.getOwnPropertySymbols(request).find(key => key.description === 'exchangepace.ticket')
      seen = slot === undefined ? 'no slot' : (request as unknown as Record<symbol, unknown>)[slot]
      return 'ok'
    })
  })
  t.equal((await app.inject('/plain')).statusCode, 200)
  t.equal(seen, null, 'the slot is there, as the null decoration was, and still empty')
})

t.test('a paced route read before its pace\'s hook: the same ticket, paced, holds the units once the hook has run', async t => {
  const events: PaceEvent[] = []
  const early: PaceTicket[] = []
  const app = await build(t, { now: () => 0, onEvent: (event: PaceEvent) => events.push(event) }, app => {
    app.addHook('onRequest', async (request) => {
      if (request.url !== '/token') return
      early.push(request.pace)
      if (request.pace.paced && request.pace.held.length === 0) return
      throw new Error('a paced route\'s ticket before the hook is paced and empty')
    })
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request, reply) => {
      if (request.pace !== early[early.length - 1] || request.pace.held.length !== 1) return reply.code(500).send({ error: 'not the same ticket' })
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  t.equal((await post(app, '/token')).statusCode, 401)
  t.equal(early[0].settled, true)
  t.same(events.map(event => [event.type, event.outcome]), [['refunded', 'rejected']], 'the refund is heard, as from the hook\'s own ticket')
  t.equal((await post(app, '/token')).statusCode, 401, 'the unit came back')
  t.equal(app.pace.get('/token')!.size, 0)
})

t.test('an error handler shared by every route sets the outcome without a check', async t => {
  class InvalidClient extends Error {}
  const app = await build(t, { now: () => 0 }, app => {
    app.setErrorHandler((error, request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(error instanceof InvalidClient ? 401 : 400).send({ error: 'invalid', paced: request.pace.paced, held: request.pace.held.length })
    })
    const fail = async () => { throw new InvalidClient() }
    app.post('/token', { config: { pace: CLIENT_1 }, schema: { body: { type: 'object', required: ['client_id'] } } }, fail)
    app.post('/plain', fail)
  })
  t.same((await post(app, '/plain')).json(), { error: 'invalid', paced: false, held: 0 }, 'an unpaced route: inert')
  const unvalidated = await app.inject({ method: 'POST', url: '/token', ...form(['grant_type', 'client_credentials']) })
  t.same([unvalidated.statusCode, unvalidated.json()], [400, { error: 'invalid', paced: true, held: 0 }], 'failed validation before the pace\'s hook: paced, holding nothing')
  t.equal(unvalidated.headers.ratelimit, undefined, 'with no quota to state')
  t.same((await post(app, '/token')).json(), { error: 'invalid', paced: true, held: 1 })
  t.equal((await post(app, '/token')).statusCode, 401, 'refunded: the client still has its unit')
  t.same(app.pace.counts('/token'), { granted: 2, refused: 0, refunded: 2, invalid: 0, grantedWithoutStore: 0, refusedWithoutStore: 0, shadowRefused: 0, nearLimit: 0 })
})

t.test('a request no route matched has an inert ticket in the not-found handler', async t => {
  const app = await build(t, {}, app => {
    app.setNotFoundHandler((request, reply) => reply.code(404).send({ paced: request.pace.paced }))
    app.post('/token', { config: { pace: CLIENT_1 } }, async () => 'ok')
  })
  const response = await app.inject('/nowhere')
  t.same([response.statusCode, response.json()], [404, { paced: false }])
})

t.test('the config the app gave a paced route is left as it was', async t => {
  const config = { pace: CLIENT_1 }
  const app = await build(t, {}, app => {
    app.post('/a', { config }, async (request) => ({ paced: request.pace.paced }))
    app.post('/b', { config }, async (request) => ({ paced: request.pace.paced }))
  })
  t.same(Reflect.ownKeys(config), ['pace'], 'no mark added to the app\'s own object')
  t.same((await post(app, '/a')).json(), { paced: true })
  t.same((await post(app, '/b')).json(), { paced: true })
})
