import t from 'tap'
import http from 'node:http'
import http2 from 'node:http2'
import { connect, type AddressInfo, type Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import type { PaceOutcome, PaceRouteOptions, PaceTicket } from '../../lib/index.js'
import { build, form, tick, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Settlement: what a request holds is committed or refunded once, according to the outcome the
 * handler reports, whatever way the request ends (answered, thrown, answered by another hook,
 * abandoned by its client, timed out). The clock is injected (`clock.t`, milliseconds); nothing
 * here waits for time to pass.
 */

interface Deferred<T = void> { promise: Promise<T>, resolve: (value: T) => void }

function deferred<T = void> (): Deferred<T> {
  let resolve!: (value: T) => void
  const promise = new Promise<T>(_resolve => { resolve = _resolve })
  return { promise, resolve }
}

const CLIENT_1: PaceRouteOptions = { perSecond: 1, key: 'client', spend: 'accepted' }

function post (app: FastifyInstance, url = '/token', ...pairs: Array<[string, string]>) {
  return app.inject({ method: 'POST', url, ...form(['client_id', 'victim'], ...pairs) })
}

async function statuses (app: FastifyInstance, n: number, url = '/token'): Promise<number[]> {
  const result: number[] = []
  for (let i = 0; i < n; i++) result.push((await post(app, url)).statusCode)
  return result
}

t.test('spend accepted: the unit comes back when the handler flags the exchange rejected', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  t.same(await statuses(app, 5), [401, 401, 401, 401, 401])
  t.equal(app.pace.get('/token')!.size, 0)
})

t.test('a reply handed to the not-found handler is settled as it is sent: Fastify keeps the route\'s onSend hooks for it', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request, reply) => {
      request.pace.outcome = request.headers['x-outcome'] as PaceOutcome
      return reply.callNotFound()
    })
  })
  const body = form(['client_id', 'victim'])
  const ask = (outcome: PaceOutcome) => app.inject({ method: 'POST', url: '/token', payload: body.payload, headers: { ...body.headers, 'x-outcome': outcome } })
  for (let i = 0; i < 3; i++) {
    const response = await ask('rejected')
    t.equal(response.statusCode, 404)
    t.equal(app.pace.get('/token')!.size, 0, 'refunded')
  }
  t.equal((await ask('accepted')).statusCode, 404)
  t.equal(app.pace.get('/token')!.size, 1, 'committed')
  t.equal((await ask('accepted')).statusCode, 429)
})

t.test('spend every: a rejected outcome keeps the unit spent until it refills', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/authorize', { config: { pace: { perSecond: 2, key: 'source', spend: 'every' } } }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(400).send({ error: 'invalid_request' })
    })
  })
  t.same(await statuses(app, 3, '/authorize'), [400, 400, 429])
  clock.t = 499
  t.same(await statuses(app, 1, '/authorize'), [429], 'not yet one unit back')
  clock.t = 500
  t.same(await statuses(app, 2, '/authorize'), [400, 429], 'one unit back after 1/rate seconds')
})

t.test('a route with both: rejection refunds the client unit, never the source unit', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: [{ perSecond: 5, key: 'client', spend: 'accepted' }, { perSecond: 3, key: 'source', spend: 'every' }] }
    }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  t.same(await statuses(app, 4), [401, 401, 401, 429])
  t.equal(app.pace.get('/token#client')!.size, 0, 'the client pace was refunded every time')
  t.equal(app.pace.get('/token#source')!.size, 1)
})

t.test('a later pace denying in preHandler refunds that hook only: an onRequest source unit stays spent', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: [{ perSecond: 1, key: 'client', spend: 'accepted' }, { perSecond: 10, key: 'source', spend: 'every' }] }
    }, async () => ({ ok: true }))
  })
  t.same(await statuses(app, 3), [200, 429, 429])
  const source = app.pace.get('/token#source')!
  // 10 units, 3 spent: 7 left, so exactly 7 more grants for this source at this instant.
  let granted = 0
  while (source.reserve('127.0.0.1').granted) granted++
  t.equal(granted, 7)
})

