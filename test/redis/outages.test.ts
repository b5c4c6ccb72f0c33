import t from 'tap'
import fc from 'fast-check'
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyBaseLogger } from 'fastify'
import Fastify from 'fastify'
import { exchangePace, Pace, RedisStore, type PaceReservation, type RedisUnavailable } from '../../lib/index.js'
import type { RedisPace } from '../../lib/redis/pace.js'
import { keySlot } from '../../lib/redis/key-slot.js'

// A RedisStore on a Cluster keeps one outage per master: a master that fails sends only the keys of
// its slots to the `whenUnavailable` path, the other masters' keys stay shared, and the outage ends
// when the master answers a retry or when the cluster moves its slots to another master (a replica
// promoted in its place). The client here is scripted: it has a Cluster's slot map (`isCluster`,
// `slots`) and answers each call as the test says. test/redis/switches/failover.test.ts does it on a real
// cluster.

// ioredis routes by cluster-key-slot's number (a dependency of ioredis, without types of its own),
// which is Redis's but for a key whose first tag is empty and followed by another }: Redis hashes
// all of `foo{}{bar}`, cluster-key-slot hashes `{bar`, and Redis's MOVED sends ioredis to the
// master that holds the key.
const clusterKeySlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number

t.test('keySlot is Redis\'s slot: CRC16 of the key, or of its hash tag, modulo 16384', async t => {
  // Rows: a key and the slot Redis gives it (CLUSTER KEYSLOT), with why the row is there.
  const table: Array<[string, number, string]> = [
    ['123456789', 0x31c3, 'the CRC16/XMODEM check value'],
    ['foo', 12182, 'a plain key'],
    ['somekey', 11058, 'the example of Redis\'s CLUSTER KEYSLOT page'],
    ['foo{hash_tag}', 2515, 'a hash tag: only hash_tag is hashed'],
    ['bar{hash_tag}', 2515, 'so keys with one tag share a slot'],
    ['{}foo', 9500, 'an empty tag: the whole key'],
    ['', 0, 'the empty key']
  ]
  for (const [key, slot, why] of table) t.equal(keySlot(key), slot, `${JSON.stringify(key)}: ${why}`)
  t.equal(keySlot('foo{}{bar}'), 8363, 'the first { and the first } after it make an empty tag: the whole key is hashed, as Redis does')
  t.equal(keySlot('foo{{bar}}zap'), keySlot('{bar'), 'the tag of foo{{bar}}zap is "{bar"')
  t.equal(keySlot('exchangepace:/token:é😀'), clusterKeySlot('exchangepace:/token:é😀'), 'UTF-8 bytes, as ioredis sends them')
  const keys = fc.array(fc.constantFrom('{', '}', 'a', 'b', ':', 'é', '😀', '/'), { maxLength: 24 }).map(parts => parts.join(''))
  const routed = keys.filter(key => !key.includes('{}'))
  t.doesNotThrow(() => { fc.assert(fc.property(routed, key => keySlot(key) === clusterKeySlot(key)), { numRuns: 2000 }) }, 'the slot ioredis routes by, on keys full of braces and multibyte characters')
})

interface Call {
  key: string
  windowMs: number | undefined
  /** Sent as a command of its own, never auto-pipelined (a resend after a redirection). */
  alone: boolean
  resolve: (reply: Buffer) => void
  reject: (err: Error) => void
}

const A = '127.0.0.1:7001'
const B = '127.0.0.1:7002'
const PROMOTED = '127.0.0.1:7004'

/** A grant as the reserve script answers it: the units left, the run, the grant's number and its time. */
function grant (): Buffer {
  return Buffer.alloc(40)
}

/** A Cluster's slot map and scripted calls: slots 0-8191 served by A, 8192-16383 by B. */
class ScriptedCluster {
  readonly isCluster = true
  readonly slots: Array<string[] | undefined> = Array.from({ length: 16384 }, (_, slot) => [slot < 8192 ? A : B, '127.0.0.1:7005'])
  readonly reserves: Call[] = []
  /** How a reservation sent on its own (a resend) fails: its promise rejects with this, or the call throws it. */
  aloneFails: { error: Error, how: 'rejects' | 'throws' } | null = null

  defineCommand (): void {}

