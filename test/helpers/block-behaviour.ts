import type { FastifyInstance } from 'fastify'
import { setTimeout as sleep } from 'node:timers/promises'
import { RedisStore, type RedisClientLike, type RedisUnavailable } from '../../lib/index.js'
import { main } from '../../lib/operator/cli.js'
import { redisPaceName } from '../../lib/redis/scripts.js'
import { uniquePrefix } from './redis.js'
import { build, form, type TapTest } from './shared-behaviour.js'

/**
 * What the operator's API and the CLI say of a block, tried as an operator would, on a Redis (or a
 * cluster) the runner started for its file: replicas each with a client of their own (ioredis's
 * default options, auto-pipelining on) and a store with `timeoutMs: 50`; blocks set through
 * `fastify.pace.block` on one replica and with `exchangepace block`; then every server stopped
 * (SIGSTOP) for an outage. The replicas' memories run on a clock of the test's, so that a block of
 * an hour passes without waiting; Redis keeps its own.
 *
 * Not a test file itself (tap runs test/**\/*.test.ts only).
 */

export interface BlockSetup {
  /** A new client of the servers, with ioredis's default options and auto-pipelining, closed when `t` ends. */
  readonly client: (t: TapTest) => RedisClientLike & { quit: () => Promise<unknown> }
  /** What the CLI takes to reach them: `--redis URL`, and `--cluster` for a cluster. */
  readonly cli: readonly string[]
  /** Stops every server (SIGSTOP) until the function it resolves to is called. */
  readonly pause: () => Promise<() => void>
  /** Runs `command` as the administrator (on a cluster, on the master of its key). */
  readonly call: (...command: string[]) => Promise<unknown>
}

const PACE = '/token'
const HOUR = 3600

interface Replica {
  readonly app: FastifyInstance
  readonly store: RedisStore
  readonly log: Array<Record<string, unknown>>
}

/** A client's exchange: its status and Retry-After. */
async function exchange (app: FastifyInstance, id: string): Promise<{ status: number, retryAfter: string | undefined }> {
  const response = await app.inject({ method: 'POST', url: PACE, ...form(['client_id', id], ['client_secret', 'secret']) })
  return { status: response.statusCode, retryAfter: response.headers['retry-after'] as string | undefined }
}

