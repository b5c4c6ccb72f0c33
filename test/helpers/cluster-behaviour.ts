import type { FastifyInstance } from 'fastify'
import type { Cluster } from 'ioredis'
import { setTimeout as sleep } from 'node:timers/promises'
import { RedisStore } from '../../lib/index.js'
import type { TestCluster } from './cluster.js'
import { uniquePrefix } from './redis.js'
import { EXCHANGES_NAME, FAILURES_NAME, exchange as operatorExchange, tokenReplica } from './operator-behaviour.js'
import { build, form, sharedBehaviour, type TapTest } from './shared-behaviour.js'

/**
 * The shared-store behaviours on a RedisStore over a three-master cluster, through an ioredis
 * `Cluster` client: the store-independent suite, replicas sharing one pace, keys spread over the
 * masters, strangers leaving no key on any, and a master that stops answering. A runner
 * (test/redis/cluster.test.ts, test/redis/valkey.test.ts) starts the cluster once for its file.
 *
 * Not a test file itself (tap runs test/**\/*.test.ts only).
 */

/** A Cluster client as the tests use it: errors recorded (ioredis would print an unhandled one). */
function clusterClient (cluster: TestCluster, errors: Error[] = []): Cluster {
  const client = cluster.client({ enableAutoPipelining: true, redisOptions: { maxRetriesPerRequest: 1 } })
  client.on('error', (err: Error) => { errors.push(err) })
  return client
}

/** The keys under `pattern` on each master of `cluster`, in the order of `cluster.masters`. */
async function keysPerMaster (client: Cluster, cluster: TestCluster, pattern: string): Promise<string[][]> {
  // Refunds are sent from onResponse without waiting, and ioredis writes auto-pipelined commands on
  // the next turn of the loop: after that turn, a KEYS on a master's connection comes after them.
  await new Promise(resolve => setImmediate(resolve))
  const nodes = new Map(client.nodes('master').map(node => [node.options.port, node]))
  return await Promise.all(cluster.masters.map(({ port }) => nodes.get(port)!.keys(pattern)))
}

/**
 * The refunds `client` is asked to send from now on, to wait for their answers: a refund leaves
 * onResponse without waiting, and how many turns of the loop it takes to be written varies with
 * the Node version.
 */
function watchRefunds (t: TapTest, client: Cluster): Array<Promise<unknown>> {
  const sent: Array<Promise<unknown>> = []
  type Refund = (this: unknown, ...args: unknown[]) => Promise<unknown>
  const commands = client as unknown as { exchangepaceRefund: Refund }
  const refund = commands.exchangepaceRefund
  // ioredis copies the client's commands onto each (auto-)pipeline it makes, this one included:
  // called on a pipeline, it is ioredis's own call, not the store's.
  commands.exchangepaceRefund = function (...args) {
    const answer = refund.apply(this, args)
    if (this === client) sent.push(answer)
    return answer
  }
  t.teardown(() => { commands.exchangepaceRefund = refund })
  return sent
}

const SECRET = 'cluster-secret'

/** A replica's token endpoint: 2 exchanges per second per declared client, client_secret_post. */
async function tokenServer (t: TapTest, store: RedisStore, log: Array<Record<string, unknown>> = []): Promise<FastifyInstance> {
  return await build(t, { store }, app => {
    app.post('/token', { config: { pace: { perSecond: 2, key: 'client', spend: 'accepted' } } }, async (request, reply) => {
      if ((request.body as Record<string, string>).client_secret !== SECRET) {
        request.pace.outcome = 'rejected'
        return reply.code(401).send({ error: 'invalid_client' })
      }
      return { access_token: 'token', token_type: 'Bearer' }
    })
  }, { logger: { level: 'info', stream: { write: (line: string) => { log.push(JSON.parse(line)) } } } })
}

async function exchange (app: FastifyInstance, id: string, secret = SECRET): Promise<number> {
  return (await app.inject({ method: 'POST', url: '/token', ...form(['client_id', id], ['client_secret', secret]) })).statusCode
}

/** How many of `statuses` equal `status`. */
function count (statuses: readonly number[], status: number): number {
  return statuses.filter(s => s === status).length
}

