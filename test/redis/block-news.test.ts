import t from 'tap'
import { EventEmitter } from 'node:events'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { FastifyBaseLogger } from 'fastify'
import { Pace, RedisStore } from '../../lib/index.js'
import { READ_EVERY_MS } from '../../lib/redis/block-news.js'

// How a replica hears of blocks and resets (lib/redis/block-news.ts), against a scripted client:
// what it makes of each announcement and each read of the blocks in force, the connection it hears
// on through the client's life, and the failures it reports. test/redis/blocks.test.ts runs it on
// real servers through an outage.

class Subscriber extends EventEmitter {
  readonly channels: string[] = []
  disconnected = false
  refuse: Error | null = null

  async subscribe (channel: string): Promise<number> {
    this.channels.push(channel)
    if (this.refuse !== null) throw this.refuse
    return 1
  }

  disconnect (): void {
    this.disconnected = true
  }
}

/** A client that answers the store's scripts as told: reads of the blocks in force wait for the test. */
class Client extends EventEmitter {
  readonly subscribers: Subscriber[] = []
  readonly reads: Array<{ resolve: (found: string[]) => void, reject: (err: Error) => void }> = []
  readonly announced: Array<[string, string, string, number]> = []
  probe: string[] | Error = []
  announceFails = false

  defineCommand (): void {}

  duplicate (): Subscriber {
    const subscriber = new Subscriber()
    this.subscribers.push(subscriber)
    return subscriber
  }

  async exchangepaceProbe (): Promise<string[]> {
    if (this.probe instanceof Error) throw this.probe
    return this.probe
  }

  async exchangepaceBlocks (): Promise<string[]> {
    return await new Promise((resolve, reject) => { this.reads.push({ resolve, reject }) })
  }

  async exchangepaceAnnounce (index: string, channel: string, member: string, ms: number): Promise<number> {
    if (this.announceFails) throw new Error('CLUSTERDOWN The cluster is down')
    this.announced.push([index, channel, member, ms])
    return 1
  }

  async exchangepaceBlockBuffer (_key: string, ms: number): Promise<Buffer> {
    const reply = Buffer.alloc(8)
    reply.writeDoubleLE(Date.now() + ms)
    return reply
  }

  async exchangepaceReset (): Promise<number> {
    return 1
  }
}

function recordingLog (): { log: FastifyBaseLogger, lines: Array<[string, string]> } {
  const lines: Array<[string, string]> = []
  const record = (level: string) => (objOrMsg: unknown, msg?: string) => {
    lines.push([level, typeof objOrMsg === 'string' ? objOrMsg : String(msg)])
  }
  const log = { error: record('error'), warn: record('warn'), info: record('info'), debug: record('debug') } as unknown as FastifyBaseLogger
  return { log, lines }
}

/** Lets the store's scheduled work (its first read, a subscription's promise) run. */
const settle = async (): Promise<void> => { for (let i = 0; i < 3; i++) await new Promise(resolve => setImmediate(resolve)) }

function setup (whenUnavailable: 'fallback' | 'open' = 'fallback') {
  const client = new Client()
  const store = new RedisStore({ client, prefix: 'ep:', whenUnavailable })
  const { log, lines } = recordingLog()
  let now = 0
  const local = new Pace({ perSecond: 5, now: () => now })
  store.pace('/token', { limit: 5, window: 1 }, local, log)
  return { client, store, local, lines, advance: (ms: number) => { now += ms } }
}

const blockedMs = (pace: Pace, key: string): number => pace.inspect(key).blockedMs

t.test('each announcement is written into the memory of every pace of its name; anything else changes nothing', async t => {
  const { client, local } = setup()
  await settle()
  const [subscriber] = client.subscribers
  t.same(subscriber.channels, ['ep:blocks'], 'it subscribes to the prefix\'s channel')
  subscriber.emit('message', 'ep:blocks', 'block 60000 /token:leaked client')
  t.equal(blockedMs(local, 'leaked client'), 60_000, 'a key with a space in it, never served here')
  for (const message of ['probe', 'block', 'block 5', 'block x /token:a', 'block -5 /token:a', 'block 0 /token:a', 'block Infinity /token:a', 'unblock /token:leaked client']) {
    subscriber.emit('message', 'ep:blocks', message)
  }
  subscriber.emit('message', 'other:blocks', 'block 60000 /token:a')
  subscriber.emit('message', 'ep:blocks', 'block 60000 /other:a')
  t.equal(blockedMs(local, 'a'), 0, 'nothing else blocks anything here')
  t.equal(blockedMs(local, 'leaked client'), 60_000, 'nor lifts anything')
  t.notOk(local.reserve('leaked client').granted)
  subscriber.emit('message', 'ep:blocks', 'reset /token:leaked client')
  t.equal(blockedMs(local, 'leaked client'), 0, 'a reset lifts it')
  t.ok(local.reserve('leaked client').granted, 'and the bucket is full')
})

