import t from 'tap'
import Fastify, { type FastifyBaseLogger } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import exchangePace, { Pace, RedisStore, type PaceStore, type RedisClientLike } from '../../lib/index.js'
import { intercept } from '../helpers/intercept.js'

// The store's JavaScript side against a scripted client: every path Redis can take (answers,
// refusals, errors, silence, late answers) without a server. test/redis/*.test.ts run the Lua
// scripts against a real Redis.

/** What a scripted reserve answers: a grant (units left, run, number, time), or a refusal's wait in ms. */
type Reply = [remaining: number, run: number, count: number, at: number] | number

interface Call {
  key: string
  perSecond: number
  /** The window in ms the call carried: none for a one-second pace. */
  windowMs: number | undefined
  /** Answers with `reply` as the reserve script sends it. */
  resolve: (reply: Reply) => void
  /** Answers with exactly `raw`, whatever it is. */
  answer: (raw: unknown) => void
  reject: (err: Error) => void
}

/**
 * `reply` as the reserve script sends it: doubles, little-endian, one (a refusal) or five (a grant,
 * whose fifth, the time until the bucket is full, is 1000 ms here).
 */
function encoded (reply: Reply): Buffer {
  const values = typeof reply === 'number' ? [reply] : [...reply, 1000]
  const bytes = Buffer.alloc(8 * values.length)
  values.forEach((value, i) => bytes.writeDoubleLE(value, 8 * i))
  return bytes
}

/** Called as a refund reaches the client. */
let onRefund: (() => void) | null = null

class ScriptedClient implements RedisClientLike {
  readonly scripts = new Map<string, string>()
  readonly reserves: Call[] = []
  /** Every reserve and refund, in the order they reached the client. */
  readonly sent: string[] = []
  readonly refunds: string[] = []
  readonly refundedGrants: Array<[run: number, count: number, at: number]> = []
  /** The window in ms each refund carried: none for a one-second pace. */
  readonly refundWindows: Array<number | undefined> = []
  /** How refunds fail: their promise rejects, or the call throws (none of ioredis's commands should). */
  refundFails: false | 'rejects' | 'throws' = false
  /** A client that throws instead of returning a promise (none of ioredis's commands should). */
  reserveThrows = false

  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void {
    this.scripts.set(name, definition.lua)
  }

  exchangepaceReserveBuffer (key: string, perSecond: number, windowMs?: number): Promise<Buffer> {
    if (this.reserveThrows) throw new Error('Connection is closed.')
    this.sent.push(`reserve ${key}`)
    return new Promise((resolve, reject) => { this.reserves.push({ key, perSecond, windowMs, resolve: reply => resolve(encoded(reply)), answer: raw => resolve(raw as Buffer), reject }) })
  }

  exchangepaceRefund (key: string, _perSecond: number, run: number, count: number, at: number, windowMs?: number): Promise<number> {
    this.refunds.push(key)
    this.sent.push(`refund ${key}`)
    onRefund?.()
    this.refundedGrants.push([run, count, at])
    this.refundWindows.push(windowMs)
    if (this.refundFails === 'throws') throw new Error('Connection is closed.')
    return this.refundFails === 'rejects' ? Promise.reject(new Error('connection lost')) : Promise.resolve(1)
  }
}

function recordingLog (): { log: FastifyBaseLogger, lines: Array<[string, string]> } {
  const lines: Array<[string, string]> = []
  const record = (level: string) => (objOrMsg: unknown, msg?: string) => {
    lines.push([level, typeof objOrMsg === 'string' ? objOrMsg : String(msg)])
  }
  const log = { warn: record('warn'), info: record('info'), debug: record('debug') } as unknown as FastifyBaseLogger
  return { log, lines }
}

function setup (options: Partial<ConstructorParameters<typeof RedisStore>[0]> = {}) {
  const client = new ScriptedClient()
  const store = new RedisStore({ client, timeoutMs: 20, retryMs: 200, ...options })
  let now = 0
  const local = new Pace({ perSecond: 2, now: () => now })
  const { log, lines } = recordingLog()
  const pace = store.pace('/token', { limit: 2, window: 1 }, local, log)
  return { client, store, local, pace, log, lines, clock: () => now, tick: (ms: number) => { now += ms } }
}