t.test('refill is continuous and exact on the clock', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: { perSecond: 3, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
  })
  // Row per step: [time ms, grants at that instant]; rate 3, so one unit refills every 333.3 ms.
  const grid: Array<[number, number]> = [
    [0, 3], // a full bucket: floor(3)
    [333, 0], // 0.999 of a unit back
    [334, 1], // 1.002 back: one granted, 0.002 left
    [1000, 2], // 0.002 + 1.998 = exactly 2
    [1001, 0], // 0.003
    [1334, 1], // 0.003 + 0.999 = 1.002
    [3_600_000, 3] // an hour of silence: one second of rate, no more
  ]
  for (const [time, expected] of grid) {
    clock.t = time
    let granted = 0
    while ((await post(app)).statusCode === 200) granted++
    t.equal(granted, expected, `t=${time}`)
  }
})

t.test('an hour of silence gives one second of rate, not an hour of it', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
  })
  await statuses(app, 10)
  clock.t = 60 * 60 * 1000
  const burst = await Promise.all(Array.from({ length: 100 }, () => post(app)))
  t.equal(burst.filter(r => r.statusCode === 200).length, 10)
})

t.test('spenders leave the table one horizon (a second) after they spent', async t => {
  const clock = { t: 0 }
  const app = await build(t, { now: () => clock.t }, app => {
    app.post('/token', { config: { pace: { perSecond: 2, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
  })
  const pace = app.pace.get('/token')!
  for (let i = 0; i < 100; i++) {
    await app.inject({ method: 'POST', url: '/token', ...form(['client_id', `spender-${i}`]) })
    await app.inject({ method: 'POST', url: '/token', ...form(['client_id', `spender-${i}`]) })
  }
  t.equal(pace.size, 100, 'every spender holds a row')
  clock.t = 999
  await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'late']) })
  t.ok(pace.size >= 100, 'a drained bucket is not full again before a whole second')
  clock.t = 1999
  await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'later']) })
  t.equal(pace.size, 1, 'the sweep a horizon later kept only the newest spender')
})

t.test('a handler that throws after flagging rejected is refunded; one that throws without is spent', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, (request) => {
      if ((request.body as Record<string, string>).reject === 'yes') request.pace.outcome = 'rejected'
      throw new Error('synchronous failure')
    })
  })
  t.equal((await post(app, '/token', ['reject', 'yes'])).statusCode, 500)
  t.equal((await post(app, '/token', ['reject', 'yes'])).statusCode, 500, 'refunded: the unit was there again')
  t.equal((await post(app, '/token', ['reject', 'no'])).statusCode, 500)
  t.equal((await post(app, '/token', ['reject', 'no'])).statusCode, 429, 'spent')
})

t.test('a reply sent by another hook of the route settles like any reply', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: CLIENT_1 },
      preHandler: (request, reply, next) => {
        if ((request.body as Record<string, string>).auth !== 'ok') {
          request.pace.outcome = 'rejected'
          reply.code(401).send({ error: 'invalid_client', from: 'hook' })
          return
        }
        next()
      }
    }, async () => ({ ok: true }))
    app.post('/forbidden', {
      config: { pace: CLIENT_1 },
      preHandler: async (_request, reply) => reply.code(403).send({ error: 'forbidden' })
    }, async () => ({ ok: true }))
  })
  const rejected = await post(app, '/token', ['auth', 'bad'])
  t.same([rejected.statusCode, rejected.json().from], [401, 'hook'])
  t.equal((await post(app, '/token', ['auth', 'bad'])).statusCode, 401, 'the hook\'s rejection was refunded')
  t.equal((await post(app, '/token', ['auth', 'ok'])).statusCode, 200)
  t.equal((await post(app, '/token', ['auth', 'ok'])).statusCode, 429)
  t.same(await statuses(app, 2, '/forbidden'), [403, 429], 'a hook that answers without the flag spends')
})