t.test('a pace made after a block (another rate of rateOf) is blocked from what the replica heard', async t => {
  const { client, store, advance } = setup()
  await settle()
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /token:leaked')
  let now = 0
  const later = new Pace({ perSecond: 20, now: () => now })
  store.pace('/token', { limit: 20, window: 1 }, later, recordingLog().log)
  t.ok(Math.abs(blockedMs(later, 'leaked') - 60_000) < 50, 'blocked for what is left of it')
  now += 60_000
  advance(60_000)
  t.ok(later.reserve('leaked').granted, 'until its end')
  const other = new Pace({ perSecond: 5 })
  store.pace('/elsewhere', { limit: 5, window: 1 }, other, recordingLog().log)
  t.equal(blockedMs(other, 'leaked'), 0, 'another pace\'s key of the same name is not blocked')
})

t.test('the blocks in force are read when the replica starts and every second, but not over a reset heard meanwhile', async t => {
  const intervals: number[] = []
  const setInterval = globalThis.setInterval
  globalThis.setInterval = ((fn: () => void, ms: number) => { intervals.push(ms); return setInterval(fn, ms) }) as typeof globalThis.setInterval
  t.teardown(() => { globalThis.setInterval = setInterval })
  const { client, local } = setup()
  t.same(intervals, [READ_EVERY_MS], 'read every second')
  t.equal(READ_EVERY_MS, 1000)
  await settle()
  t.equal(client.reads.length, 1, 'and once at start')
  client.subscribers[0].emit('message', 'ep:blocks', 'reset /token:reset-meanwhile')
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /token:heard')
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /token:extended')
  client.reads[0].resolve(['/token:victim', '59000', '/token:reset-meanwhile', '59000', '/token:heard', '59500', '/token:extended', '3600000'])
  await settle()
  t.equal(blockedMs(local, 'victim'), 59_000, 'a block it missed')
  t.equal(blockedMs(local, 'reset-meanwhile'), 0, 'not a block reset while the read was on its way')
  t.equal(blockedMs(local, 'heard'), 60_000, 'a block it heard of stays as it heard it')
  t.equal(blockedMs(local, 'extended'), 3_600_000, 'unless the block was set again, longer')
})

t.test('the connection it hears on lives with the client: closed at its end, opened again when it is ready again', async t => {
  const { client, lines } = setup()
  const second = setup()
  t.equal(client.listenerCount('end'), 1)
  await settle()
  client.emit('ready')
  t.equal(client.subscribers.length, 1, 'ready while listening opens nothing more')
  client.emit('end')
  t.ok(client.subscribers[0].disconnected, 'the client ended: so does its subscription')
  client.emit('ready')
  t.equal(client.subscribers.length, 2, 'the client is back: so is its subscription')
  t.same(lines, [])
  t.equal(second.client.subscribers.length, 1, 'each client its own')
  const shared = new Client()
  for (const prefix of ['a:', 'b:']) new RedisStore({ client: shared, prefix }).pace('/token', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), recordingLog().log)
  t.equal(shared.listenerCount('end'), 1, 'one listener per client, however many stores share it')
  t.equal(shared.subscribers.length, 2, 'and a subscription per store')
  shared.emit('end')
  t.ok(shared.subscribers.every(subscriber => subscriber.disconnected))
})

t.test('a client that cannot subscribe (not an ioredis client) hears nothing, and says nothing', async t => {
  const client = { defineCommand () {} }
  const { log, lines } = recordingLog()
  new RedisStore({ client }).pace('/token', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), log)
  await settle()
  t.same(lines, [])
})

