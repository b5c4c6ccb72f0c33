import t from 'tap'
import Fastify from 'fastify'
import { exchangePace, RedisStore } from '../../lib/index.js'
import { readCatalog, writeCatalog } from '../../lib/redis/catalog.js'
import { pacesText } from '../../lib/operator/cli-report.js'

/**
 * The catalog of paces a RedisStore records when the app is ready, without a Redis server: what
 * it writes, what a reader makes of a field that is no entry, and an app whose store fails to
 * record it (test/operator/cli-redis.test.ts reads it through the CLI on a real server).
 */

/** A client that keeps one hash, or fails every write. */
function hashClient (fail = false) {
  const hash: Record<string, string> = {}
  return {
    hash,
    defineCommand () {},
    async hset (_key: string, fields: Record<string, string>) {
      if (fail) throw new Error('connect ECONNREFUSED')
      Object.assign(hash, fields)
    },
    async hgetall () { return { ...hash } }
  }
}

t.test('the app records each pace once, with its routes, spends, shadow and warnAt', async t => {
  const client = hashClient()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client }) })
  app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted', name: 'shared', warnAt: 0.8 } } }, async () => 'ok')
  app.post('/revoke', { config: { pace: { perSecond: 5, key: 'client', spend: 'every', name: 'shared', warnAt: 0.8 } } }, async () => 'ok')
  app.post('/trial', { config: { pace: { limit: 10, window: 600, key: 'source', spend: 'every', shadow: true } } }, async () => 'ok')
  await app.ready()
  const catalog = await readCatalog(client, 'exchangepace:')
  t.same(catalog, [
    { name: '/trial', keyKind: 'source', limit: 10, window: 600, spend: ['every'], routes: ['POST /trial'], shadow: true, warnAt: null },
    { name: 'shared', keyKind: 'client', limit: 5, window: 1, spend: ['accepted', 'every'], routes: ['POST /token', 'POST /revoke'], shadow: false, warnAt: 0.8 }
  ])
  t.equal(pacesText('exchangepace:', catalog), 'The paces the apps on exchangepace: recorded:\n' +
    '  /trial  keyed by source, 10 per 10 min, spend every, in shadow (POST /trial)\n' +
    '  shared  keyed by client, 5/s, spend accepted/every, warnAt 0.8 (POST /token, POST /revoke)\n')
})

t.test('a reader leaves out a field that is no entry; nothing is written for an app without paces', async t => {
  const client = hashClient()
  client.hash.broken = '{'
  client.hash.other = '{"name":1}'
  client.hash.good = JSON.stringify({ name: 'good', keyKind: 'client' })
  client.hash.also = JSON.stringify({ name: 'also', keyKind: 'source' })
  t.same((await readCatalog(client, 'p:')).map(entry => entry.name), ['also', 'good'])
  await writeCatalog(client, 'p:', [])
  t.equal(Object.keys(client.hash).length, 4)
})

t.test('a store that cannot record the catalog: one warning, and the app starts', async t => {
  const lines: Array<Record<string, unknown>> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  t.teardown(() => app.close())
  await app.register(exchangePace, { store: new RedisStore({ client: hashClient(true) }) })
  app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'accepted' } } }, async () => 'ok')
  await app.ready()
  t.match(lines, [{ level: 40, msg: 'exchangepace: the store did not record the catalog of paces; the CLI cannot check pace names against it until a replica starts while it answers', err: { message: 'connect ECONNREFUSED' } }])
})