t.test('constructor rejects what is not an ioredis client or a valid option, naming it', async t => {
  const client = new ScriptedClient()
  t.throws(() => new RedisStore(undefined as never), { name: 'TypeError', message: /client must be an ioredis client/ })
  t.throws(() => new RedisStore({ client: {} as never }), { message: /client must be an ioredis client/ })
  t.throws(() => new RedisStore({ client: null as never }), { message: /client must be an ioredis client/ })
  t.throws(() => new RedisStore({ client, prefix: 5 as never }), { message: 'exchangepace: RedisStore prefix must be a string, got number' })
  t.throws(() => new RedisStore({ client, timeoutMs: 0 }), { message: 'exchangepace: RedisStore timeoutMs must be a number > 0 and <= 2147483647, got 0' })
  t.throws(() => new RedisStore({ client, timeoutMs: 2 ** 31 }), { message: 'exchangepace: RedisStore timeoutMs must be a number > 0 and <= 2147483647, got 2147483648' })
  t.throws(() => new RedisStore({ client, retryMs: Number.NaN }), { message: 'exchangepace: RedisStore retryMs must be a number > 0, got NaN' })
  t.throws(() => new RedisStore({ client, whenUnavailable: 'maybe' as never }), { message: /whenUnavailable must be 'fallback', 'open' or 'closed', got maybe/ })
})

t.test('a pace above the rate the scripts count exactly is refused when its route is added, naming it', async t => {
  const { store, local } = setup()
  const log = recordingLog().log
  t.throws(() => store.pace('/token', { limit: 2 ** 21 + 1, window: 1 }, local, log), { name: 'TypeError', message: 'exchangepace: RedisStore counts rates up to 2097152 per second exactly; pace "/token" declares perSecond 2097153' })
  t.doesNotThrow(() => store.pace('/token', { limit: 2 ** 21, window: 1 }, local, log))
})

t.test('a window the scripts cannot count exactly is refused when its route is added, naming the pace', async t => {
  const { store, local } = setup()
  const log = recordingLog().log
  const refused: Array<[limit: number, window: number, message: string]> = [
    [10, 0.0005, 'exchangepace: RedisStore counts windows in whole milliseconds; pace "/token" declares window 0.0005'],
    [10, 1e-10, 'exchangepace: RedisStore counts windows in whole milliseconds; pace "/token" declares window 1e-10'],
    [10, 2.0004, 'exchangepace: RedisStore counts windows in whole milliseconds; pace "/token" declares window 2.0004'],
    [10, 365 * 86_400 + 1, 'exchangepace: RedisStore counts windows up to 31536000 seconds (365 days); pace "/token" declares window 31536001'],
    [2 ** 16 + 1, 600, 'exchangepace: RedisStore counts limits up to 65536 per window exactly for windows other than one second; pace "/token" declares limit 65537 per window 600']
  ]
  for (const [limit, window, message] of refused) t.throws(() => store.pace('/token', { limit, window }, local, log), { name: 'TypeError', message })
  for (const [limit, window] of [[2 ** 16, 600], [10, 365 * 86_400], [3, 0.001], [5, 1.001]]) {
    t.doesNotThrow(() => store.pace('/token', { limit, window }, local, log), `${limit} per ${window} s`)
  }
})