  exchangepaceReserveBuffer (key: string, _rate: number, windowMs?: number): Promise<Buffer> {
    return new Promise((resolve, reject) => { this.reserves.push({ key, windowMs, alone: false, resolve, reject }) })
  }

  exchangepaceReserveAloneBuffer (key: string, _rate: number, windowMs?: number): Promise<Buffer> {
    const fails = this.aloneFails
    if (fails?.how === 'throws') throw fails.error
    if (fails?.how === 'rejects') return Promise.reject(fails.error)
    return new Promise((resolve, reject) => { this.reserves.push({ key, windowMs, alone: true, resolve, reject }) })
  }

  exchangepaceRefund (): Promise<number> {
    return Promise.resolve(1)
  }

  /** Every slot of `from` now served by `to` (a failover, or the map ioredis reads after one). */
  move (from: string, to: string | undefined): void {
    for (let slot = 0; slot < 16384; slot++) {
      if (this.slots[slot]?.[0] === from) this.slots[slot] = to === undefined ? undefined : [to]
    }
  }
}

/** The first ids whose keys (`exchangepace:/token:` + id) fall on A and on B. */
function idsOn (): { onA: string, onB: string } {
  const ids = Array.from({ length: 50 }, (_, i) => `client-${i}`)
  const onA = ids.find(id => keySlot(`exchangepace:/token:${id}`) < 8192)!
  const onB = ids.find(id => keySlot(`exchangepace:/token:${id}`) >= 8192)!
  return { onA, onB }
}

function recordingLog (): { log: FastifyBaseLogger, lines: Array<[string, string, string | undefined]> } {
  const lines: Array<[string, string, string | undefined]> = []
  const record = (level: string) => (objOrMsg: unknown, msg?: string) => {
    if (typeof objOrMsg === 'string') lines.push([level, objOrMsg, undefined])
    else lines.push([level, String(msg), (objOrMsg as { master?: string }).master])
  }
  return { log: { error: record('error'), warn: record('warn'), info: record('info'), debug: record('debug') } as unknown as FastifyBaseLogger, lines }
}

function setup (whenUnavailable: RedisUnavailable = 'fallback') {
  const client = new ScriptedCluster()
  const store = new RedisStore({ client, timeoutMs: 1000, retryMs: 100, whenUnavailable })
  const { log, lines } = recordingLog()
  const pace = store.pace('/token', { limit: 100, window: 1 }, new Pace({ perSecond: 100 }), log)
  return { client, store, pace, lines, ...idsOn() }
}

/** Reserves `id`, answering the call Redis gets (if any) with `answer`; says whether Redis was asked. */
async function reserve (client: ScriptedCluster, pace: ReturnType<typeof setup>['pace'], id: string, answer: 'grant' | Error): Promise<{ asked: boolean, reservation: PaceReservation }> {
  const before = client.reserves.length
  const reserving = pace.reserve(id)
  const asked = client.reserves.length > before
  if (asked) {
    const call = client.reserves[before]
    if (answer === 'grant') call.resolve(grant())
    else call.reject(answer)
  }
  return { asked, reservation: await reserving }
}

t.test('a master that fails sends only its own keys to the fallback; the other masters\' keys stay shared', async t => {
  const { client, store, pace, lines, onA, onB } = setup()
  t.ok((await reserve(client, pace, onA, new Error('Connection is closed.'))).asked)
  t.ok(store.unavailable, 'a master is unavailable')
  t.same(lines, [['warn', `exchangepace: Redis master ${A} unavailable (Connection is closed.); pacing its keys per replica in memory until it answers again`, A]], 'one warning, naming the master')
  t.notOk((await reserve(client, pace, onA, 'grant')).asked, 'A\'s keys: the fallback, without waiting')
  for (let i = 0; i < 3; i++) t.ok((await reserve(client, pace, onB, 'grant')).asked, 'B\'s keys: Redis, every time')
  t.equal(lines.length, 1, 'B\'s answers end nothing of A\'s outage')
  t.ok(store.unavailable)
})

