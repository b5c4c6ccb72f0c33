import t from 'tap'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { isVictim, recommendedTokenApp } from '../helpers/made-up-ids.js'
import { build, form, type TapTest } from '../helpers/shared-behaviour.js'

/**
 * Made-up client ids (`isClient`): a request whose declared id names no client takes nothing from
 * the paces keyed by the client id, and its failure is counted by the per-source failure budget,
 * so a flood of made-up ids leaves rows in proportion to its sources, not to its ids. The clock is
 * injected (`clock.t`, ms).
 */

// 20,000 requests through inject, twice over: a minute or more on a loaded machine.
t.setTimeout(300_000)

const PAIR = '/token#client+source:rejected'
const SOURCE_FAILURES = '/token#source:rejected'
const CLIENT = '/token#client'
const CEILING = '/token#source'

const GUESSER = '203.0.113.9'
const CLIENT_HOME = '198.51.100.7'

interface Clock { t: number }

/** The recommended token endpoint on a clock of the test's own, with `options` for the plugin. */
async function tokenApp (t: TapTest, options: Record<string, unknown>): Promise<{ app: FastifyInstance, clock: Clock }> {
  const clock = { t: 0 }
  const app = await recommendedTokenApp(t, { now: () => clock.t, ...options })
  return { app, clock }
}

const isClient = isVictim

function post (app: FastifyInstance, address: string, id: string, secret: string) {
  return app.inject({ method: 'POST', url: '/token', remoteAddress: address, ...form(['client_id', id], ['client_secret', secret]) })
}

/** The n-th of 200 sources: 100 IPv4 addresses and 100 IPv6 /64s of one /48. */
const source = (n: number): string => n < 100 ? `192.0.2.${n}` : `2001:db8:1:${(n - 100).toString(16)}::1`

/** 20,000 made-up ids with wrong secrets, one request a millisecond, from 200 sources in turn; the statuses counted. */
async function flood (app: FastifyInstance, clock: Clock): Promise<Record<number, number>> {
  const statuses: Record<number, number> = {}
  for (let i = 0; i < 20_000; i++) {
    clock.t++
    const { statusCode } = await post(app, source(i % 200), `made-up-${i}`, 'guess')
    statuses[statusCode] = (statuses[statusCode] ?? 0) + 1
  }
  return statuses
}

const rows = (app: FastifyInstance, name: string): number => app.pace.get(name)?.size ?? 0

t.test('20,000 made-up ids with wrong secrets from 200 sources leave rows in proportion to the sources, not the ids', async t => {
  const { app, clock } = await tokenApp(t, { isClient })
  t.same(await flood(app, clock), { 401: 20_000 }, 'each source within its 100 failures a day')
  t.equal(rows(app, PAIR), 0, 'no pair row for a made-up id')
  t.equal(rows(app, CLIENT), 0, 'no client row for a made-up id')
  t.equal(rows(app, SOURCE_FAILURES), 200, 'one failure-budget row per source')
  t.ok(rows(app, CEILING) <= 200, `at most one ceiling row per source: ${rows(app, CEILING)}`)
  const next = await post(app, source(0), 'made-up-next', 'guess')
  t.equal(next.statusCode, 429, 'the 101st made-up id from one source is refused by its source\'s budget')
  t.match(next.json(), { error_description: /\/token#source:rejected pace/ })
})

t.test('without isClient, the same flood leaves a pair row per made-up id', async t => {
  const { app, clock } = await tokenApp(t, {})
  t.same(await flood(app, clock), { 401: 20_000 })
  t.equal(rows(app, PAIR), 20_000, 'a row per made-up id: what isClient saves')
})

t.test('a real client\'s exchanges and its guessers\' bound (5 an hour per pair) are unchanged', async t => {
  const { app, clock } = await tokenApp(t, { isClient })
  const guesses: number[] = []
  for (let i = 0; i < 7; i++) guesses.push((await post(app, GUESSER, 'victim', `guess-${i}`)).statusCode)
  t.same(guesses, [401, 401, 401, 401, 401, 429, 429], 'a guesser naming a real client spends its pair: 5, then refused')
  t.match((await post(app, GUESSER, 'victim', 'guess')).json(), { error_description: /\/token#client\+source:rejected pace; retry after 720 seconds/ })
  t.equal(rows(app, PAIR), 1)
  const exchanges: number[] = []
  for (let i = 0; i < 6; i++) exchanges.push((await post(app, CLIENT_HOME, 'victim', 'right-secret')).statusCode)
  t.same(exchanges, [200, 200, 200, 200, 200, 429], 'the real client keeps its 5 a second')
  clock.t += 200
  t.equal((await post(app, CLIENT_HOME, 'victim', 'right-secret')).statusCode, 200, 'and one more 200 ms later')
})

t.test('isClient is asked with the declared id and the request, for the paces keyed by the client id only', async t => {
  const asked: Array<[string, string]> = []
  const { app } = await tokenApp(t, {
    isClient: (id: string, request: FastifyRequest) => {
      asked.push([id, request.ip])
      return isVictim(id)
    }
  })
  await post(app, GUESSER, 'victim', 'guess')
  t.same(asked, [['victim', GUESSER], ['victim', GUESSER]], 'once for the pair, once for the client pace')
  asked.length = 0
  await app.inject({ method: 'POST', url: '/token', remoteAddress: GUESSER, ...form(['client_secret', 'guess']) })
  t.same(asked, [], 'not asked when the request declares no id')
})

t.test('isClient that throws, answers a Promise or anything but a boolean fails the request with a 500', async t => {
  for (const [answer, message] of [
    [() => { throw new Error('registry down') }, 'registry down'],
    [async () => true, 'exchangepace: isClient returned a Promise (it must answer at once: keep what it reads of the registry in memory); it must return a boolean'],
    [() => 'yes', 'exchangepace: isClient returned a string; it must return a boolean'],
    [() => null, 'exchangepace: isClient returned null; it must return a boolean'],
    [() => ({}), 'exchangepace: isClient returned an object; it must return a boolean']
  ] as Array<[() => unknown, string]>) {
    const { app } = await tokenApp(t, { isClient: answer })
    const response = await post(app, GUESSER, 'victim', 'guess')
    t.equal(response.statusCode, 500)
    t.equal(response.json().message, message)
    t.equal(rows(app, SOURCE_FAILURES), 0, 'the preHandler\'s units went back')
  }
})

t.test('isClient is checked at registration', async t => {
  for (const isClient of ['yes', 1, null]) {
    await t.rejects(build(t, { isClient }, () => {}), new TypeError(`exchangepace: isClient must be a function (clientId, request) => boolean, got ${typeof isClient}`))
  }
})
