import t from 'tap'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify'
import formbody from '@fastify/formbody'
import exchangePace, { type PaceAnswer, type PaceRouteOptions } from '../../lib/index.js'
import { oauthOutcome } from '../../lib/http/answer-outcome.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * The outcome read from the answer when the app set none (handlers it did not write): RFC 6749
 * section 5.2 by default, or `outcomeOf`; from Fastify's answers (a proxied stream's too) and from
 * a hijacked reply's raw response. A refund shows as the client's row gone (the clock stands
 * still: a unit kept spent keeps its row).
 */

const CLIENT: PaceRouteOptions = { perSecond: 1, key: 'client', spend: 'accepted' }
const FAILURES: PaceRouteOptions = { limit: 3, window: 3600, key: ['client', 'source'], spend: 'rejected' }
const SOURCE: PaceRouteOptions = { perSecond: 10, key: 'source', spend: 'every' }

type Answer = (reply: FastifyReply) => unknown

/** A token route that answers as `answers[x-answer]` does, setting no outcome. */
async function app (t: TapTest, answers: Record<string, Answer>, options: Record<string, unknown> = {}): Promise<FastifyInstance> {
  return await build(t, { now: () => 0, ...options }, app => {
    app.post('/token', { config: { pace: [FAILURES, CLIENT] } }, async (request, reply) => answers[request.headers['x-answer'] as string](reply))
  })
}

function ask (app: FastifyInstance, answer: string) {
  const body = form(['client_id', 'victim'])
  return app.inject({ method: 'POST', url: '/token', payload: body.payload, headers: { ...body.headers, 'x-answer': answer } })
}

/** Whether the client's unit came back, and the failure budget's: [client refunded, failure refunded]. */
function refunds (app: FastifyInstance): [boolean, boolean] {
  return [app.pace.get('/token#client')!.size === 0, app.pace.get('/token#client+source:rejected')!.size === 0]
}

const json = (status: number, body: object): Answer => reply => reply.code(status).send(body)

t.test('by default a 401, or a 400 invalid_client, is a rejected exchange; any other answer accepted', async t => {
  const cases: Array<[string, Answer, [boolean, boolean]]> = [
    ['401', json(401, { error: 'invalid_client' }), [true, false]],
    ['401 without a body', reply => reply.code(401).send(), [true, false]],
    ['400 invalid_client', json(400, { error: 'invalid_client' }), [true, false]],
    ['400 invalid_client, +json', reply => reply.code(400).type('application/problem+json; charset=utf-8').send(JSON.stringify({ error: 'invalid_client' })), [true, false]],
    ['400 invalid_grant', json(400, { error: 'invalid_grant' }), [false, true]],
    ['400 invalid_client as text', reply => reply.code(400).type('text/plain').send('{"error":"invalid_client"}'), [false, true]],
    ['400 not JSON', reply => reply.code(400).type('application/json').send('{not json'), [false, true]],
    ['400 JSON null', reply => reply.code(400).type('application/json').send('null'), [false, true]],
    ['400 encoded', reply => reply.code(400).type('application/json').header('content-encoding', 'br').send('{"error":"invalid_client"}'), [false, true]],
    ['400 identity', reply => reply.code(400).type('application/json').header('content-encoding', 'identity').send('{"error":"invalid_client"}'), [true, false]],
    ['200', json(200, { access_token: 'x' }), [false, true]],
    ['500', json(500, { error: 'server_error' }), [false, true]]
  ]
  for (const [name, answer, expected] of cases) {
    const server = await app(t, { a: answer })
    await ask(server, 'a')
    t.same(refunds(server), expected, name)
  }
})

t.test('an outcome the handler set is kept, whatever the answer', async t => {
  const server = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: [FAILURES, CLIENT] } }, async (request, reply) => {
      request.pace.outcome = 'accepted'
      return reply.code(401).send({ error: 'invalid_client' })
    })
  })
  await ask(server, 'a')
  t.same(refunds(server), [false, true])
})

t.test('the quota headers follow the outcome read: a client\'s quota only on an accepted exchange', async t => {
  const server = await app(t, { ok: json(200, {}), bad: json(400, { error: 'invalid_client' }) })
  const bad = await ask(server, 'bad')
  t.equal(bad.headers.ratelimit, '"/token#client+source:rejected";r=2;t=1200')
  const ok = await ask(server, 'ok')
  t.equal(ok.headers.ratelimit, '"/token#client+source:rejected";r=2;t=1200, "/token#client";r=0;t=1')
})