t.test('each master has its own outage, warning, retries and end', async t => {
  const { client, store, pace, lines, onA, onB } = setup()
  await reserve(client, pace, onA, new Error('ETIMEDOUT'))
  await reserve(client, pace, onB, new Error('ECONNRESET'))
  t.same(lines.map(([level, , master]) => [level, master]), [['warn', A], ['warn', B]], 'one warning per master')
  await sleep(150) // both retries are due
  t.ok((await reserve(client, pace, onA, new Error('ETIMEDOUT'))).asked, 'A is retried')
  t.equal(lines.length, 2, 'a failed retry is the same outage')
  t.ok((await reserve(client, pace, onB, 'grant')).asked, 'B is retried too, right after A: each master has its own retryMs')
  t.match(lines[2], ['info', new RegExp(`^exchangepace: Redis master ${B} answers again; its keys are shared by all replicas again \\(after 0\\.\\d s, in which this replica decided 1 request for them without Redis\\)$`), B])
  t.notOk((await reserve(client, pace, onA, 'grant')).asked, 'A waits out its retryMs from its failed retry')
  t.ok((await reserve(client, pace, onB, 'grant')).asked, 'B\'s keys are shared again')
  t.ok(store.unavailable, 'A is still out')
  await sleep(150)
  t.ok((await reserve(client, pace, onA, 'grant')).asked)
  t.notOk(store.unavailable)
  t.same(lines.map(([level, , master]) => [level, master]), [['warn', A], ['warn', B], ['info', B], ['info', A]])
})

t.test('an outage whose slots moved (a failover) ends when Redis answers for one of its keys, naming who answered; a new map alone proves nothing', async t => {
  const { client, store, pace, lines, onA, onB } = setup()
  await reserve(client, pace, onA, new Error('Connection is closed.'))
  client.move(A, PROMOTED)
  t.ok(store.unavailable, 'the map names another master: not yet shared')
  t.equal(lines.length, 1, 'and nothing says it is')
  t.ok((await reserve(client, pace, onB, 'grant')).asked)
  t.ok(store.unavailable, 'B\'s answer is for no key A served')
  const { asked } = await reserve(client, pace, onA, new Error('Connection is closed.'))
  t.ok(asked, 'A\'s keys go to the promoted master at once, without waiting for retryMs')
  t.same(lines.map(([, , master]) => master), [A, PROMOTED], 'the promoted master failing is an outage of its own')
  t.ok((await reserve(client, pace, onA, 'grant')).asked === false, 'and holds A\'s keys back as its own')
  client.move(PROMOTED, undefined)
  t.ok((await reserve(client, pace, onA, 'grant')).asked, 'a map that names no master for them sends them to ioredis, which asks a node')
  t.match(lines.slice(2), [
    ['info', new RegExp(`^exchangepace: Redis master ${A} no longer serves its keys \\(another master answered for them\\); they are shared by all replicas again \\(after \\d\\.\\d s, in which this replica decided 1 request for them without Redis\\)$`), A],
    ['info', new RegExp(`^exchangepace: Redis master ${PROMOTED} no longer serves its keys`), PROMOTED]
  ], 'both end on that answer: it is for a key each served when its outage began')
  t.notOk(store.unavailable)
})

t.test('a cluster whose slot map is not known yet (not connected) has one outage for every key, as one server', async t => {
  const { client, store, pace, lines, onA, onB } = setup()
  client.slots.fill(undefined)
  await reserve(client, pace, onA, new Error('Connection is closed.'))
  t.notOk((await reserve(client, pace, onB, 'grant')).asked, 'every key is in the one outage')
  t.same(lines, [['warn', 'exchangepace: Redis store unavailable (Connection is closed.); pacing per replica in memory until it answers again', undefined]])
  client.slots.fill([B])
  t.ok((await reserve(client, pace, onB, 'grant')).asked, 'once the map names masters, they are tried')
  t.match(lines[1][1], new RegExp(`Redis store no longer serves its keys \\(${B} answered for them\\)`))
  t.notOk(store.unavailable)
})

t.test('\'open\' and \'closed\' say which master\'s keys fail open or closed', async t => {
  for (const mode of ['open', 'closed'] as const) {
    const { client, pace, lines, onA, onB } = setup(mode)
    await reserve(client, pace, onA, new Error('Connection is closed.'))
    t.equal(lines[0][1], `exchangepace: Redis master ${A} unavailable (Connection is closed.); failing ${mode} for its keys until it answers again`)
    const { asked, reservation } = await reserve(client, pace, onA, 'grant')
    t.same([asked, reservation.granted], [false, mode === 'open'], `${mode}: A's keys take the ${mode} path`)
    t.ok((await reserve(client, pace, onB, 'grant')).reservation.granted, `${mode}: B's keys are paced by Redis`)
  }
})