t.test('a request answered before the preHandler reserves nothing on a client pace', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: CLIENT_1 },
      schema: { body: { type: 'object', required: ['grant_type'] } }
    }, async () => ({ ok: true }))
    app.post('/blocked', {
      config: { pace: CLIENT_1 },
      onRequest: (_request, reply, next) => { reply.code(503).send({ error: 'maintenance' }); next() }
    }, async () => ({ ok: true }))
  })
  t.same(await statuses(app, 3), [400, 400, 400], 'validation failed before the preHandler: nothing reserved')
  t.equal((await post(app, '/token', ['grant_type', 'client_credentials'])).statusCode, 200)
  t.same(await statuses(app, 2, '/blocked'), [503, 503])
  t.equal(app.pace.get('/blocked')!.size, 0)
})

t.test('an outcome set to rejected after settlement refunds then; set back to accepted, it spends nothing again', async t => {
  let ticket: PaceTicket | null = null
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request) => {
      ticket = request.pace
      return { ok: true }
    })
  })
  t.equal((await post(app)).statusCode, 200)
  t.equal(ticket!.settled, true)
  t.equal(app.pace.get('/token')!.size, 1, 'committed as the answer was sent')
  ticket!.outcome = 'rejected'
  t.equal(app.pace.get('/token')!.size, 0, 'the late flag refunded the unit')
  ticket!.outcome = 'accepted'
  t.equal(app.pace.get('/token')!.size, 0, 'a refund is not taken back')
  t.equal((await post(app)).statusCode, 200)
})

t.test('an error handler (setErrorHandler runs after onError, which settled) may still flag the exchange rejected', async t => {
  class InvalidClient extends Error {}
  const app = await build(t, { now: () => 0 }, app => {
    app.setErrorHandler((error, request, reply) => {
      if (error instanceof InvalidClient) {
        request.pace.outcome = 'rejected'
        return reply.code(401).send({ error: 'invalid_client' })
      }
      return reply.send(error)
    })
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request) => {
      if ((request.body as Record<string, string>).client_secret !== 'right') throw new InvalidClient()
      return { ok: true }
    })
  })
  const stranger = await post(app, '/token', ['client_secret', 'wrong'])
  t.equal(stranger.statusCode, 401)
  t.same(stranger.json(), { error: 'invalid_client' })
  t.equal((await post(app, '/token', ['client_secret', 'wrong'])).statusCode, 401, 'the stranger burnt nothing')
  t.equal((await post(app, '/token', ['client_secret', 'right'])).statusCode, 200, 'the client still has its unit')
})

t.test('request.pace.outcome accepts only accepted or rejected', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request) => {
      try {
        request.pace.outcome = 'maybe' as PaceOutcome
      } catch (err) {
        return { name: (err as Error).name, message: (err as Error).message, outcome: request.pace.outcome }
      }
      return { thrown: false }
    })
  })
  t.same((await post(app)).json(), {
    name: 'TypeError',
    message: 'exchangepace: request.pace.outcome must be \'accepted\' or \'rejected\', got maybe',
    outcome: 'accepted'
  })
})