export function clusterBehaviour (t: TapTest, cluster: TestCluster): void {
  const errors: Error[] = []
  const client = clusterClient(cluster, errors)

  t.test('the store-independent behaviours, through a Cluster client', async t => {
    let prefix = ''
    const store = (): Record<string, unknown> => {
      prefix = uniquePrefix('cluster')
      return { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }
    }
    const rows = async (_app: unknown, name: string): Promise<number> =>
      (await keysPerMaster(client, cluster, `${prefix}${name}:*`)).flat().length
    sharedBehaviour(t, store, rows, 2000)
  })

  t.test('two replicas, each with its own Cluster client, admit each client the declared rate in total, its keys spread over the masters', async t => {
    const prefix = uniquePrefix('cluster-replicas')
    const replicas = await Promise.all([0, 1].map(() => tokenServer(t, new RedisStore({ client: clusterClient(cluster, errors), prefix, timeoutMs: 1000 }))))
    const ids = Array.from({ length: 30 }, (_, i) => `client-${i}`)
    // Four requests per client, two on each replica, all at once: 2/s holds in total, not per replica.
    const statuses = await Promise.all(ids.flatMap(id => [0, 1, 0, 1].map(replica => exchange(replicas[replica], id))))
    for (const [i, id] of ids.entries()) {
      t.same(statuses.slice(4 * i, 4 * i + 4).sort(), [200, 200, 429, 429], `${id}: two granted of four`)
    }
    const keys = await keysPerMaster(client, cluster, `${prefix}/token:*`)
    t.equal(keys.flat().length, 30, 'one key per client')
    const holding = keys.filter(onMaster => onMaster.length > 0).length
    t.ok(holding > 1, `keys on ${holding} of 3 masters (${keys.map(onMaster => onMaster.length).join(', ')})`)
    for (const id of ids) {
      const key = `${prefix}/token:${id}`
      const master = await cluster.masterOf(key)
      t.ok(keys[cluster.masters.indexOf(master)].includes(key), `${id}: on the master of its slot`)
    }
  })

  t.test('strangers naming ids on every master leave no key on any, and their refunds reach the right master', async t => {
    const prefix = uniquePrefix('cluster-strangers')
    const app = await tokenServer(t, new RedisStore({ client, prefix, timeoutMs: 1000 }))
    const ids = Array.from({ length: 60 }, (_, i) => `named-${i}`)
    const masters = new Set(await Promise.all(ids.map(id => cluster.masterOf(`${prefix}/token:${id}`))))
    t.equal(masters.size, 3, 'the ids named fall on all three masters')
    const refunds = watchRefunds(t, client)
    const statuses = await Promise.all(ids.map(id => exchange(app, id, 'guess')))
    t.equal(count(statuses, 401), 60, 'every stranger reached client authentication and failed it')
    t.equal(refunds.length, 60, 'each sent its refund')
    await Promise.allSettled(refunds)
    t.same((await keysPerMaster(client, cluster, `${prefix}*`)).map(keys => keys.filter(key => key !== `${prefix}catalog`)), [[], [], []], 'every refunded bucket was full again: no key on any master but the catalog of paces')
    t.same(await Promise.all(ids.slice(0, 3).map(id => exchange(app, id))), [200, 200, 200], 'the named clients keep their pace')
  })

  t.test('an operator\'s reset and block on one replica reach the other, on whichever master holds the key', async t => {
    const prefix = uniquePrefix('cluster-operator')
    const [a, b] = await Promise.all([0, 1].map(() => tokenReplica(t, { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) })))
    const home = '198.51.100.7'
    for (let i = 0; i < 5; i++) t.equal((await operatorExchange(b, false)).status, 401)
    const locked = await operatorExchange(b, true)
    t.equal(locked.status, 429)
    t.ok(Number(locked.retryAfter) > 700 && Number(locked.retryAfter) <= 720, `locked out for 12 minutes: Retry-After ${String(locked.retryAfter)}`)
    t.match(await a.pace.inspect(FAILURES_NAME, { client: 'victim', source: home }), { remaining: 0, blockedUntil: null })
    await a.pace.reset(FAILURES_NAME, { client: 'victim', source: home })
    t.equal((await operatorExchange(b, true)).status, 200, 'reset on one replica, and the next request on the other gets its token')
    const until = await a.pace.block(EXCHANGES_NAME, { client: 'victim' }, 60)
    const blocked = await operatorExchange(b, true)
    t.equal(blocked.status, 429)
    t.ok(Number(blocked.retryAfter) >= 59 && Number(blocked.retryAfter) <= 60, `Retry-After ${String(blocked.retryAfter)} reaches the block's end`)
    t.equal((await a.pace.inspect(EXCHANGES_NAME, { client: 'victim' })).blockedUntil?.getTime(), until.getTime())
    await b.pace.reset(EXCHANGES_NAME, { client: 'victim' })
    t.equal((await operatorExchange(a, true)).status, 200, 'a reset lifts the block')
  })

  t.test('a master that stops answering: its keys are paced per replica without a 5xx, with one warning, and the store is shared again once it answers', async t => {
    const prefix = uniquePrefix('cluster-paused')
    const log: Array<Record<string, unknown>> = []
    const store = new RedisStore({ client, prefix, timeoutMs: 200, retryMs: 100 })
    const app = await tokenServer(t, store, log)
    const stopped = await cluster.masterOf(`${prefix}/token:frozen`)
    t.teardown(stopped.resume)
    t.equal(await exchange(app, 'frozen'), 200, 'granted in Redis before the stop')

    stopped.pause()
    const during: number[] = []
    for (let i = 0; i < 6; i++) during.push(await exchange(app, 'frozen'))
    for (let i = 0; i < 4; i++) during.push(await exchange(app, 'stranger-on-frozen', 'guess'))
    t.same(during.filter(status => status >= 500), [], 'no request failed because of the store')
    t.same(during.slice(0, 6), [200, 429, 429, 429, 429, 429], 'paced in memory: the unit spent before the stop is held there too')
    t.ok(store.unavailable, 'the store counts Redis as unavailable')
    const warnings = log.filter(line => line.level === 40)
    t.equal(warnings.length, 1, 'one warning for the outage')
    t.equal(warnings[0]?.msg, `exchangepace: Redis master 127.0.0.1:${stopped.port} unavailable (no answer within 200 ms); pacing its keys per replica in memory until it answers again`)

    stopped.resume()
    await sleep(1100) // the frozen client's unit refills, in memory and in Redis
    t.same([await exchange(app, 'frozen'), await exchange(app, 'frozen')], [200, 200], 'a retry for its keys is answered')
    t.notOk(store.unavailable, 'the store is shared again')
    t.ok(log.some(line => line.level === 30 && /answers again/.test(String(line.msg))), 'and says so once')
    t.equal(log.filter(line => line.level === 40).length, 1, 'no further warning')
  })

  t.test('a master paused under traffic for all three: no 5xx, each client paced per replica, and one outage, of the paused master alone', async t => {
    const prefix = uniquePrefix('cluster-mixed')
    const log: Array<Record<string, unknown>> = []
    const store = new RedisStore({ client, prefix, timeoutMs: 100, retryMs: 150 })
    const app = await tokenServer(t, store, log)
    const ids = Array.from({ length: 12 }, (_, i) => `mixed-${i}`)
    const owners = await Promise.all(ids.map(id => cluster.masterOf(`${prefix}/token:${id}`)))
    const stopped = owners[0]
    t.ok(owners.some(owner => owner !== stopped), 'some clients live on the masters that keep answering')
    t.teardown(stopped.resume)

    stopped.pause()
    const started = performance.now()
    const granted = new Map(ids.map(id => [id, 0]))
    const statuses: number[] = []
    // Six rounds 200 ms apart: long enough for retries, which the clients on the other masters answer.
    for (let round = 0; round < 6; round++) {
      if (round > 0) await sleep(200)
      // Each round starts with another client, so that some retries go to the masters that answer.
      for (const id of [...ids.slice(round), ...ids.slice(0, round)]) {
        const status = await exchange(app, id)
        statuses.push(status)
        if (status === 200) granted.set(id, granted.get(id)! + 1)
      }
    }
    const elapsedMs = performance.now() - started
    stopped.resume()
    t.same(statuses.filter(status => status >= 500), [], 'no request failed because of the store')
    // The fallback always holds what this replica granted, so switching never adds to a client's second.
    const bound = Math.floor(2 * (1 + elapsedMs / 1000))
    for (const [id, units] of granted) t.ok(units >= 1 && units <= bound, `${id}: ${units} granted, at most ${bound} in ${Math.round(elapsedMs)} ms`)
    // The other masters' answers end nothing of the paused master's outage, which its retries
    // (every retryMs) do not end either while it is paused: one warning, naming it.
    const warnings = log.filter(line => line.level === 40)
    t.same(warnings.map(line => line.master), [`127.0.0.1:${stopped.port}`], `one warning in ${Math.round(elapsedMs)} ms, for the paused master`)
    t.ok(store.unavailable, 'still out when it resumes')
  })

  t.test('the Cluster clients reported no error through all of it', async t => {
    t.same(errors, [])
  })
}
