import t from 'tap'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { connect, type AddressInfo, type Socket } from 'node:net'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import { Redis } from 'ioredis'
import exchangePace, { Pace, RedisStore } from '../../lib/index.js'
import { SCRIPTS } from '../../lib/redis/scripts.js'
import { startFaultProxy } from '../../bench/shared/fault-proxy.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'

// ioredis has one auto-pipelined batch in flight per connection and holds the next until its
// answer. A refund sent in a batch would therefore hold the next request's reservations for a
// round trip: with the README's token route (whose failure budget is refunded on every accepted
// exchange) each request would wait for Redis twice. Here Redis's answers are held by a proxy
// while a refund is out, and the next reservation must reach Redis all the same: with ioredis's
// default options and with the auto-pipelining the docs recommend. (The store's reads of the blocks
// in force go on their own too, so no batch of theirs is out when the answers are held.)

const direct = await redisOrSkip()

/** The client options tested: ioredis's defaults, and the auto-pipelining the docs recommend. */
const CLIENT_SHAPES = [['ioredis defaults', {}], ['enableAutoPipelining', { enableAutoPipelining: true }]] as const

/** Keys of `prefix` whose name holds `part`, read on a connection of the test's own. */
async function keysWith (client: Redis, prefix: string, part: string): Promise<string[]> {
  return (await client.keys(`${prefix}*`)).filter(key => key.includes(part))
}

/** Waits until `check` holds, or `ms` passed: whether it held. */
async function eventually (check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const until = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > until) return false
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

for (const [shape, options] of CLIENT_SHAPES) {
  t.test(`a refund out holds no reservation (${shape})`, { skip: direct === null ? 'no Redis' : false }, async t => {
    const redis = direct as Redis
    const proxy = await startFaultProxy({ target: { port: Number(new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379').port || 6379) } })
    t.teardown(() => proxy.close())
    const client = new Redis({ port: proxy.port, host: proxy.host, ...options })
    t.teardown(() => client.disconnect())
    const prefix = uniquePrefix('one-wait')
    const store = new RedisStore({ client, prefix, timeoutMs: 60_000 })
    const pace = store.pace('/token#client+source:rejected', { limit: 5, window: 3600 }, new Pace({ limit: 5, window: 3600 }), { warn () {}, info () {}, error () {}, debug () {} })

    const first = await pace.reserve('first-exchange')
    t.ok(first.granted)
    const stall = await proxy.add({ kind: 'stall', direction: 'downstream' })
    first.refund()
    t.ok(await eventually(async () => (await keysWith(redis, prefix, 'first-exchange')).length === 0, 5000),
      'the refund ran in Redis: the bucket is full again, and has no row')
    const second = pace.reserve('second-exchange')
    t.ok(await eventually(async () => (await keysWith(redis, prefix, 'second-exchange')).length === 1, 5000),
      'the next reservation ran in Redis while the refund\'s answer was held')
    await proxy.remove(stall)
    t.ok((await second).granted)
  })
}

for (const [shape, options] of CLIENT_SHAPES) {
  t.test(`an inspection asked right after a refund sees it (${shape})`, { skip: direct === null ? 'no Redis' : false }, async t => {
    const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', options)
    t.teardown(() => client.disconnect())
    const store = new RedisStore({ client, prefix: uniquePrefix('refund-order') })
    const pace = store.pace('/token#client', { limit: 5, window: 1 }, new Pace({ perSecond: 5 }), { warn () {}, info () {}, error () {}, debug () {} })
    const reservation = await pace.reserve('reporting')
    t.ok((await store.inspect('/token#client', 'reporting')).spentMs > 0, 'a unit spent')
    reservation.refund()
    t.equal((await store.inspect('/token#client', 'reporting')).spentMs, 0, 'the refund went first: the bucket is full')
  })
}

/** The README's recommended token route: a failure budget per pair, an exchange pace per client, a ceiling per source. */
const README_TOKEN = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { perSecond: 50, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' }
] as const

/** How many reserve scripts each write of `client` to Redis holds, from now on, in order. */
function reserveWrites (client: Redis): number[] {
  const sha = createHash('sha1').update(SCRIPTS.reserve).digest('hex')
  const writes: number[] = []
  const stream = (client as unknown as { stream: Socket }).stream
  const write = stream.write.bind(stream) as (data: string | Buffer) => boolean
  stream.write = ((data: string | Buffer) => {
    const reserves = String(data).split(sha).length - 1
    if (reserves > 0) writes.push(reserves)
    return write(data)
  }) as Socket['write']
  return writes
}

/** A token request whose head and body are written at once, on a connection of its own: its answer's status line. */
async function tokenRequest (port: number, clientId: string): Promise<string> {
  const socket = connect(port, '127.0.0.1')
  await once(socket, 'connect')
  let answered = ''
  socket.on('data', chunk => { answered += String(chunk) })
  const body = `grant_type=client_credentials&client_id=${clientId}&client_secret=right`
  socket.write(`POST /token HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
  await once(socket, 'close')
  return answered.slice(0, answered.indexOf('\r\n'))
}

t.test('with auto-pipelining, a request of the README\'s token route sends its three reservations in one write, alone or under load', { skip: direct === null ? 'no Redis' : false }, async t => {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableAutoPipelining: true })
  const app = Fastify()
  t.teardown(async () => {
    await app.close()
    client.disconnect()
  })
  await app.register(formbody)
  await app.register(exchangePace, { store: new RedisStore({ client, prefix: uniquePrefix('one-write') }) })
  app.post('/token', { config: { pace: README_TOKEN } }, async () => ({ access_token: 'token' }))
  await app.listen({ host: '127.0.0.1', port: 0 })
  const port = (app.server.address() as AddressInfo).port
  t.equal(await tokenRequest(port, 'warm'), 'HTTP/1.1 200 OK', 'the scripts are loaded')
  await new Promise(resolve => setImmediate(resolve))

  const writes = reserveWrites(client)
  t.equal(await tokenRequest(port, 'alone'), 'HTTP/1.1 200 OK')
  t.same(writes, [3], 'one write: the source pace sent with the two of the preHandler')

  writes.length = 0
  const requests = 40
  const answers = await Promise.all(Array.from({ length: requests }, (_, i) => tokenRequest(port, `client-${i}`)))
  t.same(new Set(answers), new Set(['HTTP/1.1 200 OK']), 'every request granted')
  t.equal(writes.reduce((sum, reserves) => sum + reserves, 0), 3 * requests, 'every reservation sent')
  t.ok(writes.length <= requests, `${writes.length} writes for ${requests} requests: at most one each`)
})
