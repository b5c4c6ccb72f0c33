import t from 'tap'
import { buildServer } from '../../examples/oauth2-server.js'
import { hostname } from 'node:os'
import { RedisStore, secretKey } from '../../lib/index.js'
import { runCli } from '../helpers/cli.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'

/**
 * The admin routes of examples/oauth2-server.js: `fastify.pace` behind a bearer token of their own,
 * through real Fastify. The story is issue 32's: a client deploys its old secret for a minute, one
 * request a second, and is locked out of its failure budget (5 failures an hour per client id and
 * address) for 660 s after the right secret is back, until an operator resets it.
 */

const ADMIN = 'admin-s3cret-change-me'
const REPORTING = { id: 'reporting-service', secret: 'rep-s3cret_2026.v1~' }
const BUDGET = '/token#client+source:rejected'
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`

type App = ReturnType<typeof buildServer>

function token (app: App, secret: string) {
  return app.inject({ method: 'POST', url: '/token', headers: { authorization: basic(REPORTING.id, secret), 'content-type': 'application/x-www-form-urlencoded' }, payload: 'grant_type=client_credentials' })
}

/** A request to an admin route with `authorization` (null: no such header). */
function admin (app: App, action: string, body: object, authorization: string | null = `Bearer ${ADMIN}`) {
  return app.inject({ method: 'POST', url: `/admin/paces/${action}`, headers: authorization === null ? {} : { authorization }, payload: body })
}

async function server (tt: typeof t, options: Parameters<typeof buildServer>[0] = {}) {
  const app = buildServer(options)
  tt.teardown(() => app.close())
  await app.ready()
  return app
}

t.test('a client locked out by a bad secret rotation is seen, and reset, through the admin routes', async t => {
  const clock = { ms: 0 }
  const app = await server(t, { now: () => clock.ms })
  const statuses: number[] = []
  for (let second = 0; second < 60; second++) {
    clock.ms = second * 1000
    statuses.push((await token(app, 'rep-s3cret_2025.v0~')).statusCode)
  }
  t.same(statuses, [...Array(5).fill(401), ...Array(55).fill(429)], 'the old secret for a minute: 5x401, then 55x429')
  clock.ms = 60_000
  const locked = await token(app, REPORTING.secret)
  t.equal(locked.statusCode, 429, 'the right secret is back, and refused')
  t.equal(locked.headers['retry-after'], '660')

  const who = { pace: BUDGET, client: REPORTING.id, source: '127.0.0.1' }
  const inspected = await admin(app, 'inspect', who)
  t.equal(inspected.statusCode, 200)
  t.same(inspected.json(), { pace: BUDGET, remaining: 0, retryAfterMs: 660_000, fullInMs: 3_540_000, blockedUntil: null }, 'inspect shows the lockout')
  const client = { pace: BUDGET, client: REPORTING.id }
  t.same((await admin(app, 'inspect', client)).json(), { pace: BUDGET, remaining: 0, retryAfterMs: 660_000, fullInMs: 3_540_000, blockedUntil: null, source: '127.0.0.1', pairsHeldBack: 1 }, 'so does inspect of the client alone, with the address')

  const reset = await admin(app, 'reset', who)
  t.equal(reset.statusCode, 200)
  t.same(reset.json(), { pace: BUDGET, remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null }, 'reset answers the bucket after: full')
  t.equal((await token(app, REPORTING.secret)).statusCode, 200, 'the next token is granted')
  t.match((await admin(app, 'inspect', client)).json(), { remaining: 5, source: null, pairsHeldBack: 0 }, 'no address of the client is held back')
})

t.test('block refuses a key with a Retry-After reaching the block\'s end; reset lifts it', async t => {
  const app = await server(t)
  const before = Date.now()
  const blocked = await admin(app, 'block', { pace: '/token#client', client: REPORTING.id, seconds: 60 })
  t.equal(blocked.statusCode, 200)
  const until = Date.parse(blocked.json().blockedUntil)
  t.ok(until >= before + 60_000 && until <= Date.now() + 60_000, 'the block\'s end, 60 s from now')
  const refused = await token(app, REPORTING.secret)
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '60')
  t.match((await admin(app, 'inspect', { pace: '/token#client', client: REPORTING.id })).json(), { remaining: 0, blockedUntil: String })
  const address = await admin(app, 'block', { pace: '/token#source', source: '127.0.0.1', seconds: 1 })
  t.equal(address.statusCode, 200, 'an address is blocked the same way')
  await admin(app, 'reset', { pace: '/token#source', source: '127.0.0.1' })
  await admin(app, 'reset', { pace: '/token#client', client: REPORTING.id })
  t.equal((await token(app, REPORTING.secret)).statusCode, 200)
})

t.test('GET /admin/paces names every pace', async t => {
  const app = await server(t)
  const response = await app.inject({ url: '/admin/paces', headers: { authorization: `bearer ${ADMIN}` } })
  t.equal(response.statusCode, 200, 'the scheme is case-insensitive')
  t.same(response.json().paces.sort(), ['/admin#source:rejected', '/authorize', '/token#client', BUDGET, '/token#source', '/token#source:rejected'])
})

t.test('bad input is a 400 invalid_request naming what is wrong, and changes nothing', async t => {
  const clock = { ms: 0 }
  const app = await server(t, { now: () => clock.ms })
  t.equal((await token(app, 'wrong')).statusCode, 401)
  const who = { pace: BUDGET, client: REPORTING.id, source: '127.0.0.1' }
  const before = (await admin(app, 'inspect', who)).json()
  t.equal(before.remaining, 4)
  const cases: Array<[string, string, object, RegExp]> = [
    ['an unknown pace', 'reset', { pace: '/token', client: REPORTING.id }, /no pace is named "\/token"; the paces are/],
    ['parts that do not fit the pace\'s key', 'reset', { pace: BUDGET, source: '127.0.0.1' }, /keyed by client\+source: give \{ client, source \}/],
    ['a malformed address', 'reset', { ...who, source: '127.0.0' }, /source must be an IP address/],
    ['a negative block', 'block', { ...who, seconds: -5 }, /a block lasts a number of seconds > 0/],
    ['a block without seconds', 'block', who, /got undefined/],
    ['no pace', 'reset', { client: REPORTING.id }, /body must have required property 'pace'/],
    ['a block length that is not a number', 'block', { ...who, seconds: 'an hour' }, /body\/seconds must be number/]
  ]
  for (const [what, action, body, description] of cases) {
    const response = await admin(app, action, body)
    t.equal(response.statusCode, 400, what)
    t.equal(response.json().error, 'invalid_request', what)
    t.match(response.json().error_description, description, what)
  }
  t.same((await admin(app, 'inspect', who)).json(), before, 'nothing changed')
  const everyAddress = await admin(app, 'reset', { pace: BUDGET, client: REPORTING.id })
  t.same(everyAddress.json(), { pace: BUDGET, client: REPORTING.id, heldBack: [] }, 'a client alone: every address of it reset')
  t.equal((await admin(app, 'inspect', who)).json().remaining, 5)
})

t.test('the admin routes need the admin token, and a guesser spends its own failure budget', async t => {
  const app = await server(t, { adminToken: 'another-admin-token' })
  const wrong = [null, 'Bearer', 'Bearer admin-s3cret-change-me', 'Basic YWRtaW46YWRtaW4=', 'Bearer another-admin-token x']
  for (const authorization of wrong) {
    const response = await admin(app, 'reset', { pace: BUDGET, client: REPORTING.id, source: '127.0.0.1' }, authorization)
    t.equal(response.statusCode, 401, JSON.stringify(authorization))
    t.equal(response.headers['www-authenticate'], 'Bearer realm="admin"')
    t.equal(response.json().error, 'invalid_token')
  }
  const right = { pace: BUDGET, client: REPORTING.id, source: '127.0.0.1' }
  const refused = await admin(app, 'inspect', right, 'Bearer another-admin-token')
  t.equal(refused.statusCode, 429, 'five wrong tokens from one address: the sixth request is refused before its token is read')
  t.match(refused.headers['retry-after'], /^\d+$/)
  const elsewhere = await app.inject({ method: 'POST', url: '/admin/paces/inspect', remoteAddress: '192.0.2.7', headers: { authorization: 'Bearer another-admin-token' }, payload: right })
  t.equal(elsewhere.statusCode, 200, 'from another address the operator is let in')
  for (let i = 0; i < 10; i++) await app.inject({ method: 'POST', url: '/admin/paces/inspect', remoteAddress: '192.0.2.7', headers: { authorization: 'Bearer another-admin-token' }, payload: right })
  t.equal((await app.inject({ url: '/admin/paces', remoteAddress: '192.0.2.7', headers: { authorization: 'Bearer another-admin-token' } })).statusCode, 200, 'the operator\'s own requests spend nothing')
})

t.test('a store that fails is a 500 server_error, its cause logged and not sent', async t => {
  const failing = { scope: 'shared by a test', outage: 'nothing', pace: () => ({ reserve: async () => ({ granted: true, remaining: 1, retryAfterMs: 0, refund () {} }) }), inspect: async () => { throw new Error('the store is down') } }
  const app = await server(t, { store: failing })
  const response = await admin(app, 'inspect', { pace: '/token#client', client: REPORTING.id })
  t.equal(response.statusCode, 500)
  t.same(response.json(), { error: 'server_error', error_description: 'the server could not complete the request' })
})

t.test('two instances sharing Redis: what the admin routes of one do, the other follows', async t => {
  const redis = await redisOrSkip()
  if (redis === null) return
  const prefix = uniquePrefix('admin')
  t.teardown(async () => { await redis.del(...await redis.keys(`${prefix}*`), `${prefix}none`) })
  const [a, b] = [await server(t, { store: new RedisStore({ client: redis, prefix, timeoutMs: 1000 }) }), await server(t, { store: new RedisStore({ client: redis, prefix, timeoutMs: 1000 }) })]
  for (let i = 0; i < 5; i++) t.equal((await token(i % 2 === 0 ? a : b, 'rep-s3cret_2025.v0~')).statusCode, 401)
  t.equal((await token(b, REPORTING.secret)).statusCode, 429, 'five failures over both instances: locked out on both')
  const who = { pace: BUDGET, client: REPORTING.id, source: '127.0.0.1' }
  t.match((await admin(a, 'inspect', who)).json(), { remaining: 0, blockedUntil: null }, 'inspect on a sees what b refused')
  t.equal((await admin(a, 'reset', who)).statusCode, 200)
  t.equal((await token(b, REPORTING.secret)).statusCode, 200, 'reset on a: b grants')

  t.equal((await admin(b, 'block', { pace: '/token#client', client: REPORTING.id, seconds: 600 })).statusCode, 200)
  const refused = await token(a, REPORTING.secret)
  t.equal(refused.statusCode, 429, 'block on b: a refuses')
  t.equal(refused.headers['retry-after'], '600')
  t.match((await admin(a, 'inspect', { pace: '/token#client', client: REPORTING.id })).json(), { remaining: 0, blockedUntil: String })
  await admin(a, 'reset', { pace: '/token#client', client: REPORTING.id })
  t.equal((await token(b, REPORTING.secret)).statusCode, 200, 'reset on a lifts it on b')
})

t.test('a reset or block through the admin routes is logged with the key and the operator', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = await server(t, { logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  t.equal((await admin(app, 'block', { pace: '/token#source', source: '192.0.2.5', seconds: 60, by: 'alice@ops' })).statusCode, 200)
  t.equal((await admin(app, 'reset', { pace: '/token#source', source: '192.0.2.5' })).statusCode, 200)
  const operated = lines.filter(line => String(line.msg).startsWith('exchangepace: operator'))
  t.match(operated, [
    { pace: '/token#source', key: '192.0.2.5', action: 'blocked', by: 'alice@ops' },
    { pace: '/token#source', key: '192.0.2.5', action: 'reset', by: 'admin route from 127.0.0.1' }
  ])
})

t.test('on Redis, the admin routes\' resets and blocks are appended to the audit trail, by the operator the body names or the caller\'s address', async t => {
  const redis = await redisOrSkip()
  if (redis === null) return
  const prefix = uniquePrefix('admin-audit')
  t.teardown(async () => { await redis.del(...await redis.keys(`${prefix}*`), `${prefix}none`) })
  const app = await server(t, { store: new RedisStore({ client: redis, prefix, timeoutMs: 1000 }) })
  t.equal((await admin(app, 'block', { pace: '/token#client', client: REPORTING.id, seconds: 60, by: 'alice@ops' })).statusCode, 200)
  t.equal((await admin(app, 'reset', { pace: '/token#client', client: REPORTING.id })).statusCode, 200)
  t.equal((await admin(app, 'block', { pace: '/token#source', source: '192.0.2.5', seconds: 90, by: 'bob' })).statusCode, 200)
  t.equal(await redis.type(`${prefix}audit`), 'stream', 'a Redis stream (XADD)')
  t.equal(await redis.xlen(`${prefix}audit`), 3, 'one entry per action')
  const read = await runCli(['audit', '--json', '--redis', process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', '--prefix', prefix])
  t.equal(read.code, 0, read.stderr)
  const hash = `sha256:${secretKey(REPORTING.id)}`
  t.match(JSON.parse(read.stdout).entries, [
    { action: 'block', pace: '/token#source', keyKind: 'source', key: '192.0.2.5', by: 'bob', host: hostname(), blockedMs: 90_000 },
    { action: 'reset', pace: '/token#client', keyKind: 'client', key: hash, by: 'admin route from 127.0.0.1', host: hostname() },
    { action: 'block', pace: '/token#client', keyKind: 'client', key: hash, by: 'alice@ops', host: hostname(), blockedMs: 60_000 }
  ], 'newest first, read back by the CLI; a client id only as its hash')
})