t.test('outcomeOf decides instead, told the status, the headers and the JSON body', async t => {
  const told: PaceAnswer[] = []
  const server = await app(t, {
    denied: reply => reply.code(403).header('x-why', 'locked').send({ error: 'access_denied' }),
    text: reply => reply.code(200).type('text/plain').send('fine')
  }, {
    outcomeOf: (answer: PaceAnswer) => {
      told.push(answer)
      return answer.statusCode === 403 ? 'rejected' : 'accepted'
    }
  })
  await ask(server, 'denied')
  t.same(refunds(server), [true, false])
  t.match(told[0], { statusCode: 403, headers: { 'x-why': 'locked' }, body: { error: 'access_denied' } })
  await ask(server, 'text')
  t.equal(told[1].body, undefined, 'a body that is not JSON is not given')
})

t.test('an outcomeOf that throws or answers anything else is logged, and the exchange taken as rejected', async t => {
  const lines: string[] = []
  const stream = { write: (line: string) => { lines.push(line) } }
  for (const outcomeOf of [() => { throw new Error('boom') }, () => 'maybe']) {
    const server = Fastify({ logger: { level: 'error', stream } })
    t.teardown(() => server.close())
    await server.register(formbody)
    await server.register(exchangePace, { now: () => 0, outcomeOf })
    server.post('/token', { config: { pace: [FAILURES, CLIENT] } }, async () => ({ access_token: 'x' }))
    const response = await ask(server, 'a')
    t.equal(response.statusCode, 200)
    t.same(refunds(server), [true, false])
  }
  t.match(lines[0], /exchangepace: outcomeOf threw; the exchange is taken as rejected/)
  t.match(lines[1], /exchangepace: outcomeOf must return 'accepted' or 'rejected', got maybe; the exchange is taken as rejected/)
})

t.test('RFC 6749\'s rule reads the error of a JSON object only', async t => {
  t.equal(oauthOutcome({ statusCode: 401, headers: {}, body: undefined }), 'rejected')
  t.equal(oauthOutcome({ statusCode: 400, headers: {}, body: 'invalid_client' }), 'accepted')
  t.equal(oauthOutcome({ statusCode: 400, headers: {}, body: { error: 'invalid_client' } }), 'rejected')
  t.equal(oauthOutcome({ statusCode: 403, headers: {}, body: { error: 'invalid_client' } }), 'accepted')
})

t.test('outcomeOf must be a function', async t => {
  const server = Fastify()
  t.teardown(() => server.close())
  await t.rejects(async () => { await server.register(exchangePace, { outcomeOf: 'rfc6749' as never }) }, new TypeError('exchangepace: outcomeOf must be a function, got string'))
})

t.test('a streamed answer (a proxied upstream\'s) is read up to 64 KiB and sent on byte for byte', async t => {
  // Chunks of 16 KiB: the fifth passes the cap, three more follow it.
  const long = JSON.stringify({ error: 'invalid_client', padding: 'x'.repeat(120 * 1024) })
  const chunks = (text: string) => Readable.from([Buffer.from(text.slice(0, 10)), text.slice(10)])
  const server = await app(t, {
    short: reply => reply.code(400).type('application/json').send(chunks('{"error":"invalid_client"}')),
    long: reply => reply.code(400).type('application/json').send(Readable.from(long.match(/[^]{1,16384}/g)!)),
    broken: reply => reply.code(400).type('application/json').send(new Readable({ read () { this.destroy(new Error('upstream reset')) } })),
    text: reply => reply.code(400).type('text/plain').send(chunks('{"error":"invalid_client"}'))
  })
  const short = await ask(server, 'short')
  t.equal(short.body, '{"error":"invalid_client"}')
  t.same(refunds(server), [true, false], 'its body read')
  const serverLong = await app(t, { long: reply => reply.code(400).type('application/json').send(Readable.from(long.match(/[^]{1,16384}/g)!)) })
  const longAnswer = await ask(serverLong, 'long')
  t.equal(longAnswer.body, long, 'a longer body is sent whole')
  t.same(refunds(serverLong), [false, true], 'and not read')
  const broken = await ask(server, 'broken')
  t.match(JSON.parse(broken.body), { message: 'upstream reset' }, 'a stream that fails before its end fails the answer: Fastify answers the error')
  const serverText = await app(t, { text: reply => reply.code(400).type('text/plain').send(chunks('{"error":"invalid_client"}')) })
  t.equal((await ask(serverText, 'text')).body, '{"error":"invalid_client"}')
  t.same(refunds(serverText), [false, true], 'a body that is not JSON is not read')
})

