import t from 'tap'
import { RedisStore } from '../../lib/index.js'
import { redisPaceName } from '../../lib/redis/scripts.js'
import { operatorBehaviour, type OperatorSetup } from '../helpers/operator-behaviour.js'
import { warningBehaviour } from '../helpers/warning-behaviour.js'
import { ClockedClient, redisOrSkip, uniquePrefix } from '../helpers/redis.js'

// The operator's API, and what the operator hears of the paces' decisions, on a RedisStore: two
// replicas, each with a store of its own on one Redis server, so that an action on one reaches the
// other only through Redis. The scripts and the replicas' memories run on one clock of the test's
// (test/helpers/redis.ts, ClockedClient).

const client = await redisOrSkip()
if (client !== null) {
  let clock = 1_000_000
  const prefix = uniquePrefix('operator')
  const clocked = new ClockedClient(client, () => clock * 1000)
  t.teardown(async () => {
    const keys = await client.keys(`${prefix}*`)
    if (keys.length > 0) await client.del(...keys)
  })
  const setup: OperatorSetup = {
    options: scope => ({ now: () => clock, store: new RedisStore({ client: clocked, prefix: `${prefix}${scope}:`, timeoutMs: 1000 }) }),
    advance: ms => { clock += ms },
    shared: true,
    hasRow: async (scope, _app, name, key) => await client.exists(`${prefix}${scope}:${redisPaceName(name)}:${key}`) === 1
  }
  operatorBehaviour(t, setup)
  warningBehaviour(t, setup)

  t.test('list on Redis matches the pace\'s own keys only, whatever characters its name holds', async t => {
    const { default: Fastify } = await import('fastify')
    const { exchangePace } = await import('../../lib/index.js')
    const app = Fastify()
    t.teardown(() => app.close())
    // A connection of its own: the file's client runs the scripts on the test's clock.
    const own = client.duplicate()
    t.teardown(() => own.quit())
    await app.register(exchangePace, { store: new RedisStore({ client: own, prefix: `${prefix}glob:`, timeoutMs: 1000 }) })
    for (const name of ['a*', 'ab', 'a[b]', 'a\\b', 'a?']) app.post(`/${encodeURIComponent(name)}`, { config: { pace: { perSecond: 5, key: 'client', spend: 'every', name } } }, async () => 'ok')
    await app.ready()
    for (const name of ['a*', 'ab', 'a[b]', 'a\\b', 'a?']) await app.pace.block(name, { client: name }, 60)
    for (const name of ['a*', 'ab', 'a[b]', 'a\\b', 'a?']) t.same((await app.pace.list(name)).map(entry => entry.who.client), [name], name)
  })
}