t.test('a redirection handed back (MOVED or ASK from a batch a failover split) is resent on its own, and its answer is the request\'s', async t => {
  const { client, store, pace, lines, onA } = setup()
  for (const redirection of [`MOVED 885 ${PROMOTED}`, `ASK 885 ${PROMOTED}`, 'All keys in the pipeline should belong to the same slots allocation group']) {
    const before = client.reserves.length
    const reserving = pace.reserve(onA)
    client.reserves[before].reject(new Error(redirection))
    await new Promise(resolve => setImmediate(resolve))
    t.same(client.reserves.slice(before).map(call => call.alone), [false, true], `${redirection.slice(0, 9)}: sent again as a command of its own`)
    client.reserves[before + 1].resolve(grant())
    t.ok('run' in await reserving, 'Redis granted it')
  }
  t.notOk(store.unavailable)
  t.same(lines, [], 'no outage, no warning')
  t.same((pace as RedisPace).unanswered, { granted: 0, refused: 0 })
})

t.test('a pace of another window resends with its window', async t => {
  const { client, store, onA } = setup()
  const pace = store.pace('/day', { limit: 100, window: 86_400 }, new Pace({ limit: 100, window: 86_400 }), recordingLog().log)
  const reserving = pace.reserve(onA)
  client.reserves[0].reject(new Error(`MOVED 885 ${PROMOTED}`))
  await new Promise(resolve => setImmediate(resolve))
  t.same(client.reserves.map(call => [call.alone, call.windowMs]), [[false, 86_400_000], [true, 86_400_000]])
  client.reserves[1].resolve(grant())
  t.ok('run' in await reserving)
})

