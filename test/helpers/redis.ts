import t from 'tap'
import { EventEmitter } from 'node:events'
import { Redis } from 'ioredis'

/**
 * A client of the Redis server the tests use (REDIS_URL, default 127.0.0.1:6379), quit when the
 * test file ends; or null when none answers, with the file's tests skipped and the reason given.
 * Under CI a missing Redis fails the run: .ci/run makes sure one answers.
 */
export async function redisOrSkip (): Promise<Redis | null> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const client = new Redis(url, { lazyConnect: true, enableAutoPipelining: true, maxRetriesPerRequest: 1, connectTimeout: 1000, retryStrategy: () => null })
  // Without a listener, ioredis prints a refused connection as "[ioredis] Unhandled error event".
  // The error is the reason to give: connect() itself rejects with "Connection is closed."
  const errors: Error[] = []
  const onError = (err: Error): void => { errors.push(err) }
  client.on('error', onError)
  try {
    await client.connect()
    await client.ping()
    client.off('error', onError)
  } catch (err) {
    client.disconnect()
    const reason = `no Redis server answers at ${url} (${(errors[0] ?? err as Error).message}); start one, or set REDIS_URL, to run these tests`
    if (underCI()) throw new Error(`CI needs Redis: ${reason}`)
    t.skip(reason)
    return null
  }
  t.teardown(() => client.quit())
  return client
}

/** A prefix no other test run uses, so parallel test files never see each other's keys. */
export function uniquePrefix (label: string): string {
  return `exchangepace-test:${label}:${process.pid}:${Date.now()}:`
}

/**
 * The URL of a database of `base`'s server that holds no key of the default prefix (tried from
 * one chosen by the process id on), so that what runs there on the default prefix (the runbook's
 * commands, which give no --prefix, an example started with REDIS_URL) sees only the test's keys.
 * The database is claimed (a key of its own, set only if absent, deleted when the test file ends)
 * so that two test files running at once, in one run or in two, never share one.
 */
export async function spareDatabase (redis: Redis, base: URL): Promise<{ url: string, db: number }> {
  for (let i = 0; i < 15; i++) {
    const db = 1 + (process.pid + i) % 15
    const probe = redis.duplicate({ db })
    const claimed = await probe.set(CLAIM, String(process.pid), 'PX', 600_000, 'NX') === 'OK'
    const [, keys] = claimed ? await probe.scan('0', 'MATCH', 'exchangepace:*', 'COUNT', 1000) : ['0', ['taken']]
    if (claimed && keys.length === 0) {
      t.teardown(async () => {
        await probe.del(CLAIM)
        await probe.quit()
      })
      return { url: Object.assign(new URL(base), { pathname: `/${db}` }).href, db }
    }
    if (claimed) await probe.del(CLAIM)
    await probe.quit()
  }
  throw new Error(`every database of ${base.host} but 0 is claimed by another test or holds keys of the prefix exchangepace:`)
}

/** The key by which a test claims a database of its own (outside the default prefix, which the test's code scans). */
const CLAIM = 'exchangepace-test-claim'

/** Whether the tests run under CI, where what a test needs must be there (.ci/run installs it). */
export function underCI (): boolean {
  return process.env.CI !== undefined && process.env.CI !== '' && process.env.CI !== 'false'
}

/**
 * `script` (one of the store's) with TIME read from its last argument, in microseconds, and every
 * expiry it computes set to 10 minutes: a test on a clock of its own runs faster or slower than
 * the time it simulates, so an expiry counted on Redis's clock would be wrong (tests on Redis's
 * own clock check that a key expires when its bucket is full again).
 */
export function onTestClock (script: string): string {
  if (!script.includes("redis.call('TIME')")) return script
  const clocked = script.replace("redis.call('TIME')", '{0, ARGV[#ARGV]}')
  const lasting = clocked.replace(/string\.format\('%d', math\.ceil\((after|fullIn) \/ limit \/ perMs\)\)/g, "'600000'")
  if (script.includes('math.ceil(') && lasting === clocked) throw new Error('the scripts changed: update onTestClock')
  return lasting
}