t.test('a pace of another window calls both scripts with its window in ms; a one-second pace with none, as before other windows', async t => {
  const client = new ScriptedClient()
  const store = new RedisStore({ client, timeoutMs: 1000 })
  const log = recordingLog().log
  const paces = [
    store.pace('/token', { limit: 10, window: 600 }, new Pace({ limit: 10, window: 600, now: () => 0 }), log),
    // 1.001 x 1000 is 1000.9999999999999 in doubles: the scripts count 1001 ms.
    store.pace('/odd', { limit: 5, window: 1.001 }, new Pace({ limit: 5, window: 1.001, now: () => 0 }), log),
    store.pace('/second', { limit: 10, window: 1 }, new Pace({ perSecond: 10, now: () => 0 }), log)
  ]
  const reserving = paces.map(pace => pace.reserve('reporting'))
  t.same(client.reserves.map(c => [c.perSecond, c.windowMs]), [[10, 600_000], [5, 1001], [10, undefined]])
  for (const call of client.reserves) call.resolve([1, 7000, 1, 7000])
  for (const reservation of await Promise.all(reserving)) reservation.refund()
  await sleep(0)
  t.same(client.refundWindows, [600_000, 1001, undefined])
})

t.test('the store loads one script per operation and keys buckets as prefix + name + ":" + key', async t => {
  const { client, store, pace } = setup()
  t.same([...client.scripts.keys()], ['exchangepaceReserve', 'exchangepaceReserveAlone', 'exchangepaceRefund', 'exchangepaceInspect', 'exchangepaceReset', 'exchangepaceBlock', 'exchangepaceAnnounce', 'exchangepaceBlocks', 'exchangepaceProbe'])
  t.match(client.scripts.get('exchangepaceReserve'), /redis\.call\('TIME'\)/, 'the clock is the server\'s')
  t.equal(client.scripts.get('exchangepaceReserveAlone'), client.scripts.get('exchangepaceReserve'), 'the reserve sent on its own is the same script: one SHA, one entry in Redis\'s cache')
  t.equal(store.prefix, 'exchangepace:')
  t.match(new RedisStore({ client }), { prefix: 'exchangepace:', timeoutMs: 250, retryMs: 1000, whenUnavailable: 'fallback' }, 'the defaults, readable on the store')
  t.equal(store.scope, 'shared by all replicas (Redis)')
  const reserving = pace.reserve('reporting')
  t.same(client.reserves.map(c => [c.key, c.perSecond]), [['exchangepace:/token:reporting', 2]])
  client.reserves[0].resolve([1, 7000, 3, 7500])
  await reserving
})

t.test('a pace name keeps no ":" in Redis keys, so two paces never share one', async t => {
  const { client, store, local } = setup()
  const log = recordingLog().log
  const pending = [
    store.pace('/a', { limit: 2, window: 1 }, local, log).reserve('b:c'),
    store.pace('/a:b', { limit: 2, window: 1 }, local, log).reserve('c'),
    store.pace('/clients/:id/100%', { limit: 2, window: 1 }, local, log).reserve('x')
  ]
  t.same(client.reserves.map(c => c.key), ['exchangepace:/a:b:c', 'exchangepace:/a%3Ab:c', 'exchangepace:/clients/%3Aid/100%25:x'])
  for (const call of client.reserves) call.resolve(100)
  await Promise.all(pending)
})

t.test('a unit Redis grants is refunded in Redis, exactly once', async t => {
  const { client, pace } = setup()
  const reserving = pace.reserve('reporting')
  client.reserves[0].resolve([1, 7000, 3, 7500])
  const reservation = await reserving
  t.same([reservation.granted, reservation.remaining, reservation.retryAfterMs], [true, 1, 0])
  reservation.refund()
  reservation.refund()
  await sleep(0)
  t.same(client.refunds, ['exchangepace:/token:reporting'])
  t.same(client.refundedGrants, [[7000, 3, 7500]], 'with the grant the reserve script answered: its run, its number in it, its time')
})

t.test('a refund is sent once the code that asked for it is done, or before the store\'s next command', async t => {
  const { client, pace } = setup()
  const granting = ['first', 'second'].map(key => pace.reserve(key))
  for (const call of client.reserves) call.resolve([1, 7000, 1, 7000])
  for (const reservation of await Promise.all(granting)) reservation.refund()
  t.same(client.refunds, [], 'not while that code runs')
  pace.reserve('third')
  t.same(client.sent, ['reserve exchangepace:/token:first', 'reserve exchangepace:/token:second', 'refund exchangepace:/token:first', 'refund exchangepace:/token:second', 'reserve exchangepace:/token:third'],
    'before the next reserve, in the order they were asked for')
  const reserving = pace.reserve('fourth')
  client.reserves[3].resolve([1, 7000, 1, 7000])
  ;(await reserving).refund()
  await sleep(0)
  t.same(client.refunds.at(-1), 'exchangepace:/token:fourth', 'with no next command, once that code is done')
})

