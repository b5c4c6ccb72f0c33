import t from 'tap'
import { RedisStore } from '../../lib/index.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { sharedBehaviour } from '../helpers/shared-behaviour.js'

// The store-independent behaviours again, on a RedisStore over a real Redis: one suite, two stores.
// Rows are the keys Redis holds for the pace. Each test builds one app, so the rows of a test are
// those under the prefix of the store it was built with last.

const client = await redisOrSkip()
if (client !== null) {
  let prefix = ''
  const store = (): Record<string, unknown> => {
    prefix = uniquePrefix('shared')
    return { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }
  }
  const redisRows = async (_app: unknown, name: string): Promise<number> => {
    // Refunds are sent from onResponse without waiting; commands on one connection run in order,
    // so once the hooks of the last response have run, a KEYS issued now sees their effect.
    await new Promise(resolve => setImmediate(resolve))
    return (await client.keys(`${prefix}${name}:*`)).length
  }
  t.test('RedisStore', async t => {
    sharedBehaviour(t, store, redisRows)
  })
}