t.test('a handler timeout (Fastify handlerTimeout) settles the 503 like any response', async t => {
  const release = deferred()
  const tickets: PaceTicket[] = []
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { handlerTimeout: 20, config: { pace: { perSecond: 3, key: 'client', spend: 'accepted' } } }, async (request: FastifyRequest) => {
      tickets.push(request.pace)
      const { mode } = request.body as Record<string, string>
      if (mode === 'reject-first') request.pace.outcome = 'rejected'
      if (mode === 'reject-on-signal') request.signal.addEventListener('abort', () => { request.pace.outcome = 'rejected' })
      await release.promise
      request.pace.outcome = 'rejected' // after the 503 was settled: refunds then
      return { late: true }
    })
  })
  t.teardown(() => release.resolve())
  const timedOut = await post(app, '/token', ['mode', 'accept'])
  t.equal(timedOut.statusCode, 503)
  t.equal(tickets[0].settled, true, 'settled when the 503 was sent')
  t.equal((await post(app, '/token', ['mode', 'reject-first'])).statusCode, 503)
  t.equal((await post(app, '/token', ['mode', 'reject-on-signal'])).statusCode, 503)
  release.resolve()
  await tick()
  t.same(tickets.map(ticket => ticket.settled), [true, true, true])
  const pace = app.pace.get('/token')!
  let left = 0
  while (pace.reserve('victim').granted) left++
  t.equal(left, 3, 'the two flagged before the 503 were refunded as it was sent, the first by its late flag')
})

/** A server on 127.0.0.1, port 0, closed when `t` ends. */
async function listen (app: FastifyInstance): Promise<number> {
  await app.listen({ port: 0, host: '127.0.0.1' })
  return (app.server.address() as AddressInfo).port
}

/** Sends a request over a real socket; `destroy()` it to hang up. Errors of an abandoned client are ignored. */
function openRequest (port: number, method: string, body: ReturnType<typeof form> | null, path = '/token'): http.ClientRequest {
  const request = http.request({ host: '127.0.0.1', port, method, path, headers: body?.headers ?? {} })
  request.on('error', () => {})
  request.end(body?.payload)
  return request
}

/**
 * A token route (rate 1, spend accepted, keyed by the client_id of the query or the body) whose
 * handler flags the exchange rejected `before` its client hangs up, `after` it, or `never`, then
 * answers 401. The client hangs up while the handler runs; resolves once the answer went through
 * Fastify (onSend), with the request's ticket and what the route's own onRequestAbort saw.
 */
async function abandonedToken (t: TapTest, method: 'GET' | 'POST', flag: 'before' | 'after' | 'never') {
  const started = deferred<PaceTicket>()
  const gone = deferred()
  const ended = deferred()
  const abortHook = deferred<boolean>()
  const app = await build(t, { now: () => 0 }, app => {
    app.route({
      method,
      url: '/token',
      config: { pace: { perSecond: 1, key: (request) => (request.query as Record<string, string>).client_id ?? (request.body as Record<string, string>)?.client_id, spend: 'accepted' } },
      onRequestAbort: (request, next) => { abortHook.resolve(request.pace.settled); next() },
      handler: async (request: FastifyRequest, reply: FastifyReply) => {
        reply.raw.once('close', () => gone.resolve())
        if (flag === 'before') request.pace.outcome = 'rejected'
        started.resolve(request.pace)
        await gone.promise
        if (flag === 'after') request.pace.outcome = 'rejected'
        ended.resolve()
        // Without the flag, an answer that shows no failed client authentication (RFC 6749 section 5.2).
        return flag === 'never' ? reply.code(400).send({ error: 'invalid_grant' }) : reply.code(401).send({ error: 'invalid_client' })
      }
    })
  })
  const port = await listen(app)
  const request = openRequest(port, method, method === 'POST' ? form(['client_id', 'victim']) : null, method === 'GET' ? '/token?client_id=victim' : '/token')
  const ticket = await started.promise
  request.destroy()
  await gone.promise
  await ended.promise
  await tick() // the response runs through onSend within this turn
  return { app, ticket, abortHook }
}

const tryAgain = async (app: FastifyInstance): Promise<number> =>
  (await app.inject({ method: 'GET', url: '/token?client_id=victim' })).statusCode