/** `prefix` makes each test's store prefix (default: a unique one under the tests' own). */
export function blockBehaviour (t: TapTest, setup: BlockSetup, makePrefix: (label: string) => string = uniquePrefix): void {
  let clock = 1_000_000
  const advance = (ms: number): void => { clock += ms }

  async function replica (t: TapTest, prefix: string, whenUnavailable: RedisUnavailable = 'fallback', deaf = false): Promise<Replica> {
    const log: Array<Record<string, unknown>> = []
    const real = setup.client(t)
    // A replica that hears no announcement: its client cannot make the connection to hear them on.
    const client = deaf ? new Proxy(real, { get: (target, name) => name === 'duplicate' ? undefined : Reflect.get(target, name) }) : real
    const store = new RedisStore({ client, prefix, timeoutMs: 50, whenUnavailable })
    const app = await build(t, { store, now: () => clock }, app => {
      app.post(PACE, { config: { pace: { perSecond: 5, key: 'client', spend: 'every' } } }, async () => ({ access_token: 'token', token_type: 'Bearer' }))
    }, { logger: { level: 'info', stream: { write: (line: string) => { log.push(JSON.parse(line)) } } } })
    return { app, store, log }
  }

  async function cli (prefix: string, ...argv: string[]): Promise<string> {
    let stdout = ''
    let stderr = ''
    const code = await main([...argv, '--pace', PACE, '--prefix', prefix, ...setup.cli], {
      stdout: { write: (text: string) => { stdout += text } },
      stderr: { write: (text: string) => { stderr += text } },
      env: {}
    })
    if (code !== 0) throw new Error(`exchangepace ${argv.join(' ')}: exit ${code}: ${stderr}`)
    return stdout
  }

  /** Ms left of `id`'s block in `replica`'s memory (0: none). */
  const heldMs = (replica: Replica, id: string): number => replica.app.pace.get(PACE)?.inspect(id).blockedMs ?? 0

  /** Waits until `holds` is true of every replica, at most 5 s: the news travels, it is not awaited by the operator. */
  async function until (replicas: readonly Replica[], holds: (replica: Replica) => boolean): Promise<boolean> {
    for (let waited = 0; waited < 5000; waited += 10) {
      if (replicas.every(holds)) return true
      await sleep(10)
    }
    return false
  }

  /** Each replica's answer to `id`, in order. */
  async function answers (replicas: readonly Replica[], id: string): Promise<Array<{ status: number, retryAfter: string | undefined }>> {
    const seen = []
    for (const { app } of replicas) seen.push(await exchange(app, id))
    return seen
  }

  t.test('a block set through the API on one replica, or with the CLI, holds on every replica through an outage longer than it, and ends on time', async t => {
    const prefix = makePrefix('blocks')
    const [a, b, c] = [await replica(t, prefix), await replica(t, prefix), await replica(t, prefix)]
    t.equal((await exchange(a.app, 'victim')).status, 200, 'only replica a ever served the clients')
    t.equal((await exchange(a.app, 'leaked')).status, 200)
    const until1 = await a.app.pace.block(PACE, { client: 'victim' }, HOUR)
    t.match(await cli(prefix, 'block', '--client', 'leaked', '--seconds', String(HOUR)), /every replica refuses it until then, also while Redis does not answer/)
    t.ok(await until([a, b, c], r => heldMs(r, 'victim') > 0 && heldMs(r, 'leaked') > 0), 'every replica heard of both blocks')
    const late = await replica(t, prefix)
    t.ok(await until([late], r => heldMs(r, 'victim') > 0 && heldMs(r, 'leaked') > 0), 'a replica started after them (while Redis answers) reads them when it starts')
    const replicas = [a, b, c, late]
    const resume = await setup.pause()
    try {
      for (const id of ['victim', 'leaked']) {
        const seen = await answers(replicas, id)
        t.same(seen.map(({ status }) => status), [429, 429, 429, 429], `${id}: refused on every replica while Redis does not answer`)
        t.ok(seen.every(({ retryAfter }) => Number(retryAfter) > HOUR - 60), 'until the block\'s end')
      }
      t.same((await answers(replicas, 'bystander')).map(({ status }) => status), [200, 200, 200, 200], 'another client is paced in memory, and admitted')
      advance(HOUR * 1000 - 1500)
      for (const id of ['victim', 'leaked']) {
        const seen = await answers(replicas, id)
        t.same(seen.map(({ status }) => status), [429, 429, 429, 429], `${id}: refused still, an hour on`)
        // 1.5 s left (less for a replica that read the block rather than heard it: the time the read took).
        t.ok(seen.every(({ retryAfter }) => Number(retryAfter) <= 2), 'until the block\'s end')
      }
      advance(1500)
      for (const id of ['victim', 'leaked']) {
        t.same((await answers(replicas, id)).map(({ status }) => status), [200, 200, 200, 200], `${id}: admitted once the block is over, Redis still silent`)
      }
    } finally {
      resume()
    }
    t.ok(until1.getTime() > Date.now(), 'Redis\'s block runs on Redis\'s clock, which did not move an hour')
    for (const { log } of replicas) {
      const warnings = log.filter(line => (line.level as number) >= 40).map(line => String(line.msg))
      t.ok(warnings.length > 0 && warnings.every(msg => /^exchangepace: Redis (store|master \S+) unavailable \(no answer within 50 ms\)/.test(msg)), 'the outage is warned of, and nothing else')
    }
  })

  t.test('a reset made while Redis answers lifts the block in every replica\'s memory, through the API or the CLI', async t => {
    const prefix = makePrefix('resets')
    const replicas = [await replica(t, prefix), await replica(t, prefix), await replica(t, prefix)]
    const [a, b] = replicas
    await a.app.pace.block(PACE, { client: 'victim' }, HOUR)
    await cli(prefix, 'block', '--client', 'leaked', '--seconds', String(HOUR))
    t.ok(await until(replicas, r => heldMs(r, 'victim') > 0 && heldMs(r, 'leaked') > 0), 'every replica heard of both blocks')
    await b.app.pace.reset(PACE, { client: 'victim' })
    t.match(await cli(prefix, 'reset', '--client', 'leaked'), /every replica follows at once/)
    t.ok(await until(replicas, r => heldMs(r, 'victim') === 0 && heldMs(r, 'leaked') === 0), 'every replica heard of both resets')
    const resume = await setup.pause()
    try {
      for (const id of ['victim', 'leaked']) {
        t.same((await answers(replicas, id)).map(({ status }) => status), [200, 200, 200], `${id}: admitted on every replica, Redis silent`)
      }
    } finally {
      resume()
    }
  })

  t.test('a replica that missed a reset follows Redis at its next request while Redis answers, and its memory with it', async t => {
    const prefix = makePrefix('follows')
    const deaf = await replica(t, prefix, 'fallback', true)
    await deaf.app.pace.block(PACE, { client: 'victim' }, HOUR)
    t.ok(heldMs(deaf, 'victim') > 0, 'the replica that blocked holds it')
    await cli(prefix, 'reset', '--client', 'victim')
    t.ok(heldMs(deaf, 'victim') > 0, 'and did not hear of the reset')
    t.equal((await exchange(deaf.app, 'victim')).status, 200, 'its memory refuses for longer than a second, so it asks Redis, which grants')
    t.equal(heldMs(deaf, 'victim'), 0, 'its memory followed')
    const resume = await setup.pause()
    try {
      t.equal((await exchange(deaf.app, 'victim')).status, 200, 'admitted while Redis is silent')
    } finally {
      resume()
    }
  })

  t.test('a block whose announcement a replica missed is read from the index within a second', async t => {
    const prefix = makePrefix('missed')
    const replicas = [await replica(t, prefix), await replica(t, prefix)]
    // Blocks' entries in the index, without their messages: the first is read when the replicas
    // start (or later), so once they hold it, the second can only come from a later read.
    const index = `${prefix}blocks`
    const enter = async (id: string): Promise<void> => {
      const end = Number((await setup.call('TIME') as string[])[0]) * 1000 + 60_000
      await setup.call('ZADD', index, String(end), `${redisPaceName(PACE)}:${id}`)
      await setup.call('PEXPIRE', index, '60000')
    }
    await enter('first')
    t.ok(await until(replicas, r => heldMs(r, 'first') > 0), 'both replicas hold the first')
    await enter('victim')
    t.ok(await until(replicas, r => heldMs(r, 'victim') > 0), 'and the second, read again')
  })

  t.test('with whenUnavailable \'open\' or \'closed\', a block heard of holds while Redis does not answer', async t => {
    const prefix = makePrefix('modes')
    const open = await replica(t, prefix, 'open')
    const closed = await replica(t, prefix, 'closed')
    await open.app.pace.block(PACE, { client: 'victim' }, 60)
    t.ok(await until([open, closed], r => r.store._blockedMs(`${prefix}${redisPaceName(PACE)}:victim`) > 0), 'both heard of it')
    const resume = await setup.pause()
    try {
      const [refusedOpen, refusedClosed] = await answers([open, closed], 'victim')
      t.equal(refusedOpen.status, 429, '\'open\' refuses the blocked client')
      t.ok(Number(refusedOpen.retryAfter) >= 59, 'until the block\'s end')
      t.equal(refusedClosed.status, 429)
      t.ok(Number(refusedClosed.retryAfter) >= 59, '\'closed\' says when the block ends, not retryMs')
      t.same((await answers([open, closed], 'bystander')).map(({ status }) => status), [200, 429], 'another client: the mode\'s answer')
    } finally {
      resume()
    }
  })
}
