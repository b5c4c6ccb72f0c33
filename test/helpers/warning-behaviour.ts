import type { FastifyInstance } from 'fastify'
import type { PaceEvent, PaceRouteOptions } from '../../lib/index.js'
import { logSink } from './log-sink.js'
import type { OperatorSetup } from './operator-behaviour.js'
import { build, form, type TapTest } from './shared-behaviour.js'

/**
 * What an operator hears of a pace's decisions, on any store: a refusal's log line (a failure
 * budget's with the address of its pair), a shadow refusal's, and an early warning (`warnAt`) once
 * per key until its bucket is full again, counted, logged and told to `onEvent`. A runner passes
 * the setup of its operator suite (test/helpers/operator-behaviour.ts): the plugin options of its
 * store and the clock the replica and the store read.
 *
 * Not a test file itself (tap runs test/**\/*.test.ts only).
 */

const HOME = '203.0.113.9'
const WARNED = 'exchangepace: near the limit, the key has spent its warnAt share of the pace'

interface Heard {
  app: FastifyInstance
  events: PaceEvent[]
  lines: Array<Record<string, any>>
}

/** One request to the paced route for the client id `id` from `source`, with its right secret or a wrong one. */
function post (app: FastifyInstance, id = 'c1', right = true, source = HOME) {
  return app.inject({ method: 'POST', url: '/token', remoteAddress: source, ...form(['client_id', id], ['client_secret', right ? 'right' : 'wrong']) })
}

/** Whether each of `count` requests for `id` to the route POST /token, paced by '/token', warned, request by request (1 when it did). */
export async function warnings (app: FastifyInstance, count: number, id = 'c1'): Promise<number[]> {
  const warned: number[] = []
  for (let i = 0; i < count; i++) {
    const before = app.pace.counts('/token')!.nearLimit
    await post(app, id)
    warned.push(app.pace.counts('/token')!.nearLimit - before)
  }
  return warned
}

export function warningBehaviour (t: TapTest, setup: OperatorSetup): void {
  /** A replica whose POST /token is paced by `pace` (a wrong secret is a rejected exchange), logging at info and telling `onEvent`. */
  async function replica (t: TapTest, pace: PaceRouteOptions, options: Record<string, unknown> = {}): Promise<Heard> {
    const sink = logSink()
    const events: PaceEvent[] = []
    const app = await build(t, { ...setup.options(`${t.name} ${JSON.stringify(options)}`), onEvent: (event: PaceEvent) => { events.push(event) }, ...options }, app => {
      app.post('/token', { config: { pace } }, async request => {
        if ((request.body as Record<string, string>).client_secret !== 'right') request.pace.outcome = 'rejected'
        return { ok: true }
      })
    }, { logger: { level: 'info', stream: sink.stream } })
    return { app, events, lines: sink.lines }
  }

  t.test('warnAt: the grant that spends the share warns once, logged and counted; no more until the bucket is full again', async t => {
    const { app, events, lines } = await replica(t, { limit: 10, window: 10, key: 'client', spend: 'every', warnAt: 0.8 })
    t.same(await warnings(app, 11), [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], 'the eighth grant leaves 8 of 10 spent; the eleventh is refused')
    setup.advance(5000)
    t.same(await warnings(app, 5), [0, 0, 0, 0, 0], 'half refilled, spent again: the bucket was never full, no second warning')
    setup.advance(10_000)
    t.same(await warnings(app, 1), [0], 'full again, one grant: 1 of 10 spent')
    t.same(await warnings(app, 7), [0, 0, 0, 0, 0, 0, 1], 'and the eighth warns again')
    t.same(await warnings(app, 8, 'c2'), [0, 0, 0, 0, 0, 0, 0, 1], 'per key')
    t.same(events.filter(event => event.type === 'near-limit').slice(0, 1), [{ type: 'near-limit', name: '/token', keyKind: 'client', key: 'c1', outcome: null, retryAfterMs: 8000 }])
    const logged = lines.filter(line => line.msg === WARNED)
    t.equal(logged.length, 3, 'one info line per warning')
    t.match(logged[0], { level: 30, pace: '/token', keyKind: 'client', fullInMs: 8000 })
    t.notOk('key' in logged[0], 'a client id only with logClientIds')
    t.match(app.pace.counts('/token'), { nearLimit: 3, grantedWithoutStore: 0 }, 'three warnings, of grants the store decided (on Redis, Redis)')
  })

  t.test('a failure budget\'s refusal is logged with the address of its pair, the client id only under logClientIds', async t => {
    for (const logClientIds of [false, true]) {
      const { app, lines } = await replica(t, { limit: 2, window: 3600, key: ['client', 'source'], spend: 'rejected' }, { logClientIds })
      const statuses = []
      for (let i = 0; i < 3; i++) statuses.push((await post(app, 'victim', false)).statusCode)
      t.same(statuses, [200, 200, 429])
      const refused = lines.filter(line => line.msg === 'exchangepace: refused, the pace is spent')
      t.same(refused.map(({ level, pace, keyKind, key, source, retryAfterMs }) => ({ level, pace, keyKind, key, source, retryAfterMs })), [
        { level: 30, pace: '/token', keyKind: 'client+source', key: logClientIds ? `victim @ ${HOME}` : undefined, source: HOME, retryAfterMs: 1_800_000 }
      ], `logClientIds ${String(logClientIds)}: the address, to reset the pair by`)
      t.ok(refused[0].reqId !== undefined, 'through the request\'s logger')
    }
  })

  t.test('a pace in shadow logs what it would refuse at info, a failure budget\'s with the address of its pair, and counts it', async t => {
    const { app, events, lines } = await replica(t, { limit: 2, window: 3600, key: ['client', 'source'], spend: 'rejected', shadow: true })
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push((await post(app, 'victim', false)).statusCode)
    t.same(statuses, [200, 200, 200, 200], 'nothing refused')
    const shadowed = lines.filter(line => line.msg === 'exchangepace: would refuse (shadow), the pace is spent; the request goes on')
    t.same(shadowed.map(({ level, pace, keyKind, key, source, retryAfterMs }) => ({ level, pace, keyKind, key, source, retryAfterMs })), Array(2).fill(
      { level: 30, pace: '/token', keyKind: 'client+source', key: undefined, source: HOME, retryAfterMs: 1_800_000 }
    ))
    t.equal(lines.filter(line => line.msg === 'exchangepace: refused, the pace is spent').length, 0, 'no refusal logged')
    t.equal(app.pace.counts('/token')!.shadowRefused, 2)
    t.same(events.map(event => [event.type, event.key, event.retryAfterMs]), Array(2).fill(['shadow-refusal', `victim\u001f${HOME}`, 1_800_000]))
  })
}