t.test('over a real socket: a POST whose client hangs up, then flagged rejected, is refunded', async t => {
  const { app, ticket } = await abandonedToken(t, 'POST', 'after')
  t.equal(ticket.settled, true)
  t.equal(app.pace.get('/token')!.size, 0)
  const refund = ticket.held[0].reservation
  let refunds = 0
  const original = refund.refund.bind(refund)
  Object.assign(refund, { refund: () => { refunds++; original() } })
  ticket.outcome = 'rejected'
  t.equal(refunds, 0, 'settled once: setting the flag again refunds nothing more')
  ticket._settle()
  t.equal(refunds, 0, 'a second settlement (a second pass through onSend) refunds nothing')
})

t.test('over a real socket: a POST whose client hangs up, without the flag, stays spent', async t => {
  const { app, ticket } = await abandonedToken(t, 'POST', 'never')
  t.equal(ticket.settled, true, 'committed as the answer met the dead socket')
  t.equal(app.pace.get('/token')!.size, 1)
  const again = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'victim']) })
  t.equal(again.statusCode, 429)
})

t.test('over a real socket: a POST flagged rejected before its client hung up is refunded', async t => {
  const { app, ticket } = await abandonedToken(t, 'POST', 'before')
  t.equal(ticket.settled, true)
  t.equal(app.pace.get('/token')!.size, 0)
})

t.test('over a real socket: a GET whose client hangs up gets onRequestAbort; the flag set later refunds as the answer meets the dead socket', async t => {
  const { app, ticket, abortHook } = await abandonedToken(t, 'GET', 'after')
  t.equal(await abortHook.promise, false, 'not settled at the abort: the outcome is not final before the answer')
  t.equal(ticket.settled, true, 'settled in onSend')
  t.equal(await tryAgain(app), 401)
})

t.test('over a real socket: a GET flagged rejected before its client hung up is refunded', async t => {
  const { app, ticket, abortHook } = await abandonedToken(t, 'GET', 'before')
  t.equal(await abortHook.promise, false)
  t.equal(ticket.settled, true)
  t.equal(await tryAgain(app), 401)
})

t.test('over a real socket: a GET whose client hangs up without the flag stays spent', async t => {
  const { app, ticket, abortHook } = await abandonedToken(t, 'GET', 'never')
  t.equal(await abortHook.promise, false)
  t.equal(ticket.settled, true, 'committed as the answer met the dead socket')
  t.equal(await tryAgain(app), 429)
})

t.test('over a real socket: a client that hangs up during its body upload has reserved nothing', async t => {
  const aborted = deferred<PaceTicket>()
  let handled = false
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: CLIENT_1 },
      onRequestAbort: (request, next) => { aborted.resolve(request.pace); next() }
    }, async () => { handled = true; return { ok: true } })
  })
  const port = await listen(app)
  const request = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/token', headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '1000' } })
  request.on('error', () => {})
  request.write('client_id=victim&')
  request.flushHeaders()
  // The server has the headers once the route's onRequest-level state exists; hang up mid-body.
  await new Promise<void>(resolve => app.server.once('request', () => resolve()))
  request.destroy()
  t.equal((await aborted.promise).held.length, 0, 'the preHandler never ran: the ticket holds nothing')
  t.equal(handled, false)
  t.equal(app.pace.get('/token')!.size, 0)
})

t.test('over a real socket: an ordinary exchange gets its quota headers and settles', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: { perSecond: 2, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
  })
  const port = await listen(app)
  const { payload, headers } = form(['client_id', 'victim'])
  const response = await fetch(`http://127.0.0.1:${port}/token`, { method: 'POST', body: payload, headers })
  t.equal(response.status, 200)
  t.equal(response.headers.get('ratelimit'), '"/token";r=1;t=1')
  t.same(await response.json(), { ok: true })
})

