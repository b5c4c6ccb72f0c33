import type { FastifyInstance } from 'fastify'
import type { PaceRouteOptions } from '../../lib/index.js'
import { PACES } from '../../examples/endpoint-paces.js'
import { build, type TapTest } from './shared-behaviour.js'
import { secretPost } from './token-endpoint.js'

/** The README's recommended token paces, with the per-source failure budget. */
export const RECOMMENDED_TOKEN: PaceRouteOptions[] = [
  { limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' },
  { limit: 100, window: 86400, key: 'source', spend: 'rejected' },
  { perSecond: 5, key: 'client', spend: 'accepted' },
  { perSecond: 50, key: 'source', spend: 'every' }
]

/** The one registered client of the made-up-ids tests, and its secret. */
const SECRETS = new Map([['victim', 'right-secret']])

/** Whether `id` names the registered client: the tests' `isClient`. */
export const isVictim = (id: string): boolean => SECRETS.has(id)

/**
 * A token endpoint (client_secret_post) paced by RECOMMENDED_TOKEN, with `options` for the plugin:
 * a wrong secret, or an id no client has, is a 401 whose outcome is rejected.
 */
export async function recommendedTokenApp (t: TapTest, options: Record<string, unknown>): Promise<FastifyInstance> {
  return await build(t, options, app => {
    app.post('/token', { config: { pace: RECOMMENDED_TOKEN } }, secretPost(SECRETS))
  })
}

/**
 * Made-up client ids at the token endpoint of examples/oidc-provider.js and examples/gateway.js
 * (the paces of examples/endpoint-paces.js), whatever carries the requests: real HTTP or inject.
 * `send(clientId, from)` asks for a token naming `clientId` with a wrong secret from the address
 * `from`, and resolves with the answer's status, `Retry-After` and body.
 */
export type SendGuess = (clientId: string, from: string) => Promise<{ status: number, retryAfter: number, body: string }>

/** The rows of every pace `app` declares, by name. */
export function rowsByPace (app: FastifyInstance): Record<string, number> {
  return Object.fromEntries(app.pace.names().map(name => [name, app.pace.get(name)!.size]))
}

/** The per-source failure budget of examples/endpoint-paces.js: failures per address, whatever id they name. */
const SOURCE_FAILURES = PACES.token.find(pace => pace.name === 'source-failures') as { limit: number, window: number }

/**
 * `perSource` made-up ids with wrong secrets from each of `sources`, on a fresh server at one
 * instant: each answered 401 by the upstream, and the rows of every pace after. With `isClient`,
 * no pace keyed by the client id (the client pace `token`, the pair's failure budget `failures`)
 * holds a row: only the sources' rows in the per-source failure budget and the ceiling; without
 * it, the pair's budget holds a row per (made-up id, address) besides.
 */
export async function floodOfMadeUpIds (t: TapTest, app: FastifyInstance, send: SendGuess, { sources, perSource, isClient }: { sources: string[], perSource: number, isClient: boolean }): Promise<void> {
  const statuses: Record<number, number> = {}
  for (let i = 0; i < perSource; i++) {
    for (const [n, from] of sources.entries()) {
      const { status } = await send(`made-up-${i}-${n}`, from)
      statuses[status] = (statuses[status] ?? 0) + 1
    }
  }
  t.same(statuses, { 401: sources.length * perSource }, 'every made-up id reached the upstream, answered 401')
  const expected = Object.fromEntries(app.pace.names().map(name => [name, 0]))
  t.same(rowsByPace(app), {
    ...expected,
    'source-failures': sources.length,
    ceiling: sources.length,
    failures: isClient ? 0 : sources.length * perSource
  }, isClient
    ? 'with isClient: no row in any pace keyed by the client id, a row per address in the per-source failure budget and the ceiling'
    : 'without isClient: a pair row per (made-up id, address) besides')
}

/**
 * The per-source failure budget refuses an address after its 100 failures of a day, whatever ids
 * they name: made-up ids from `from`, `advance(ms)` moving the server's injected clock a second on
 * every 40 (under the ceiling of 50 a second), then the 101st refused before it reaches the
 * upstream, with a wait of about a unit's refill (864 s).
 */
export async function spendSourceBudget (t: TapTest, send: SendGuess, advance: (ms: number) => void, from: string): Promise<void> {
  let answered = 0
  for (let i = 0; i < SOURCE_FAILURES.limit; i++) {
    if (i % 40 === 0) advance(1000)
    if ((await send(`made-up-${i}`, from)).status === 401) answered++
  }
  t.equal(answered, SOURCE_FAILURES.limit, `${SOURCE_FAILURES.limit} failures from one address, each answered 401`)
  const refused = await send('made-up-one-more', from)
  t.equal(refused.status, 429, 'the next is refused, whatever id it names')
  t.match(refused.body, /source-failures/, 'by the per-source failure budget')
  const unitSeconds = SOURCE_FAILURES.window / SOURCE_FAILURES.limit
  t.ok(refused.retryAfter > unitSeconds - 10 && refused.retryAfter <= unitSeconds, `until a unit is back: ${refused.retryAfter} s`)
}