interface ClockedCommands {
  clockedExchangepaceReserveBuffer (key: string, limit: number, windowMs: number, micros: number): Promise<Buffer>
  clockedExchangepaceRefund (key: string, limit: number, run: number, count: number, at: number, windowMs: number, micros: number): Promise<number>
  clockedExchangepaceInspectBuffer (key: string, micros: number): Promise<Buffer>
  clockedExchangepaceReset (key: string): Promise<number>
  clockedExchangepaceBlockBuffer (key: string, ms: number, micros: number): Promise<Buffer>
  clockedExchangepaceAnnounce (index: string, channel: string, member: string, ms: number, micros: number): Promise<unknown>
  clockedExchangepaceBlocks (index: string, micros: number): Promise<string[]>
  clockedExchangepaceProbe (probe: string, channel: string): Promise<string[]>
}

/** One relay of a real client's 'end' and 'ready' for every clocked client on it. */
const relays = new WeakMap<Redis, EventEmitter>()

/**
 * A client for a RedisStore whose scripts run on the test's clock (`micros`, in microseconds)
 * instead of Redis TIME, on the real server: the store defines its scripts through it, and its
 * calls go to those scripts with the clock's reading appended. A one-second pace's calls carry no
 * window, so they are given the one-second window (1000 ms) before the reading.
 */
export class ClockedClient {
  readonly #client: Redis & ClockedCommands

  constructor (client: Redis, readonly micros: () => number) {
    this.#client = client as Redis & ClockedCommands
  }

  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void {
    this.#client.defineCommand(`clocked${name[0].toUpperCase()}${name.slice(1)}`, { numberOfKeys: definition.numberOfKeys, lua: onTestClock(definition.lua) })
  }

  exchangepaceReserveBuffer (key: string, limit: number, windowMs = 1000): Promise<Buffer> {
    return this.#client.clockedExchangepaceReserveBuffer(key, limit, windowMs, this.micros())
  }

  exchangepaceRefund (key: string, limit: number, run: number, count: number, at: number, windowMs = 1000): Promise<number> {
    return this.#client.clockedExchangepaceRefund(key, limit, run, count, at, windowMs, this.micros())
  }

  exchangepaceInspectBuffer (key: string): Promise<Buffer> {
    return this.#client.clockedExchangepaceInspectBuffer(key, this.micros())
  }

  xadd (key: string, ...args: string[]): Promise<unknown> {
    return this.#client.xadd(key, ...args as [string])
  }

  xrevrange (key: string, end: string, start: string, count: 'COUNT', n: number): Promise<Array<[string, string[]]>> {
    return this.#client.xrevrange(key, end, start, count, n)
  }

  scan (cursor: string, ...options: Array<string | number>): Promise<[string, string[]]> {
    return this.#client.scan(cursor, ...options as ['MATCH', string, 'COUNT', number])
  }

  exchangepaceReset (key: string): Promise<number> {
    return this.#client.clockedExchangepaceReset(key)
  }

  /** A block's key expires on Redis's own clock, after `ms` of real time: a test's blocks end on its clock, well before. */
  exchangepaceBlockBuffer (key: string, ms: number): Promise<Buffer> {
    return this.#client.clockedExchangepaceBlockBuffer(key, ms, this.micros())
  }

  exchangepaceAnnounce (index: string, channel: string, member: string, ms: number): Promise<unknown> {
    return this.#client.clockedExchangepaceAnnounce(index, channel, member, ms, this.micros())
  }

  exchangepaceBlocks (index: string): Promise<string[]> {
    return this.#client.clockedExchangepaceBlocks(index, this.micros())
  }

  exchangepaceProbe (probe: string, channel: string): Promise<string[]> {
    return this.#client.clockedExchangepaceProbe(probe, channel)
  }

  /** The connection the store subscribes on: one of the real client's (announcements carry no clock). */
  duplicate (): Redis {
    return this.#client.duplicate()
  }

  /** The real client's 'end' and 'ready', relayed: many clocked clients may share one real client. */
  on (event: 'end' | 'ready', listener: () => void): this {
    let relay = relays.get(this.#client)
    if (relay === undefined) {
      const events = new EventEmitter().setMaxListeners(0)
      relay = events
      relays.set(this.#client, events)
      for (const name of ['end', 'ready']) this.#client.on(name, () => events.emit(name))
    }
    relay.on(event, listener)
    return this
  }
}
