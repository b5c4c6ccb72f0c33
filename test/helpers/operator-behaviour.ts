import type { FastifyInstance } from 'fastify'
import { hostname } from 'node:os'
import { secretKey, type PaceEvent, type PaceRouteOptions } from '../../lib/index.js'
import { secretPost } from './token-endpoint.js'
import { build, form, type TapTest } from './shared-behaviour.js'

/**
 * The operator's API (`fastify.pace.inspect`, `reset`, `block`, `reserve`) through real Fastify, on
 * any store: a runner passes the plugin options of its store and the clock every replica (and the
 * store) reads, so that an hour passes without waiting. With a shared store the action is taken on
 * one replica and the request it changes is sent to the other.
 *
 * Not a test file itself (tap runs test/**\/*.test.ts only).
 */

export interface OperatorSetup {
  /**
   * Plugin options of one replica: replicas built with one `scope` share their store (and every
   * replica the clock); each test has a scope of its own.
   */
  readonly options: (scope: string) => Record<string, unknown>
  /** Moves the clock forward by `ms`. */
  readonly advance: (ms: number) => void
  /** Whether the replicas share their paces (a shared store): actions on one reach the other. */
  readonly shared: boolean
  /** Whether the key has a row where the pace lives. */
  readonly hasRow: (scope: string, app: FastifyInstance, name: string, key: string) => Promise<boolean>
}