t.test('a redirection the resend could not follow is decided in memory, counted, and warned of once a minute with the count', async t => {
  const { client, store, pace, lines, onA } = setup()
  client.aloneFails = { error: new Error(`MOVED 885 ${PROMOTED}`), how: 'rejects' }
  const first = await reserve(client, pace, onA, new Error(`MOVED 885 ${PROMOTED}`))
  t.same([first.asked, first.reservation.granted, 'run' in first.reservation], [true, true, false], 'granted by the replica\'s memory')
  t.notOk(store.unavailable, 'no outage: Redis answered')
  t.same(lines, [['warn', `exchangepace: 1 request paced in this replica's memory though Redis answered: the client handed back a redirection (MOVED 885 ${PROMOTED}) instead of following it, so their keys were not shared (counted since the previous such warning; one a minute at most)`, undefined]])
  await reserve(client, pace, onA, new Error(`ASK 885 ${PROMOTED}`))
  await reserve(client, pace, onA, new Error(`MOVED 885 ${PROMOTED}`))
  t.equal(lines.length, 1, 'within the minute, counted without a line')
  t.same((pace as RedisPace).unanswered, { granted: 3, refused: 0 }, 'each counted in the pace')
  const now = performance.now.bind(performance)
  performance.now = () => now() + 60_000
  t.teardown(() => { performance.now = now })
  await reserve(client, pace, onA, new Error(`MOVED 885 ${PROMOTED}`))
  t.match(lines[1], ['warn', /^exchangepace: 3 requests paced in this replica's memory though Redis answered/], 'a minute later: the two since, and this one')
})

t.test('a master that denies the store\'s user a command is logged as a missing permission of that master, not as down', async t => {
  const { client, pace, lines, onA } = setup()
  const denied = new Error('NOPERM this user has no permissions to run the \'evalsha\' command')
  t.ok((await reserve(client, pace, onA, denied)).asked)
  t.same(lines, [['error', `exchangepace: Redis master ${A} denies the RedisStore's user a command (${denied.message}): a permission is missing, not the server; pacing its keys per replica in memory until it is granted (docs/stores.md gives the ACL SETUSER line)`, A]])
})

t.test('with whenUnavailable \'open\', a redirection the resend could not follow says the request failed open', async t => {
  const { client, pace, lines, onA } = setup('open')
  client.aloneFails = { error: new Error(`MOVED 885 ${PROMOTED}`), how: 'rejects' }
  const { reservation } = await reserve(client, pace, onA, new Error(`MOVED 885 ${PROMOTED}`))
  t.equal(reservation.granted, true, 'admitted, as open says')
  t.match(lines, [['warn', /^exchangepace: 1 request failed open though Redis answered: the client handed back a redirection/]])
})

t.test('a resend that fails otherwise is an outage, as any failure', async t => {
  for (const how of ['rejects', 'throws'] as const) {
    const { client, store, pace, lines, onA } = setup('closed')
    client.aloneFails = { error: new Error('Connection is closed.'), how }
    const { reservation } = await reserve(client, pace, onA, new Error(`MOVED 885 ${PROMOTED}`))
    t.notOk(reservation.granted, `${how}: refused, as 'closed' says`)
    t.ok(store.unavailable)
    t.match(lines, [['warn', /Redis master 127\.0\.0\.1:7001 unavailable \(Connection is closed\.\)/]])
    t.same((pace as RedisPace).unanswered, { granted: 0, refused: 1 })
  }
})

t.test('a redirection after the timeout is not resent: its request already went the unavailable path', async t => {
  const client = new ScriptedCluster()
  const store = new RedisStore({ client, timeoutMs: 5, retryMs: 100 })
  const pace = store.pace('/token', { limit: 100, window: 1 }, new Pace({ perSecond: 100 }), recordingLog().log)
  const { onA } = idsOn()
  const reservation = await pace.reserve(onA)
  t.notOk('run' in reservation, 'timed out: the fallback')
  client.reserves[0].reject(new Error(`MOVED 885 ${PROMOTED}`))
  await new Promise(resolve => setImmediate(resolve))
  t.equal(client.reserves.length, 1, 'nothing resent')
})

t.test('a Cluster client never auto-pipelines the reserve sent on its own, the refund or the reads of the blocks; its other commands are left as they were', async t => {
  const shared = ['hgetall']
  const withOptions = Object.assign(new ScriptedCluster(), { options: { autoPipeliningIgnoredCommands: shared } })
  new RedisStore({ client: withOptions }) // eslint-disable-line no-new
  t.same(withOptions.options.autoPipeliningIgnoredCommands, ['hgetall', 'exchangepaceReserveAlone', 'exchangepaceRefund', 'exchangepaceBlocks', 'exchangepaceProbe'])
  t.same(shared, ['hgetall'], 'a new array: ioredis shares its default one between clients')
  const without = Object.assign(new ScriptedCluster(), { options: {} as { autoPipeliningIgnoredCommands?: string[] } })
  new RedisStore({ client: without }) // eslint-disable-line no-new
  t.same(without.options.autoPipeliningIgnoredCommands, ['exchangepaceReserveAlone', 'exchangepaceRefund', 'exchangepaceBlocks', 'exchangepaceProbe'])
})

t.test('fastify.pace.counts says how many grants and refusals were decided without Redis', async t => {
  for (const mode of ['fallback', 'closed'] as const) {
    const client = new ScriptedCluster()
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(exchangePace, { store: new RedisStore({ client, timeoutMs: 1000, retryMs: 60_000, whenUnavailable: mode }) })
    app.post('/token', { config: { pace: { perSecond: 100, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
    app.get('/free', async () => ({ ok: true }))
    await app.ready()
    const { onA } = idsOn()
    const send = async (answer: 'grant' | Error): Promise<number> => {
      const before = client.reserves.length
      const responding = app.inject({ method: 'POST', url: '/token', payload: { client_id: onA } })
      for (let i = 0; i < 10 && client.reserves.length === before; i++) await new Promise(resolve => setImmediate(resolve))
      if (client.reserves.length > before) {
        if (answer === 'grant') client.reserves[before].resolve(grant())
        else client.reserves[before].reject(answer)
      }
      return (await responding).statusCode
    }
    t.equal(await send('grant'), 200)
    t.equal(await send(new Error('Connection is closed.')), mode === 'fallback' ? 200 : 429)
    t.equal(await send('grant'), mode === 'fallback' ? 200 : 429, 'held back within retryMs')
    const counts = app.pace.counts('/token')!
    const alone = mode === 'fallback' ? [2, 0] : [0, 2]
    t.same([counts.granted, counts.grantedWithoutStore, counts.refusedWithoutStore], [mode === 'fallback' ? 3 : 1, ...alone], `${mode}: of the decisions, those made without Redis`)
  }
})