t.test('the plugin writes the response before the refund it decided as the answer went', async t => {
  const client = new ScriptedClient()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client }) })
  let written: boolean[] = []
  app.post('/token', { config: { pace: { limit: 5, window: 3600, key: () => 'reporting', spend: 'rejected' } } }, async (request, reply) => {
    onRefund = () => { written.push(reply.raw.writableEnded) }
    return { access_token: 'x' }
  })
  t.teardown(() => { onRefund = null })
  await app.ready()
  const answering = app.inject({ method: 'POST', url: '/token' })
  await sleep(0)
  client.reserves[0].resolve([4, 7000, 1, 7000])
  t.equal((await answering).statusCode, 200)
  await sleep(0)
  t.same(written, [true], 'the failure budget\'s unit went back to Redis once the response was written')
  written = []
})

t.test('a reply the store does not read (another version\'s script under the command\'s name) is an outage, not a stuck request', async t => {
  const { client, store, local, pace, lines } = setup()
  const reserving = pace.reserve('reporting')
  client.reserves[0].answer(Buffer.alloc(16))
  const reservation = await reserving
  t.ok(reservation.granted, 'the request takes the fallback path')
  t.equal(local.size, 1)
  t.ok(store.unavailable)
  t.same(lines, [['warn', 'exchangepace: Redis store unavailable (the reserve script answered 16 bytes, not a reply this version reads: does another version of exchangepace define its commands on this client?); pacing per replica in memory until it answers again']])
  store._answered(pace as never, 'exchangepace:/token:reporting', store._outage)
  t.match(lines[1], ['info', /^exchangepace: Redis store answers again; paces are shared by all replicas again \(after \d+\.\d s, in which this replica decided 1 request for them without Redis\)$/], 'said by the logger that warned, with how long and how many requests it decided alone')
  const text = pace.reserve('reporting')
  client.reserves[1].answer('granted')
  await text
  t.match(lines[2][1], /the reserve script answered string, not a reply/, 'a reply that is not a Buffer too')
})

t.test('a refusal carries Redis\' exact wait and refunds nothing', async t => {
  const { client, pace } = setup()
  const reserving = pace.reserve('reporting')
  client.reserves[0].resolve(312.5)
  const reservation = await reserving
  t.same([reservation.granted, reservation.remaining, reservation.retryAfterMs], [false, 0, 312.5])
  reservation.refund()
  await sleep(0)
  t.same(client.refunds, [])
})

t.test('a failing Redis falls back to the replica\'s pace, warns once per outage, and is tried again after retryMs', async t => {
  const { client, store, local, pace, lines } = setup()
  const first = pace.reserve('reporting')
  client.reserves[0].reject(new Error('ECONNREFUSED'))
  const fallback = await first
  t.ok(fallback.granted)
  t.equal(local.size, 1, 'the unit came from this replica\'s memory')
  t.ok(store.unavailable)
  t.same(lines, [['warn', 'exchangepace: Redis store unavailable (ECONNREFUSED); pacing per replica in memory until it answers again']])

  const during = await pace.reserve('reporting')
  t.equal(client.reserves.length, 1, 'within retryMs nobody waits for Redis')
  t.ok(during.granted)
  t.equal(local.size, 1)
  during.refund()
  fallback.refund()
  await sleep(0)
  t.equal(local.size, 0, 'a fallback unit is refunded in memory')
  t.same(client.refunds, [], 'and never touches Redis')

  await sleep(250)
  const probe = pace.reserve('reporting')
  t.equal(client.reserves.length, 2, 'after retryMs one request tries Redis again')
  client.reserves[1].reject(new Error('ECONNREFUSED'))
  await probe
  t.equal(lines.length, 1, 'still the same outage: no second warning')

  await sleep(250)
  const back = pace.reserve('reporting')
  client.reserves[2].resolve([1, 7000, 3, 7500])
  t.ok((await back).granted)
  t.notOk(store.unavailable)
  t.match(lines[1], ['info', /^exchangepace: Redis store answers again; paces are shared by all replicas again \(after 0\.\d s, in which this replica decided 3 requests for them without Redis\)$/], 'the first failure, the request held back, and the failed retry')
  t.same(pace.unanswered, { granted: 3, refused: 0 }, 'and the pace counted them')
})