const SECRETS = new Map([['victim', 'right-secret'], ['other', 'other-secret']])
export const FAILURES_NAME = '/token#client+source:rejected'
export const EXCHANGES_NAME = '/token#client'
const FAILURES: PaceRouteOptions = { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' }
const EXCHANGES: PaceRouteOptions = { perSecond: 5, key: 'client', spend: 'accepted' }
const HOME = '198.51.100.7'

/** A replica's token endpoint (client_secret_post) with a failure budget and a pace of exchanges, logging to `log`. */
export async function tokenReplica (t: TapTest, options: Record<string, unknown>, log: Array<Record<string, unknown>> = []): Promise<FastifyInstance> {
  return await build(t, options, app => {
    app.post('/token', { config: { pace: [FAILURES, EXCHANGES] } }, secretPost(SECRETS))
  }, { logger: { level: 'info', stream: { write: (line: string) => { log.push(JSON.parse(line)) } } } })
}

/** One exchange for `id` from `source`, with its right secret or a wrong one. */
export async function exchange (app: FastifyInstance, right: boolean, id = 'victim', source = HOME): Promise<{ status: number, retryAfter: string | undefined }> {
  const secret = right ? SECRETS.get(id) as string : 'old-secret'
  const response = await app.inject({ method: 'POST', url: '/token', remoteAddress: source, ...form(['client_id', id], ['client_secret', secret]) })
  return { status: response.statusCode, retryAfter: response.headers['retry-after'] as string | undefined }
}

async function statuses (app: FastifyInstance, right: boolean, count: number): Promise<number[]> {
  const seen: number[] = []
  for (let i = 0; i < count; i++) seen.push((await exchange(app, right)).status)
  return seen
}

export function operatorBehaviour (t: TapTest, setup: OperatorSetup): void {
  /** Two replicas of one setup: the operator acts on `a`, requests go to `b` (the same one without a shared store). */
  async function replicas (t: TapTest, options: Record<string, unknown> = {}): Promise<{ a: FastifyInstance, b: FastifyInstance }> {
    const a = await tokenReplica(t, { ...setup.options(t.name), ...options })
    return { a, b: setup.shared ? await tokenReplica(t, { ...setup.options(t.name), ...options }) : a }
  }

  t.test('a client locked out by a bad secret rotation: inspect shows the lockout, and a reset lifts it at once', async t => {
    const { a, b } = await replicas(t)
    t.same(await statuses(b, false, 5), [401, 401, 401, 401, 401], 'the old secret, five times')
    const locked = await exchange(b, true)
    t.same(locked, { status: 429, retryAfter: '720' }, 'the right secret is back, and the client waits 12 minutes')
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: HOME }), { remaining: 0, retryAfterMs: 720_000, fullInMs: 3_600_000, blockedUntil: null })
    await a.pace.reset(FAILURES_NAME, { client: 'victim', source: HOME })
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: HOME }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
    t.equal((await exchange(b, true)).status, 200, 'the next request, on the other replica, gets its token')
    t.equal((await exchange(b, false)).status, 401, 'and the budget is whole again')
  })

  t.test('a block refuses with a Retry-After that reaches its end, ends on time, and a reset lifts it', async t => {
    const { a, b } = await replicas(t)
    const until = await a.pace.block(EXCHANGES_NAME, { client: 'victim' }, 60)
    t.type(until, Date)
    t.same(await exchange(b, true), { status: 429, retryAfter: '60' })
    const seen = await a.pace.inspect(EXCHANGES_NAME, { client: 'victim' })
    t.same({ ...seen, blockedUntil: null }, { remaining: 0, retryAfterMs: 60_000, fullInMs: 60_000, blockedUntil: null })
    t.ok(Math.abs((seen.blockedUntil?.getTime() ?? 0) - until.getTime()) < 1000, 'inspect tells the block\'s end')
    t.equal((await exchange(b, true, 'other')).status, 200, 'another client is not blocked')
    setup.advance(59_500)
    t.same(await exchange(b, true), { status: 429, retryAfter: '1' })
    setup.advance(500)
    t.equal((await exchange(b, true)).status, 200, 'the block ends on time')
    t.same(await a.pace.inspect(EXCHANGES_NAME, { client: 'victim' }), { remaining: 4, retryAfterMs: 0, fullInMs: 200, blockedUntil: null }, 'a full bucket after it, less the grant')
    await a.pace.block(EXCHANGES_NAME, { client: 'victim' }, 3600)
    t.equal((await exchange(b, true)).status, 429)
    await a.pace.reset(EXCHANGES_NAME, { client: 'victim' })
    t.equal((await exchange(b, true)).status, 200, 'a reset lifts a block')
  })

  t.test('a refund of a unit granted before a block gives nothing back during it', async t => {
    const { a } = await replicas(t)
    const held = await a.pace.reserve(EXCHANGES_NAME, { client: 'victim' })
    t.ok(held.granted)
    await a.pace.block(EXCHANGES_NAME, { client: 'victim' }, 30)
    held.refund()
    t.equal((await a.pace.inspect(EXCHANGES_NAME, { client: 'victim' })).retryAfterMs, 30_000)
  })

  t.test('reserve gives the decision a request would get, in the pace\'s store, and refund gives it back', async t => {
    const { a, b } = await replicas(t)
    const who = { client: 'victim' }
    const taken = []
    for (let i = 0; i < 5; i++) taken.push(await a.pace.reserve(EXCHANGES_NAME, who))
    t.same(taken.map(r => [r.granted, r.remaining]), [[true, 4], [true, 3], [true, 2], [true, 1], [true, 0]])
    const refused = await a.pace.reserve(EXCHANGES_NAME, who)
    t.same([refused.granted, refused.remaining, refused.retryAfterMs], [false, 0, 200])
    t.equal((await exchange(b, true)).status, 429, 'a request meets the same bucket')
    taken[4].refund()
    t.equal((await exchange(b, true)).status, 200, 'the refunded unit is there again')
    t.match(a.pace.counts(EXCHANGES_NAME), setup.shared ? { granted: 5, refused: 1 } : { granted: 6, refused: 2 }, 'counted as decisions of the pace (beside those of requests to the same replica)')
  })

  t.test('looking creates no row', async t => {
    const { a } = await replicas(t)
    t.same(await a.pace.inspect(EXCHANGES_NAME, { client: 'never-seen' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'never-seen', source: '2001:db8::1' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
    t.notOk(await setup.hasRow(t.name, a, EXCHANGES_NAME, 'never-seen'))
    await a.pace.reset(EXCHANGES_NAME, { client: 'never-seen' })
    t.notOk(await setup.hasRow(t.name, a, EXCHANGES_NAME, 'never-seen'), 'a reset of a full bucket leaves none either')
  })

  t.test('bad input throws a TypeError naming what is wrong, and changes nothing', async t => {
    const { a, b } = await replicas(t)
    await exchange(b, false)
    const before = await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: HOME })
    const pair = { client: 'victim', source: HOME }
    const cases: Array<[Promise<unknown>, RegExp]> = [
      [a.pace.inspect('/nowhere', pair), /no pace is named "\/nowhere"; the paces are "\/token#client\+source:rejected", "\/token#client"/],
      [a.pace.reset(FAILURES_NAME, { source: HOME }), /is keyed by client\+source: give \{ client, source \}, got \{"source":"198\.51\.100\.7"\}/],
      [a.pace.reset(FAILURES_NAME, { client: 'victim', source: HOME, key: 'x' }), /give \{ client, source \}/],
      [a.pace.reset(EXCHANGES_NAME, null as never), /is keyed by client: give \{ client \}, got null/],
      [a.pace.reset(FAILURES_NAME, { client: 'victim', source: '203.0.113.300' }), /source must be an IP address, or an IPv6 prefix \/64 as the logs show it; got "203.0.113.300"/],
      [a.pace.reset(FAILURES_NAME, { client: 'victim', source: '2001:db8::/48' }), /source must be an IP address/],
      [a.pace.reset(FAILURES_NAME, { client: 'vic\u0000tim', source: HOME }), /client contains non-printable characters/],
      [a.pace.reset(EXCHANGES_NAME, { client: 'x'.repeat(256) }), /client is longer than 255 characters/],
      [a.pace.reset(EXCHANGES_NAME, { client: 7 as never }), /client must be a string/],
      [a.pace.block(FAILURES_NAME, pair, -5), /a block lasts a number of seconds > 0 and <= 31536000 \(a year\), got -5/],
      [a.pace.block(FAILURES_NAME, pair, 0), /got 0/],
      [a.pace.block(FAILURES_NAME, pair, Number.NaN), /got NaN/],
      [a.pace.block(FAILURES_NAME, pair, 366 * 86400), /got 31622400/],
      [a.pace.block(FAILURES_NAME, pair, '60' as never), /got 60/]
    ]
    for (const [action, message] of cases) await t.rejects(action, { name: 'TypeError', message })
    t.same(await a.pace.inspect(FAILURES_NAME, pair), before, 'nothing changed')
  })

  t.test('a source is made into its key as a request\'s is: IPv6 by its prefix, given as an address or as the prefix', async t => {
    const { a, b } = await replicas(t)
    for (let i = 0; i < 5; i++) await exchange(b, false, 'victim', '2001:db8:1:2::7')
    t.equal((await exchange(b, true, 'victim', '2001:db8:1:2:ffff::9')).status, 429, 'one /64, one budget')
    t.equal((await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: '2001:db8:1:2::1' })).remaining, 0)
    await a.pace.reset(FAILURES_NAME, { client: 'victim', source: '2001:db8:1:2::/64' })
    t.equal((await exchange(b, true, 'victim', '2001:db8:1:2::7')).status, 200)
  })

  t.test('each reset and block is logged at info, with client ids only under logClientIds, and told to onEvent without a request', async t => {
    for (const logClientIds of [false, true]) {
      const log: Array<Record<string, unknown>> = []
      const events: Array<[PaceEvent, unknown]> = []
      const app = await tokenReplica(t, { ...setup.options(`${t.name} ${String(logClientIds)}`), logClientIds, onEvent: (event: PaceEvent, request: unknown) => { events.push([event, request]) } }, log)
      await app.pace.reset(FAILURES_NAME, { client: 'victim', source: HOME }, { by: 'alice@ops' })
      await app.pace.block(EXCHANGES_NAME, { client: 'victim' }, 90)
      const lines = log.filter(line => line.action !== undefined).map(({ level, pace, keyKind, key, source, action, blockedMs, by, host, msg }) => ({ level, pace, keyKind, key, source, action, blockedMs, by, host, msg }))
      const victim = logClientIds ? 'victim' : `sha256:${secretKey('victim')}`
      t.same(lines, [
        { level: 30, pace: FAILURES_NAME, keyKind: 'client+source', key: `${victim} @ ${HOME}`, source: HOME, action: 'reset', blockedMs: undefined, by: 'alice@ops', host: hostname(), msg: 'exchangepace: operator reset a key' },
        { level: 30, pace: EXCHANGES_NAME, keyKind: 'client', key: victim, source: undefined, action: 'blocked', blockedMs: 90_000, by: 'fastify.pace', host: hostname(), msg: 'exchangepace: operator blocked a key' }
      ], 'the key and the operator named; a client id only as its hash without logClientIds')
      if (!logClientIds) t.notOk(JSON.stringify(log).includes('"victim'), 'no client id in the log')
      t.same(events, [
        [{ type: 'reset', name: FAILURES_NAME, keyKind: 'client+source', key: `victim\u001f${HOME}`, outcome: null, retryAfterMs: 0 }, null],
        [{ type: 'blocked', name: EXCHANGES_NAME, keyKind: 'client', key: 'victim', outcome: null, retryAfterMs: 90_000 }, null]
      ])
    }
  })

  t.test('list: the keys held back, least remaining first, each by its parts; a client\'s pairs, and a limit', async t => {
    const { a, b } = await replicas(t)
    const ELSEWHERE = '203.0.113.50'
    for (let i = 0; i < 5; i++) await exchange(b, false, 'victim', HOME)
    for (let i = 0; i < 2; i++) await exchange(b, false, 'victim', ELSEWHERE)
    await exchange(b, false, 'other', HOME)
    const victimHome = { who: { client: 'victim', source: HOME }, remaining: 0, retryAfterMs: 720_000, fullInMs: 3_600_000, blockedUntil: null }
    const victimElsewhere = { who: { client: 'victim', source: ELSEWHERE }, remaining: 3, retryAfterMs: 0, fullInMs: 1_440_000, blockedUntil: null }
    const otherHome = { who: { client: 'other', source: HOME }, remaining: 4, retryAfterMs: 0, fullInMs: 720_000, blockedUntil: null }
    t.same(await a.pace.list(FAILURES_NAME), [victimHome, victimElsewhere, otherHome])
    t.same(await a.pace.list(FAILURES_NAME, { limit: 2 }), [victimHome, victimElsewhere])
    t.same(await a.pace.list(FAILURES_NAME, { client: 'victim' }), [victimHome, victimElsewhere], 'every address of one client')
    t.same(await a.pace.list(EXCHANGES_NAME), [], 'the exchanges were refunded: nothing held back')
    await a.pace.block(EXCHANGES_NAME, { client: 'other' }, 60)
    const [blocked, ...rest] = await a.pace.list(EXCHANGES_NAME)
    t.same({ ...blocked, blockedUntil: null }, { who: { client: 'other' }, remaining: 0, retryAfterMs: 60_000, fullInMs: 60_000, blockedUntil: null })
    t.type(blocked.blockedUntil, Date)
    t.same(rest, [])
    setup.advance(3_600_000)
    t.same(await a.pace.list(FAILURES_NAME), [], 'an hour on, every bucket is full again')
  })

  t.test('reset with { client } on a pair pace gives back every address\'s budget of that client, and no one else\'s', async t => {
    const { a, b } = await replicas(t)
    for (const source of [HOME, '203.0.113.50', '2001:db8:1:2::7']) for (let i = 0; i < 5; i++) await exchange(b, false, 'victim', source)
    for (let i = 0; i < 5; i++) await exchange(b, false, 'other', HOME)
    t.equal((await a.pace.list(FAILURES_NAME, { client: 'victim' })).length, 3)
    await a.pace.reset(FAILURES_NAME, { client: 'victim' })
    t.same(await a.pace.list(FAILURES_NAME), [{ who: { client: 'other', source: HOME }, remaining: 0, retryAfterMs: 720_000, fullInMs: 3_600_000, blockedUntil: null }])
    for (const source of [HOME, '203.0.113.50', '2001:db8:1:2::7']) t.equal((await exchange(b, true, 'victim', source)).status, 200, `victim from ${source}`)
    t.equal((await exchange(b, true, 'other', HOME)).status, 429)
  })

  t.test('inspect with { client } on a pair pace tells of every address: the most held back, and how many are', async t => {
    const { a, b } = await replicas(t)
    const ELSEWHERE = '203.0.113.50'
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null, source: null, pairsHeldBack: 0 }, 'no pair held back: a full bucket')
    for (let i = 0; i < 2; i++) await exchange(b, false, 'victim', ELSEWHERE)
    for (let i = 0; i < 5; i++) await exchange(b, false, 'victim', HOME)
    for (let i = 0; i < 5; i++) await exchange(b, false, 'other', '192.0.2.9')
    const worst = { remaining: 0, retryAfterMs: 720_000, fullInMs: 3_600_000, blockedUntil: null }
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim' }), { ...worst, source: HOME, pairsHeldBack: 2 }, 'the locked-out address, of two held back')
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: HOME }), worst, 'as inspect of that pair tells it')
    await a.pace.block(FAILURES_NAME, { client: 'victim', source: ELSEWHERE }, 7200)
    const blocked = await a.pace.inspect(FAILURES_NAME, { client: 'victim' })
    t.match(blocked, { remaining: 0, retryAfterMs: 7_200_000, source: ELSEWHERE, pairsHeldBack: 2, blockedUntil: Date }, 'a block held longer comes first')
    await a.pace.reset(FAILURES_NAME, { client: 'victim' })
    t.same(await a.pace.inspect(FAILURES_NAME, { client: 'victim' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null, source: null, pairsHeldBack: 0 }, 'after a reset of the client: nothing held back')
    t.match(await a.pace.inspect(FAILURES_NAME, { client: 'other' }), { remaining: 0, source: '192.0.2.9', pairsHeldBack: 1 }, 'another client\'s pairs are its own')
    await t.rejects(a.pace.inspect(FAILURES_NAME, { client: 'vic\u0001tim' }), TypeError)
  })

  t.test('list refuses what it cannot do, with a TypeError', async t => {
    const { a } = await replicas(t)
    await t.rejects(a.pace.list('/nothing'), /no pace is named "\/nothing"/)
    for (const limit of [0, 1.5, 10_001]) await t.rejects(a.pace.list(FAILURES_NAME, { limit }), /list's limit must be an integer from 1 to 10000/)
    await t.rejects(a.pace.list(EXCHANGES_NAME, { client: 'victim' }), /pace "\/token#client" is keyed by client: list takes \{ client \} on a pace keyed by client\+source only/)
    await t.rejects(a.pace.list(FAILURES_NAME, { client: 'vic\u0001tim' }), TypeError)
    await t.rejects(a.pace.reset(FAILURES_NAME, { client: 'vic\u0001tim' }), TypeError)
  })

  t.test('by must name the operator: a TypeError otherwise, and nothing done', async t => {
    const { a } = await replicas(t)
    for (const by of ['', 'x'.repeat(201), 'a\u0000b', 7]) {
      await t.rejects(a.pace.block(EXCHANGES_NAME, { client: 'victim' }, 60, { by: by as string }), /by must be a string of 1 to 200 printable characters/)
      await t.rejects(a.pace.reset(EXCHANGES_NAME, { client: 'victim' }, { by: by as string }), TypeError)
    }
    t.same(await a.pace.inspect(EXCHANGES_NAME, { client: 'victim' }), { remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
  })
}