t.test('over a real socket: a rejected exchange queued behind another response, then abandoned, is refunded', async t => {
  // Its response waits behind the slow one on the same connection: the socket is alive as it
  // passes onSend, and once the client hangs up the response never finishes (no onResponse).
  const slow = deferred()
  const answered = deferred<PaceTicket>()
  const app = await build(t, { now: () => 0 }, app => {
    app.get('/slow', async () => { await slow.promise; return 'slow' })
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request, reply) => {
      request.pace.outcome = 'rejected'
      reply.code(401).send({ error: 'invalid_client' })
      answered.resolve(request.pace)
      return reply
    })
  })
  const port = await listen(app)
  const { payload } = form(['client_id', 'victim'])
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  const closed = new Promise<void>(resolve => app.server.once('connection', (serverSide: Socket) => serverSide.once('close', () => resolve())))
  socket.write('GET /slow HTTP/1.1\r\nHost: x\r\n\r\n' +
    `POST /token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`)
  const ticket = await answered.promise
  socket.destroy()
  await closed
  slow.resolve()
  await tick()
  t.equal(ticket.settled, true, 'settled as the answer was handed over, though it never reached the client')
  t.equal(app.pace.get('/token')!.size, 0, 'refunded')
  t.equal((await post(app)).statusCode, 401, 'the client id it named is not refused')
})

t.test('HTTP/2: a stream the client resets while the secret is checked settles by the handler\'s answer', async t => {
  // Node finishes the response of a reset stream at once, before the handler has answered.
  let ticket: PaceTicket | null = null
  let settledAtReset: boolean | null = null
  const answered = deferred()
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request, reply) => {
      await new Promise(resolve => reply.raw.once('close', resolve))
      settledAtReset = request.pace.settled
      ticket = request.pace
      request.pace.outcome = 'rejected'
      reply.code(401).send({ error: 'invalid_client' })
      answered.resolve()
      return reply
    })
  }, { http2: true } as FastifyServerOptions)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const client = http2.connect(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`)
  client.on('error', () => {})
  t.teardown(() => client.destroy())
  const { payload, headers } = form(['client_id', 'victim'])
  const stream = client.request({ ':method': 'POST', ':path': '/token', ...headers })
  stream.on('error', () => {})
  stream.end(payload)
  await new Promise<void>(resolve => app.server.once('stream', serverSide => serverSide.once('end', () => resolve())))
  stream.close(http2.constants.NGHTTP2_CANCEL)
  await answered.promise
  await tick()
  t.equal(settledAtReset, false, 'not settled when the stream closed: the handler had not answered')
  t.equal(ticket!.settled, true)
  t.equal(app.pace.get('/token')!.size, 0, 'the rejected exchange gave its unit back')
})

t.test('an error answer settles when it is known: Fastify may write its last-resort answer past every onSend', async t => {
  // A handler flags the exchange rejected and throws; an onSend hook of the server's fails on the
  // error answer, and Fastify writes its answer straight to the socket (with the status the first
  // error set).
  const app = await build(t, { now: () => 0 }, app => {
    app.addHook('onSend', async () => { throw new Error('a broken onSend hook') })
    app.post('/token', { config: { pace: CLIENT_1 } }, async (request) => {
      request.pace.outcome = 'rejected'
      throw Object.assign(new Error('invalid_client'), { statusCode: 401 })
    })
  })
  const response = await post(app)
  t.equal(response.statusCode, 401)
  t.match(response.json(), { message: 'a broken onSend hook' }, 'the last-resort answer')
  t.equal(app.pace.get('/token')!.size, 0, 'refunded')
})

t.test('a route\'s own onError hook may still flag the exchange: the plugin settles after it', async t => {
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', {
      config: { pace: CLIENT_1 },
      onError: async (request, _reply, error) => {
        if ((error as { statusCode?: number }).statusCode === 401) request.pace.outcome = 'rejected'
      }
    }, async () => {
      throw Object.assign(new Error('invalid_client'), { statusCode: 401 })
    })
  })
  t.equal((await post(app)).statusCode, 401)
  t.equal(app.pace.get('/token')!.size, 0, 'refunded')
})