t.test('an answer to a reservation sent before the outage began does not end it: only a retry does', async t => {
  const { client, store, pace, lines } = setup()
  const before = pace.reserve('a')
  const inFlight = pace.reserve('b')
  client.reserves[0].reject(new Error('ETIMEDOUT'))
  await before
  t.ok(store.unavailable)
  client.reserves[1].resolve([1, 7000, 1, 7000])
  t.ok('run' in await inFlight, 'its grant is Redis\'s, and it counts')
  t.ok(store.unavailable, 'the outage goes on')
  t.equal(lines.length, 1, 'one warning, no info')
  await pace.reserve('c')
  t.equal(client.reserves.length, 2, 'within retryMs nobody waits for Redis')
  await sleep(250)
  const probe = pace.reserve('c')
  client.reserves[2].resolve([1, 7100, 1, 7100])
  await probe
  t.notOk(store.unavailable, 'the retry\'s answer ends it')
  t.same(lines.map(([level]) => level), ['warn', 'info'])
})

t.test('a client that throws as it is called is a failing Redis too: the request falls back, nothing waits', async t => {
  const { client, store, local, pace, lines } = setup()
  client.reserveThrows = true
  const reservation = await pace.reserve('reporting')
  t.ok(reservation.granted)
  t.equal(local.size, 1, 'the unit came from this replica\'s memory')
  t.ok(store.unavailable)
  t.same(lines, [['warn', 'exchangepace: Redis store unavailable (Connection is closed.); pacing per replica in memory until it answers again']])
  await sleep(250)
  t.ok(local.reserve('reporting').granted, 'no timeout came later to take the second of the key\'s two units')
  t.equal(lines.length, 1)
})

t.test('a logger that throws does not leave the request waiting', async t => {
  const throwing = { warn () { throw new Error('logger down') }, info () { throw new Error('logger down') }, debug () {} } as unknown as FastifyBaseLogger
  const logged = () => {
    const client = new ScriptedClient()
    const store = new RedisStore({ client, timeoutMs: 20, retryMs: 1 })
    return { client, pace: store.pace('/token', { limit: 2, window: 1 }, new Pace({ perSecond: 2, now: () => 0 }), throwing) }
  }

  const failing = logged()
  let thrown = intercept('unhandledRejection')
  const afterError = failing.pace.reserve('a')
  failing.client.reserves[0].reject(new Error('ECONNREFUSED'))
  t.ok((await afterError).granted, 'an error from Redis: the request falls back')
  t.match(await thrown, { message: 'logger down' }, 'and the logger\'s error goes on')

  await sleep(5)
  thrown = intercept('unhandledRejection')
  const back = failing.pace.reserve('a')
  failing.client.reserves[1].resolve([1, 7000, 3, 7500])
  t.ok((await back).granted, 'Redis answers again: the request has its unit before the line that says so')
  t.match(await thrown, { message: 'logger down' })

  const silent = logged()
  thrown = intercept('uncaughtException')
  t.ok((await silent.pace.reserve('b')).granted, 'no answer in time: the request falls back')
  t.match(await thrown, { message: 'logger down' })
})