t.test('what the ACL denies is an error, logged once each; any other failure is an outage\'s, at debug', async t => {
  const { client, lines } = setup()
  client.probe = ['TIME (ERR The user executing the script can\'t run this command or subcommand)']
  await settle()
  const subscriber = client.subscribers[0]
  subscriber.emit('error', new Error('connect ECONNREFUSED 127.0.0.1:6379'))
  subscriber.emit('error', new Error('NOPERM this user has no permissions to access one of the channels used as arguments'))
  subscriber.emit('error', new Error('NOPERM this user has no permissions to access one of the channels used as arguments'))
  client.reads[0].reject(new Error('NOPERM this user has no permissions to run the \'evalsha\' command'))
  await settle()
  t.same(lines, [
    ['error', 'exchangepace: Redis denies the RedisStore\'s user the commands TIME (ERR The user executing the script can\'t run this command or subcommand); grant it the keys ~ep:*, the channel &ep:blocks and the commands of the ACL SETUSER line in docs/stores.md'],
    ['debug', 'exchangepace: the RedisStore failed on its subscription to blocks; it reads the blocks in force again within 1000 ms of Redis answering'],
    ['error', 'exchangepace: Redis denies the RedisStore\'s user on its subscription to blocks (NOPERM this user has no permissions to access one of the channels used as arguments); grant it the keys ~ep:*, the channel &ep:blocks and the commands of the ACL SETUSER line in docs/stores.md'],
    ['error', 'exchangepace: Redis denies the RedisStore\'s user reading the blocks in force (NOPERM this user has no permissions to run the \'evalsha\' command); grant it the keys ~ep:*, the channel &ep:blocks and the commands of the ACL SETUSER line in docs/stores.md']
  ])
  const refused = setup()
  refused.client.probe = new Error('NOPERM this user has no permissions to access one of the keys used as arguments')
  await settle()
  t.match(refused.lines, [['error', /^exchangepace: Redis denies the RedisStore's user running its scripts \(NOPERM this user has no permissions to access one of the keys/]], 'a probe refused whole')
  const unsubscribed = new Client()
  const { log, lines: said } = recordingLog()
  const original = unsubscribed.duplicate.bind(unsubscribed)
  unsubscribed.duplicate = () => Object.assign(original(), { refuse: new Error('NOPERM this user has no permissions to run the \'subscribe\' command') })
  new RedisStore({ client: unsubscribed, prefix: 'ep:' }).pace('/token', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), log)
  await settle()
  t.match(said, [['error', /^exchangepace: Redis denies the RedisStore's user subscribing to ep:blocks \(NOPERM this user has no permissions to run the 'subscribe' command\)/]])
})

t.test('block and reset write into this replica\'s memory at once, and announce; an announcement that fails rejects, saying what holds', async t => {
  const { client, store, local } = setup()
  const until = await store.block('/token', 'victim', 30_000.4)
  t.ok(until.getTime() > Date.now())
  t.equal(blockedMs(local, 'victim'), 30_001, 'in memory, for the block\'s whole milliseconds')
  t.ok(store._blockedMs('ep:/token:victim') > 29_000, 'and in the map of the blocks heard of')
  await store.reset('/token', 'victim')
  t.equal(blockedMs(local, 'victim'), 0)
  t.equal(store._blockedMs('ep:/token:victim'), 0)
  t.same(client.announced, [['ep:blocks', 'ep:blocks', '/token:victim', 30_001], ['ep:blocks', 'ep:blocks', '/token:victim', 0]])
  client.announceFails = true
  await t.rejects(store.block('/token', 'victim', 1000), { message: 'exchangepace: the key is blocked in Redis, but telling the replicas failed (CLUSTERDOWN The cluster is down); while Redis answers every replica refuses it, and one that loses Redis before reading the blocks in force admits it: block it again' })
  t.equal(blockedMs(local, 'victim'), 1000, 'this replica holds it')
  await t.rejects(store.reset('/token', 'victim'), { message: 'exchangepace: the key is reset in Redis, but telling the replicas failed (CLUSTERDOWN The cluster is down); each follows at its next request for the key while Redis answers' })
  t.equal(blockedMs(local, 'victim'), 0, 'this replica lifted it')
})

t.test('a block heard of ends on time in the map the outage path of \'open\' reads', async t => {
  const { client, store } = setup('open')
  await settle()
  client.subscribers[0].emit('message', 'ep:blocks', 'block 1 /token:brief')
  t.ok(store._blockedMs('ep:/token:brief') > 0)
  await new Promise(resolve => setTimeout(resolve, 5))
  t.equal(store._blockedMs('ep:/token:brief'), 0, 'over')
  t.equal(store._blockedMs('ep:/token:brief'), 0, 'and forgotten')
  client.subscribers[0].emit('message', 'ep:blocks', 'block 1 /token:a')
  await new Promise(resolve => setTimeout(resolve, 5))
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /token:b')
  t.equal(store._blockedMs('ep:/token:a'), 0, 'a block heard of after another ended sweeps it')
})

t.test('an app\'s memory the store no longer reaches is not kept alive by it', async t => {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const { client, store } = setup()
  await settle()
  const { log } = recordingLog()
  let gone: WeakRef<Pace> | null = null
  ;(() => {
    const pace = new Pace({ perSecond: 5, now: () => 0 })
    gone = new WeakRef(pace)
    store.pace('/gone', { limit: 5, window: 1 }, pace, log)
  })()
  // A WeakRef keeps its target until the end of the job that made it.
  await new Promise(resolve => setImmediate(resolve))
  gc()
  t.equal((gone as WeakRef<Pace> | null)?.deref(), undefined, 'collected: the store held it weakly')
  const kept = new Pace({ perSecond: 5, now: () => 0 })
  store.pace('/gone', { limit: 5, window: 1 }, kept, log)
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /gone:victim')
  t.equal(blockedMs(kept, 'victim'), 60_000, 'the live pace of the name is blocked')
  ;(() => { store.pace('/lost', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), log) })()
  await new Promise(resolve => setImmediate(resolve))
  gc()
  client.subscribers[0].emit('message', 'ep:blocks', 'block 60000 /lost:victim')
  t.pass('no pace of the name is left to reach: nothing to do')
})
