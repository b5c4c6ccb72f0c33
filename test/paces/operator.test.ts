import t from 'tap'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import { exchangePace, secretKey, type PaceStore } from '../../lib/index.js'
import { operatorBehaviour, type OperatorSetup } from '../helpers/operator-behaviour.js'
import { warningBehaviour } from '../helpers/warning-behaviour.js'

// The operator's API, and what the operator hears of the paces' decisions, on the default store,
// this replica's memory, on a clock of the test's.

let clock = 1_000_000
const setup: OperatorSetup = {
  options: () => ({ now: () => clock }),
  advance: ms => { clock += ms },
  shared: false,
  hasRow: async (_scope, app, name) => (app.pace.get(name)?.size ?? 0) > 0
}
operatorBehaviour(t, setup)
warningBehaviour(t, setup)

t.test('a store without the operator\'s methods refuses them with a TypeError; reserve still goes through it', async t => {
  const store: PaceStore = {
    scope: 'shared by a store of the test\'s',
    outage: 'nothing changes',
    pace: () => ({ reserve: async () => ({ granted: true, remaining: 7, retryAfterMs: 0, refund () {} }) })
  }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { store })
  app.get('/authorize', { config: { pace: { perSecond: 9, key: 'source', spend: 'every' } } }, async () => 'ok')
  await app.ready()
  for (const action of [app.pace.inspect('/authorize', { source: '192.0.2.1' }), app.pace.reset('/authorize', { source: '192.0.2.1' }), app.pace.block('/authorize', { source: '192.0.2.1' }, 5)]) {
    await t.rejects(action, { name: 'TypeError', message: /the store offers no (inspect|reset|block) \(a PaceStore's operator methods are optional\)/ })
  }
  t.match(await app.pace.reserve('/authorize', { source: '192.0.2.1' }), { granted: true, remaining: 7 })
  t.same(await app.pace.reserve('/authorize', { source: 'not an address' }).catch((err: Error) => err.message), 'exchangepace: pace "/authorize": source must be an IP address, or an IPv6 prefix /64 as the logs show it; got "not an address"')
})

t.test('a pace with a key function is given by its key', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { now: () => clock })
  app.get('/tenant', { config: { pace: { perSecond: 2, key: request => request.headers['x-tenant'] as string | undefined, spend: 'every' } } }, async () => 'ok')
  await app.ready()
  await app.inject({ url: '/tenant', headers: { 'x-tenant': 'acme' } })
  t.equal((await app.pace.inspect('/tenant', { key: 'acme' })).remaining, 1)
  await t.rejects(app.pace.inspect('/tenant', { client: 'acme' }), { message: /is keyed by function: give \{ key \}/ })
  await t.rejects(app.pace.inspect('/tenant', { key: '' }), { message: /key must not be empty/ })
})

t.test('a pace keyed by a device code is given by the hash the logs show, never the code', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(formbody)
  await app.register(exchangePace, { now: () => clock })
  app.post('/token', { config: { pace: { limit: 1, window: 5, key: 'device_code', spend: 'every', refusal: { statusCode: 400, body: { error: 'slow_down' } } } } }, async () => ({ error: 'authorization_pending' }))
  await app.ready()
  const poll = async (): Promise<number> => (await app.inject({ method: 'POST', url: '/token', payload: 'grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=GmRhmhcxhwAzkoEqiMEg', headers: { 'content-type': 'application/x-www-form-urlencoded' } })).statusCode
  t.same([await poll(), await poll()], [200, 400])
  t.equal((await app.pace.inspect('/token', { key: secretKey('GmRhmhcxhwAzkoEqiMEg') })).remaining, 0)
  t.equal((await app.pace.inspect('/token', { key: 'GmRhmhcxhwAzkoEqiMEg' })).remaining, 1, 'the code itself is no key')
  await app.pace.reset('/token', { key: secretKey('GmRhmhcxhwAzkoEqiMEg') })
  t.equal(await poll(), 200)
})

t.test('list gives a key once when a change of its rate left it a row at each rate, the one with least remaining', async t => {
  const { build } = await import('../helpers/shared-behaviour.js')
  const rates = new Map<string, number>()
  const app = await build(t, { now: () => 0 }, app => {
    app.post('/token', { config: { pace: { limit: 5, window: 60, key: 'client', spend: 'every', rateOf: id => rates.get(id) } } }, async () => 'ok')
  })
  const post = () => app.inject({ method: 'POST', url: '/token', payload: { client_id: 'c' } })
  for (let i = 0; i < 4; i++) await post()
  rates.set('c', 10)
  await post()
  t.match(await app.pace.list('/token'), [{ who: { client: 'c' }, remaining: 1 }])
  rates.delete('c')
  t.match(await app.pace.list('/token'), [{ who: { client: 'c' }, remaining: 1 }], 'whichever lane is asked first')
})

t.test('an action the store\'s audit trail cannot record is taken all the same, with a warning', async t => {
  const resets: string[] = []
  const store: PaceStore = {
    scope: 'shared by a store of the test\'s',
    outage: 'nothing changes',
    pace: () => ({ reserve: async () => ({ granted: true, remaining: 7, retryAfterMs: 0, refund () {} }) }),
    reset: async (_name, key) => { resets.push(key) },
    audit: async () => { throw new Error('NOPERM xadd') }
  }
  const lines: Array<Record<string, any>> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  t.teardown(() => app.close())
  await app.register(exchangePace, { store })
  app.get('/authorize', { config: { pace: { perSecond: 9, key: 'source', spend: 'every' } } }, async () => 'ok')
  await app.ready()
  await app.pace.reset('/authorize', { source: '192.0.2.1' }, { by: 'alice' })
  t.same(resets, ['192.0.2.1'])
  t.match(lines, [{ level: 40, pace: '/authorize', action: 'reset', err: { message: 'NOPERM xadd' }, msg: 'exchangepace: the operator\'s action was taken, but the store\'s audit trail did not record it' }])
})

t.test('an app with no paced route says so when asked for a pace', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(exchangePace, { now: () => clock })
  app.get('/open', async () => 'ok')
  await app.ready()
  await t.rejects(app.pace.inspect('/token', { client: 'c' }), { name: 'TypeError', message: 'exchangepace: no pace is named "/token"; the paces are none' })
})