/** A route that hijacks its reply and writes the answer on the raw response as `write` does. */
async function hijacking (t: TapTest, write: (res: http.ServerResponse) => void, pace: PaceRouteOptions[] = [FAILURES, CLIENT]): Promise<FastifyInstance> {
  return await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace } }, async (_request, reply) => {
      reply.hijack()
      write(reply.raw)
    })
  })
}

t.test('a hijacked reply: the outcome is read from the raw response, settled as the app ends it, with the quota headers', async t => {
  const body = '{"error":"invalid_client"}'
  const cases: Array<[string, (res: http.ServerResponse) => void, [boolean, boolean]]> = [
    ['end with the body', res => { res.statusCode = 400; res.setHeader('content-type', 'application/json'); res.end(body) }],
    ['writeHead with headers, writes, end', res => { res.writeHead(400, 'Bad Request', { 'content-type': 'application/json' }); res.write(body.slice(0, 5)); res.write(Buffer.from(body.slice(5)), () => {}); res.end() }],
    ['writeHead with a raw list', res => { res.writeHead(400, ['content-type', 'application/json', 'x-a', 'b']); res.end(body, 'utf8') }],
    ['end with a callback', res => { res.writeHead(400, { 'content-type': 'application/json' }); res.write(body, 'utf8'); res.end(() => {}) }],
    ['end with a chunk and a callback', res => { res.writeHead(400, { 'content-type': 'application/json', 'x-none': undefined }); res.end(body, () => {}) }],
    ['a 401, written at once', res => { res.writeHead(401); res.write('no'); res.end() }],
    ['a 200', res => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{}') }],
    ['a 400 invalid_grant', res => { res.writeHead(400, { 'content-type': 'application/json' }); res.end('{"error":"invalid_grant"}') }],
    ['a 400 longer than 64 KiB', res => { res.writeHead(400, { 'content-type': 'application/json' }); res.write(body.slice(0, -1)); res.write(`,"p":"${'x'.repeat(70 * 1024)}"`); res.end('}') }]
  ].map(([name, write], i) => [name as string, write as (res: http.ServerResponse) => void, (i < 6 ? [true, false] : [false, true]) as [boolean, boolean]])
  for (const [name, write, expected] of cases) {
    const server = await hijacking(t, write)
    const response = await ask(server, 'x')
    t.same(refunds(server), expected, name)
    t.match(response.headers.ratelimit, /^"\/token#client\+source:rejected";r=\d;t=\d+/, `${name}: the quota headers`)
    t.equal(JSON.parse(JSON.stringify(response.headers['content-type'] ?? null)), name.startsWith('a 401') ? null : 'application/json', `${name}: the app's headers`)
  }
  const plain = await hijacking(t, res => { res.writeHead(400, 'Nope', { 'content-type': 'application/json' }); res.end(body) })
  t.equal((await ask(plain, 'x')).statusMessage, 'Nope', 'the status message goes out with the head')
})

t.test('a hijacked reply on a route that commits as it reserves carries its quota headers over', async t => {
  const server = await hijacking(t, res => { res.end('ok') }, [SOURCE])
  const response = await ask(server, 'x')
  t.equal(response.headers['ratelimit-policy'], '"/token";q=10;w=1')
  t.equal(response.body, 'ok')
})

t.test('a hijacked response closed before the app ends it is never settled: its units stay spent', async t => {
  let closed!: () => void
  const gone = new Promise<void>(resolve => { closed = resolve })
  const server = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: [FAILURES, CLIENT] } }, async (request, reply) => {
      reply.hijack()
      reply.raw.on('close', () => {
        reply.raw.statusCode = 401
        closed()
      })
      request.raw.socket.destroy()
    })
  })
  await server.listen({ port: 0, host: '127.0.0.1' })
  const { port } = server.server.address() as AddressInfo
  const body = form(['client_id', 'victim'])
  const request = http.request({ port, host: '127.0.0.1', method: 'POST', path: '/token', headers: body.headers })
  request.on('error', () => {})
  request.end(body.payload)
  await Promise.all([gone, new Promise(resolve => request.on('close', resolve))])
  t.same(refunds(server), [false, false])
  t.equal(server.pace.counts('/token#client').refunded, 0)
})