t.test('after an outage, answers for another pace sweep a fallback no request reserves from any more', async t => {
  const { client, store, local, pace, log, clock, tick } = setup({ retryMs: 1 })
  const other = store.pace('/authorize', { limit: 2, window: 1 }, new Pace({ perSecond: 2, now: clock }), log)
  const first = pace.reserve('reporting')
  client.reserves[0].reject(new Error('ECONNREFUSED'))
  t.ok((await first).granted)
  t.equal(local.size, 1, 'a row in /token\'s memory from the outage')
  await sleep(5)
  tick(1000) // one horizon: the row's bucket is full again
  const back = other.reserve('192.0.2.7')
  client.reserves[1].resolve([1, 7000, 1, 7000])
  await back
  t.equal(local.size, 0, 'swept by an answer for /authorize')
})

t.test('each answer tidies one pace in turn; a pace whose memory holds no rows is tidied no more', async t => {
  const { client, store, log, clock, tick } = setup()
  const memories = [0, 1, 2].map(() => new Pace({ perSecond: 2, now: clock }))
  const tidied = [0, 0, 0]
  memories.forEach((memory, i) => {
    const tidy = memory.tidy.bind(memory)
    memory.tidy = () => { tidied[i]++; tidy() }
  })
  const answered = async (pace: ReturnType<RedisStore['pace']>, key: string) => {
    const reserving = pace.reserve(key)
    client.reserves[client.reserves.length - 1].resolve([1, 7000, 1, 7000])
    t.ok((await reserving).granted)
  }
  for (const [i, memory] of memories.entries()) await answered(store.pace(`/closed-${i}`, { limit: 2, window: 1 }, memory, log), 'reporting')
  t.same(memories.map(memory => memory.size), [1, 1, 1], 'each pace holds a row: all three are tracked')
  tick(1000) // their rows have refilled; no request comes for them again (their apps closed)
  tidied.fill(0)
  const open = store.pace('/open', { limit: 2, window: 1 }, new Pace({ perSecond: 2, now: clock }), log)
  for (let i = 0; i < 20; i++) await answered(open, `client-${i}`)
  t.same(memories.map(memory => memory.size), [0, 0, 0], 'swept by answers for another pace')
  t.same(tidied, [1, 1, 1], 'each tidied once, in turn, and then no more')
})

t.test('with the fallback, a request is granted when this replica\'s memory grants it and then Redis does', async t => {
  const { client, local, pace } = setup()
  const first = pace.reserve('reporting')
  t.equal(local.size, 1, 'the memory took its unit before Redis was asked')
  client.reserves[0].resolve([0, 7000, 1, 7000])
  const granted = await first
  t.same([granted.granted, granted.remaining], [true, 0], 'the units left are the fewer of the two buckets\' (Redis: 0, memory: 1)')

  const second = pace.reserve('reporting')
  client.reserves[1].resolve(250)
  const refusedByRedis = await second
  t.same([refusedByRedis.granted, refusedByRedis.retryAfterMs], [false, 250], 'Redis refused: its wait')
  const third = pace.reserve('reporting')
  client.reserves[2].resolve([3, 7000, 2, 7100])
  const afterRefusal = await third
  t.same([afterRefusal.granted, afterRefusal.remaining], [true, 0], 'Redis\' refusal gave the memory\'s unit back: the memory grants its second unit')

  const fourth = await pace.reserve('reporting')
  t.same([fourth.granted, fourth.retryAfterMs], [false, 500], 'the memory refuses: this replica alone spent its second')
  t.equal(client.reserves.length, 3, 'and Redis is not asked')

  afterRefusal.refund()
  await sleep(0)
  t.same(client.refundedGrants, [[7000, 2, 7100]], 'a refund gives back in Redis')
  t.ok(local.reserve('reporting').granted, 'and in memory')
})

