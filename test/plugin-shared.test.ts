import t from 'tap'
import type { FastifyReply } from 'fastify'
import type { Pace, PaceStore } from '../lib/index.js'
import { build, form, sharedBehaviour } from './shared-behaviour.js'

// The store-independent behaviours on the in-memory default. The clock is frozen so that nothing
// refills while a burst is in flight; the same suite holds on a store with a moving clock of its own.
t.test('in-memory default', async t => {
  sharedBehaviour(t, () => ({ now: () => 0 }))
})

/**
 * A shared store that answers asynchronously from the replica's own pace: the plugin's path for
 * stores that answer later (a Redis round trip), with the in-memory semantics and rows.
 */
const asyncStore = (): PaceStore => ({
  scope: 'shared by all replicas',
  outage: 'it holds per replica',
  pace: (_name: string, _perSecond: number, local: Pace) => ({
    reserve: async (key: string) => {
      await new Promise(resolve => setImmediate(resolve))
      return local.reserve(key)
    }
  })
})

t.test('a store that answers asynchronously', async t => {
  sharedBehaviour(t, () => ({ now: () => 0, store: asyncStore() }))
})

t.test('a store whose reserve rejects: the request fails with 500 and what it took is given back', async t => {
  const failing: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (name: string, _perSecond: number, local: Pace) => ({
      reserve: async (key: string) => {
        if (name === 'broken') throw new Error('store down')
        return local.reserve(key)
      }
    })
  }
  const app = await build(t, { now: () => 0, store: failing }, app => {
    app.post('/token', {
      config: {
        pace: [
          { name: 'working', perSecond: 1, key: 'client', spend: 'accepted' },
          { name: 'broken', perSecond: 1, key: 'client', spend: 'accepted' }
        ]
      }
    }, async () => ({ ok: true }))
  })
  const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'c']) })
  t.equal(response.statusCode, 500)
  t.equal(response.headers.ratelimit, undefined)
  t.equal(app.pace.get('working')!.size, 0, 'the unit the first pace took was refunded, as for a key that throws')
})

t.test('a grant that comes after the request was answered (as by a handler timeout) is given back, and the handler does not run', async t => {
  const answers: Array<() => void> = []
  const replies: FastifyReply[] = []
  const slow: PaceStore = {
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (_name: string, _perSecond: number, local: Pace) => ({
      reserve: (key: string) => new Promise(resolve => {
        answers.push(() => resolve(local.reserve(key)))
        // While the store decides, the request is answered elsewhere, as Fastify's handlerTimeout does.
        queueMicrotask(() => { replies[0].code(503).send({ error: 'temporarily_unavailable' }) })
      })
    })
  }
  let ran = 0
  const app = await build(t, { now: () => 0, store: slow }, app => {
    app.post('/token', {
      config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } },
      onRequest: (_request, reply, done) => { replies.push(reply); done() }
    }, async () => {
      ran++
      return { ok: true }
    })
  })
  const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'victim']) })
  t.equal(response.statusCode, 503)
  t.equal(answers.length, 1)
  answers[0]()
  await new Promise(resolve => setImmediate(resolve))
  t.equal(app.pace.get('/token')!.size, 0, 'the unit was given back: the bucket is full')
  t.equal(ran, 0)
})

t.test('an errorResponseBuilder that throws fails the request through Fastify\'s error handler on either path, and the process goes on', async t => {
  for (const [label, store] of [['in memory', undefined], ['asynchronous store', asyncStore()]] as const) {
    const app = await build(t, { now: () => 0, store, errorResponseBuilder: () => { throw new Error('builder broke') } }, app => {
      app.post('/token', { config: { pace: { perSecond: 1, key: 'client', spend: 'accepted' } } }, async () => ({ ok: true }))
    })
    const responses = []
    for (let i = 0; i < 3; i++) responses.push(await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'c']) }))
    t.same(responses.map(r => r.statusCode), [200, 429, 429], `${label}: the status the refusal had set`)
    t.same(responses[2].json(), { error: 'Too Many Requests' }, `${label}: Fastify's error body, through the route's 429 schema`)
    t.equal(app.pace.get('/token')!.size, 1, `${label}: the refused requests took nothing`)
  }
})
