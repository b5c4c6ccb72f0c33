import t from 'tap'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Pace, PaceBucket, PaceSpend, PaceStore } from '../../lib/index.js'
import { build, form, sharedBehaviour } from '../helpers/shared-behaviour.js'

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
  pace: (_name: string, _rate: PaceBucket, local: Pace) => ({
    reserve: async (key: string) => {
      await new Promise(resolve => setImmediate(resolve))
      return local.reserve(key)
    }
  })
})

t.test('a store that answers asynchronously', async t => {
  sharedBehaviour(t, () => ({ now: () => 0, store: asyncStore() }))
})

t.test('a store whose reserve rejects, or throws: the request fails with 500 and what it took is given back', async t => {
  const failing = (how: 'rejects' | 'throws'): PaceStore => ({
    scope: 'shared by all replicas',
    outage: 'it holds per replica',
    pace: (name: string, _rate: PaceBucket, local: Pace) => ({
      reserve: (key: string) => {
        if (!name.startsWith('broken')) return Promise.resolve(local.reserve(key))
        if (how === 'throws') throw new Error('store down')
        return Promise.reject(new Error('store down'))
      }
    })
  })
  for (const how of ['rejects', 'throws'] as const) {
    let settled: boolean | undefined
    const app = await build(t, { now: () => 0, store: failing(how) }, app => {
      app.post('/token', {
        config: {
          pace: [
            { name: 'working', perSecond: 1, key: 'client', spend: 'accepted' },
            { name: 'broken', perSecond: 1, key: 'client', spend: 'accepted' }
          ]
        }
      }, async () => ({ ok: true }))
      // Source paces spent on every request alone: the hook commits, and the route has no onSend of the plugin's.
      app.get('/authorize', {
        onResponse: (request: FastifyRequest, _reply: FastifyReply, done: () => void) => { settled = request.pace.settled; done() },
        config: {
          pace: [
            { name: 'working-source', perSecond: 1, key: 'source', spend: 'every' },
            { name: 'broken-source', perSecond: 1, key: 'source', spend: 'every' }
          ]
        }
      }, async () => 'ok')
    })
    const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'c']) })
    t.equal(response.statusCode, 500, how)
    t.equal(response.headers.ratelimit, undefined, how)
    t.equal(app.pace.get('working')!.size, 0, `${how}: the unit the first pace took was refunded, as for a key that throws`)
    const authorize = await app.inject('/authorize')
    t.equal(authorize.statusCode, 500, how)
    t.equal(app.pace.get('working-source')!.size, 0, `${how}: given back on the route that commits too`)
    t.equal(settled, true, `${how}: and its ticket settled`)
  }
})

t.test('a unit the store grants after the request was answered (as by a handler timeout) is settled as the ticket was, and the handler does not run', async t => {
  /** A route whose store answers when the test says, after the request has been answered 503. */
  async function answeredFirst (tt: typeof t, spend: PaceSpend) {
    const answers: Array<() => void> = []
    const flags = { rejectOnAnswer: false }
    const requests: FastifyRequest[] = []
    const slow: PaceStore = {
      scope: 'shared by all replicas',
      outage: 'it holds per replica',
      pace: (_name: string, _rate: PaceBucket, local: Pace) => ({
        reserve: (key: string) => new Promise(resolve => {
          answers.push(() => resolve(local.reserve(key)))
          // While the store decides, the request is answered elsewhere, as Fastify's handlerTimeout does.
          queueMicrotask(() => {
            if (flags.rejectOnAnswer) requests[requests.length - 1].pace.outcome = 'rejected'
            replies[replies.length - 1].code(503).send({ error: 'temporarily_unavailable' })
          })
        })
      })
    }
    const replies: FastifyReply[] = []
    let ran = 0
    const app = await build(tt, { now: () => 0, store: slow }, app => {
      app.post('/token', {
        config: { pace: { perSecond: 1, key: 'client', spend } },
        onRequest: (request, reply, done) => { requests.push(request); replies.push(reply); done() }
      }, async () => {
        ran++
        return { ok: true }
      })
    })
    const post = async () => {
      const response = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'victim']) })
      tt.equal(response.statusCode, 503)
      return requests[requests.length - 1].pace
    }
    const answer = async () => {
      answers[answers.length - 1]()
      await new Promise(resolve => setImmediate(resolve))
    }
    return { size: () => app.pace.get('/token')!.size, post, answer, ran: () => ran, flags }
  }

  t.test('spent \'accepted\': kept while the outcome is accepted, refunded once it is rejected, before or after', async t => {
    const route = await answeredFirst(t, 'accepted')
    const kept = await route.post()
    await route.answer()
    t.equal(route.size(), 1, 'kept: the 503 settled with outcome accepted')
    t.same(kept.held.map(held => [held.key, held.spend]), [['victim', 'accepted']], 'held by the ticket')
    kept.outcome = 'rejected'
    t.equal(route.size(), 0, 'refunded when the outcome became rejected')
    const rejectedFirst = await route.post()
    rejectedFirst.outcome = 'rejected'
    await route.answer()
    t.equal(route.size(), 0, 'refunded at once: the exchange had been flagged rejected before the store answered')
    t.equal(route.ran(), 0)
  })

  t.test('spent \'rejected\': refunded at once when the answer went out accepted, kept when it went out rejected', async t => {
    const route = await answeredFirst(t, 'rejected')
    const accepted = await route.post()
    await route.answer()
    t.equal(route.size(), 0, 'refunded: the 503 was sent with the outcome accepted')
    t.same(accepted.held.map(held => [held.key, held.spend]), [['victim', 'rejected']], 'held by the ticket')
    route.flags.rejectOnAnswer = true
    await route.post()
    await route.answer()
    t.equal(route.size(), 1, 'kept: the answer went out rejected')
    t.equal(route.ran(), 0)
  })

  t.test('spent \'every\': kept, whatever the outcome', async t => {
    const route = await answeredFirst(t, 'every')
    const ticket = await route.post()
    ticket.outcome = 'rejected'
    await route.answer()
    t.equal(route.size(), 1, 'never refunded')
    t.equal(route.ran(), 0)
  })

  t.test('a refusal that comes late holds nothing', async t => {
    const route = await answeredFirst(t, 'accepted')
    await route.post()
    await route.answer()
    const refused = await route.post()
    await route.answer()
    t.same(refused.held, [], 'nothing held')
    t.equal(route.size(), 1, 'the first unit stays spent; the refusal took nothing')
  })
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