t.test('a Redis that flaps: the fallback starts from what this replica spent, and Redis back grants nothing on top of the fallback\'s grants', async t => {
  const { client, store, local, pace, tick } = setup({ retryMs: 1 })
  for (let i = 0; i < 2; i++) {
    const spending = pace.reserve('reporting')
    client.reserves[i].resolve([1 - i, 7000, i + 1, 7000])
    t.ok((await spending).granted)
  }
  await sleep(5)
  const outage = pace.reserve('reporting')
  t.equal(client.reserves.length, 2, 'the memory refused the second\'s third unit: Redis is not asked')
  t.same([(await outage).granted, (await outage).retryAfterMs], [false, 500])

  tick(500)
  const failing = pace.reserve('reporting')
  client.reserves[2].reject(new Error('ECONNREFUSED'))
  t.ok((await failing).granted, 'Redis fails: the memory grants the one unit refilled since')
  t.ok(store.unavailable)
  t.notOk((await pace.reserve('reporting')).granted, 'and no more: the fallback did not start full')

  await sleep(5)
  tick(250)
  t.notOk((await pace.reserve('reporting')).granted, 'Redis is back with a full bucket, but this replica granted its last second\'s units already')
  t.equal(client.reserves.length, 3, 'without asking Redis')
  t.equal(local.size, 1)
})

t.test('with whenUnavailable "open" or "closed" nothing is paced in memory', async t => {
  for (const whenUnavailable of ['open', 'closed'] as const) {
    const { client, local, pace } = setup({ whenUnavailable })
    const reserving = pace.reserve('reporting')
    client.reserves[0].resolve([1, 7000, 1, 7000])
    ;(await reserving).refund()
    await sleep(0)
    t.equal(local.size, 0, whenUnavailable)
    t.same(client.refundedGrants, [[7000, 1, 7000]])
  }
})

t.test('a Redis slower than timeoutMs does not hold the request; its late grant is given back', async t => {
  const { client, store, local, pace } = setup()
  const reservation = await pace.reserve('reporting')
  t.ok(reservation.granted)
  t.equal(local.size, 1, 'the request went the fallback path')
  t.ok(store.unavailable)
  client.reserves[0].resolve([1, 7000, 3, 7500])
  await sleep(0)
  t.same(client.refunds, ['exchangepace:/token:reporting'], 'the unit Redis granted too late is refunded')
  t.same(client.refundedGrants, [[7000, 3, 7500]])
})

t.test('a late refusal or a late error after the timeout changes nothing', async t => {
  const { client, pace } = setup({ retryMs: 1 })
  await pace.reserve('a')
  client.reserves[0].resolve(10)
  await sleep(5)
  await pace.reserve('b')
  client.reserves[1].reject(new Error('late'))
  await sleep(0)
  t.same(client.refunds, [])
})

t.test('a refund that cannot reach Redis (its promise rejects, or the call throws) is logged at debug level and leaves the unit spent', async t => {
  for (const fails of ['rejects', 'throws'] as const) {
    const { client, pace, lines } = setup()
    client.refundFails = fails
    const reserving = pace.reserve('reporting')
    client.reserves[0].resolve([0, 7000, 3, 7500])
    ;(await reserving).refund()
    await sleep(0)
    t.same(lines, [['debug', 'exchangepace: a refund did not reach Redis; the unit stays spent until it refills']], fails)
  }
})

t.test('whenUnavailable "open" grants without pacing; "closed" refuses for retryMs', async t => {
  const open = setup({ whenUnavailable: 'open' })
  const opening = open.pace.reserve('reporting')
  open.client.reserves[0].reject(new Error('down'))
  const granted = await opening
  t.same([granted.granted, granted.retryAfterMs], [true, 0])
  granted.refund()
  t.equal(open.local.size, 0)
  t.match(open.lines[0][1], /failing open until it answers again/)

  const closed = setup({ whenUnavailable: 'closed', retryMs: 750 })
  const closing = closed.pace.reserve('reporting')
  closed.client.reserves[0].reject(new Error('down'))
  const refused = await closing
  t.same([refused.granted, refused.retryAfterMs], [false, 750])
  refused.refund()
  t.equal(closed.local.size, 0)

  const duringClosed = await closed.pace.reserve('reporting')
  t.same([duringClosed.granted, duringClosed.retryAfterMs], [false, 750], 'within retryMs, refused without asking Redis')
  const duringOpen = await open.pace.reserve('reporting')
  t.ok(duringOpen.granted, 'or granted, when open')
  t.same([open.client.reserves.length, closed.client.reserves.length], [1, 1])
})

t.test('the plugin waits for a shared store and continues with the next pace', async t => {
  const client = new ScriptedClient()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client }) })
  app.get('/authorize', { config: { pace: [{ perSecond: 5, key: () => 'x', spend: 'every', name: 'first' }, { perSecond: 5, key: () => 'y', spend: 'every', name: 'second' }] } }, async () => 'ok')
  await app.ready()
  const asked: string[] = []
  const answering = setInterval(() => {
    for (const call of client.reserves.splice(0)) {
      asked.push(call.key)
      call.resolve([4, 7000, 3, 7500])
    }
  }, 1)
  t.teardown(() => clearInterval(answering))
  const response = await app.inject('/authorize')
  t.equal(response.statusCode, 200)
  t.equal(response.body, 'ok')
  t.same(asked, ['exchangepace:first:x', 'exchangepace:second:y'], 'each pace asks Redis in turn')
})

t.test('a route on a shared store says the rate is shared by all replicas, with its fallback', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client: new ScriptedClient() }) })
  let schema: Record<string, unknown> = {}
  app.addHook('onRoute', route => { schema = route.schema as Record<string, unknown> })
  app.post('/token', { config: { pace: { perSecond: 10, key: 'client', spend: 'accepted' } } }, async () => 'ok')
  await app.ready()
  t.match(schema.description, /Each rate is shared by all replicas \(Redis\); while the store is unavailable, it holds per replica \(each replica paces in its own memory\)\./)
  t.match(schema['x-exchangepace'], { scope: 'shared by all replicas (Redis)' })
})

t.test('a route whose pace the store refuses fails where it is added, naming the route', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client: new ScriptedClient() }) })
  t.throws(() => app.post('/token', { config: { pace: { perSecond: 2 ** 21 + 1, key: 'client', spend: 'accepted' } } }, async () => 'ok'), {
    name: 'TypeError',
    message: 'exchangepace: route POST /token: RedisStore counts rates up to 2097152 per second exactly; pace "/token" declares perSecond 2097153'
  })
  // A store may throw anything, not only an Error.
  const notAnError: unknown = 'not an Error'
  const thrower: PaceStore = { scope: 'odd', outage: 'odd', pace: () => { throw notAnError } }
  const other = Fastify()
  t.teardown(() => other.close())
  await other.register(exchangePace, { store: thrower })
  t.throws(() => other.get('/authorize', { config: { pace: { perSecond: 5, key: 'source', spend: 'every' } } }, async () => 'ok'), {
    name: 'TypeError',
    message: 'exchangepace: route GET /authorize: not an Error'
  })
})

t.test('the description says what each whenUnavailable mode makes of the rate during an outage', async t => {
  const client = new ScriptedClient()
  t.equal(new RedisStore({ client, whenUnavailable: 'open' }).outage, 'requests are not paced')
  t.equal(new RedisStore({ client, whenUnavailable: 'closed' }).outage, 'paced requests are refused with 429')
})

t.test('a store whose reserve rejects fails the request, not the process', async t => {
  const broken: PaceStore = {
    scope: 'broken',
    outage: 'it is broken',
    pace: () => ({ reserve: () => Promise.reject(new Error('store bug')) })
  }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: broken })
  app.get('/authorize', { config: { pace: { perSecond: 5, key: () => 'x', spend: 'every' } } }, async () => 'ok')
  const response = await app.inject('/authorize')
  t.equal(response.statusCode, 500)
})

t.test('the plugin rejects a store that is not a PaceStore', async t => {
  for (const store of [null, {}, { pace () {} }]) {
    const app = Fastify()
    app.register(exchangePace, { store: store as never })
    await t.rejects(app.ready(), { name: 'TypeError', message: 'exchangepace: store must be a PaceStore such as RedisStore' })
    await app.close()
  }
})
