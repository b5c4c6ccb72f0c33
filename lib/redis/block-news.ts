/**
 * How every replica of a RedisStore hears of an operator's blocks and resets, so that a block holds
 * in each replica's memory for its whole length, while Redis answers or not, on keys the replica
 * never served too. Redis keeps, beside the block rows, an index of the blocks in force (a sorted
 * set, `prefix + 'blocks'`, each key of the pace table scored by its block's end on Redis's clock),
 * and announces each block and reset on the channel of the same name. Each replica:
 * - subscribes to that channel on a connection of its own (the client's `duplicate()`), and hears
 *   each announcement as it is made;
 * - reads the index when it starts and every `READ_EVERY_MS`, so that one whose subscription was
 *   reconnecting when a block was announced (a lost connection, a Cluster node going away) learns
 *   of it within that time;
 * - keeps each block it heard of until its end, and writes it into every in-memory pace of the
 *   pace's name (each lane), made before or after it heard.
 * A reset heard lifts the block and makes the key's bucket full in memory. A reset a replica did
 * not hear of reaches it as every reset does (`RedisPace`'s follow rule): at the key's next request
 * while Redis answers. Nothing here runs on the request path.
 */
import { defaultClock, type Pace } from '../bucket/pace.js'
import { deniedByAcl } from './outages.js'
import { neverAutoPipelined, type RedisClientLike, type RedisSubscriberLike } from './scripts.js'
import type { PaceLog } from '../store.js'

/** How often each replica reads the blocks in force, in ms. */
export const READ_EVERY_MS = 1000

/**
 * Lua: announces a block of ARGV[3] ms (or, with '0', a reset) of the key ARGV[2] of the pace
 * table, in the index KEYS[1] and on the channel ARGV[1]. The index forgets the blocks that have
 * ended, and expires with its last block (every key the store writes has an expiry).
 */
const ANNOUNCE = `
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now))
if ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('PUBLISH', ARGV[1], 'reset ' .. ARGV[2])
else
  redis.call('ZADD', KEYS[1], string.format('%d', now + tonumber(ARGV[3])), ARGV[2])
  redis.call('PUBLISH', ARGV[1], 'block ' .. ARGV[3] .. ' ' .. ARGV[2])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(last[2]) - now)) end
return 1
`

/** Lua: the blocks in force in the index KEYS[1], as key, ms left, key, ms left... */
const IN_FORCE = `
local time = redis.call('TIME')
local now = time[1] * 1000 + math.floor(time[2] / 1000)
local found = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
for i = 2, #found, 2 do found[i] = string.format('%d', tonumber(found[i]) - now) end
return found
`

/**
 * Lua: each command the store's scripts call, tried once through redis.pcall on KEYS[1], a key of
 * the store's prefix it never writes, and on the channel ARGV[1]; answers those the user's ACL
 * denies, with Redis's words. Nothing is written: every write is on a key that does not exist, and
 * the SET is a syntax error once allowed (Redis checks the ACL first). The PUBLISH sends 'probe',
 * which replicas ignore.
 */
const PROBE = `
local denied = {}
for _, command in ipairs({
  {'TIME'}, {'GET', KEYS[1]}, {'SET', KEYS[1], '', 'NX', 'XX'}, {'DEL', KEYS[1]}, {'PEXPIRE', KEYS[1], 1},
  {'ZADD', KEYS[1], 'XX', 0, ''}, {'ZREM', KEYS[1], ''}, {'ZRANGE', KEYS[1], 0, 0},
  {'ZRANGEBYSCORE', KEYS[1], 1, 0}, {'ZREMRANGEBYSCORE', KEYS[1], 1, 0}, {'PUBLISH', ARGV[1], 'probe'}
}) do
  local reply = redis.pcall(unpack(command))
  if type(reply) == 'table' and reply.err and (string.find(reply.err, 'NOPERM', 1, true) or string.find(reply.err, 'executing the script', 1, true)) then
    denied[#denied + 1] = command[1] .. ' (' .. reply.err .. ')'
  end
end
return denied
`

/** The commands `defineNewsCommands` adds. */
export interface NewsCommands {
  exchangepaceAnnounce (index: string, channel: string, member: string, ms: number): Promise<unknown>
  exchangepaceBlocks (index: string): Promise<string[]>
  exchangepaceProbe (probe: string, channel: string): Promise<string[]>
}

/** @internal The scripts' text, for tests that run them on a clock of their own. */
export const NEWS_SCRIPTS = { announce: ANNOUNCE, inForce: IN_FORCE, probe: PROBE } as const

/**
 * The stores that hear announcements through each client: the client's 'end' stops their
 * subscriptions (so that nothing of the store keeps the process alive once the client is closed),
 * and its 'ready' after an 'end' starts them again. One listener of each per client, however many
 * stores share it.
 */
const hearers = new WeakMap<object, Set<BlockNews>>()

/**
 * The blocks a store's replica has heard of, and the in-memory paces it writes them into.
 * Invariants: `#ends` holds each block heard of and not yet over, by its key in the pace table
 * (the pace's escaped name, ':', the key), with its end on this replica's monotonic clock; every
 * in-memory pace registered for that name refuses the key until then (a pace registered later is
 * blocked when it registers).
 */
export class BlockNews {
  readonly #client: RedisClientLike
  readonly #commands: NewsCommands
  /** The index's key, which is also the channel's name. */
  readonly #index: string
  readonly #probeKey: string
  readonly #prefix: string
  readonly #ends = new Map<string, number>()
  readonly #paces = new Map<string, Array<WeakRef<Pace>>>()
  #log: PaceLog | null = null
  #subscriber: RedisSubscriberLike | null = null
  #timer: NodeJS.Timeout | null = null
  #probed = false
  #reading = false
  /** Keys reset while a read of the index was on its way: what it answers for them is older. */
  readonly #resetWhileReading = new Set<string>()
  /** Each denial of the ACL already logged, by Redis's message: logged once. */
  readonly #deniedLogged = new Set<string>()

  constructor (client: RedisClientLike, prefix: string) {
    this.#client = client
    client.defineCommand('exchangepaceAnnounce', { numberOfKeys: 1, lua: ANNOUNCE })
    client.defineCommand('exchangepaceBlocks', { numberOfKeys: 1, lua: IN_FORCE })
    client.defineCommand('exchangepaceProbe', { numberOfKeys: 1, lua: PROBE })
    // Nothing waits for the reads of the index, which must hold no request's reservations.
    neverAutoPipelined(client, ['exchangepaceBlocks', 'exchangepaceProbe'])
    this.#commands = client as unknown as NewsCommands
    this.#prefix = prefix
    this.#index = `${prefix}blocks`
    // No row is ever this key (a row's key has ':' after the prefix), nor the index.
    this.#probeKey = `${prefix}probe`
  }

  /**
   * Registers `pace`, this replica's memory of the pace whose name is escaped as `name` (null for
   * a store that keeps none), blocks in it the keys blocked now, and on the first call starts
   * hearing the announcements, logging to `log`.
   */
  register (name: string, pace: Pace | null, log: PaceLog): void {
    if (pace !== null) {
      const paces = this.#paces.get(name) ?? []
      paces.push(new WeakRef(pace))
      this.#paces.set(name, paces)
      const now = defaultClock()
      for (const [member, end] of this.#ends) {
        if (member.startsWith(`${name}:`) && end > now) pace.block(member.slice(name.length + 1), end - now)
      }
    }
    if (this.#log !== null) return
    this.#log = log
    const { duplicate, on } = this.#client
    // Every ioredis client has both; a stand-in without them (a test's) hears of nothing.
    if (typeof duplicate !== 'function' || typeof on !== 'function') return
    let stores = hearers.get(this.#client)
    if (stores === undefined) {
      const heard = new Set<BlockNews>()
      stores = heard
      hearers.set(this.#client, heard)
      on.call(this.#client, 'end', () => { for (const store of heard) store.#stop() })
      on.call(this.#client, 'ready', () => { for (const store of heard) store.#start() })
    }
    stores.add(this)
    this.#start()
  }

  /** Announces a block of `ms` of `member` (a key of the pace table), or a reset with 0, to every replica. */
  async announce (member: string, ms: number): Promise<void> {
    await this.#commands.exchangepaceAnnounce(this.#index, this.#index, member, ms)
  }

  /** Blocks `member` in this replica's memory for `ms`. */
  block (member: string, ms: number): void {
    const now = defaultClock()
    for (const [known, end] of this.#ends) if (end <= now) this.#ends.delete(known)
    this.#ends.set(member, now + ms)
    const colon = member.indexOf(':')
    const key = member.slice(colon + 1)
    for (const pace of this.#local(member.slice(0, colon))) pace.block(key, ms)
  }

  /** Lifts `member`'s block in this replica's memory, and makes its buckets full there. */
  reset (member: string): void {
    this.#ends.delete(member)
    if (this.#reading) this.#resetWhileReading.add(member)
    const colon = member.indexOf(':')
    const key = member.slice(colon + 1)
    for (const pace of this.#local(member.slice(0, colon))) pace.reset(key)
  }

  /** Milliseconds left of `member`'s block as this replica heard of it; 0 when none. */
  blockedMs (member: string): number {
    const end = this.#ends.get(member)
    if (end === undefined) return 0
    const left = end - defaultClock()
    if (left > 0) return left
    this.#ends.delete(member)
    return 0
  }

  /** The live paces registered for `name`, forgetting those collected since (an app closed). */
  #local (name: string): Pace[] {
    const refs = this.#paces.get(name)
    if (refs === undefined) return []
    const paces: Pace[] = []
    const live = refs.filter(ref => {
      const pace = ref.deref()
      if (pace !== undefined) paces.push(pace)
      return pace !== undefined
    })
    if (live.length === 0) this.#paces.delete(name)
    else this.#paces.set(name, live)
    return paces
  }

  /** Subscribes on a connection of its own, and reads the index now and every `READ_EVERY_MS`. */
  #start (): void {
    if (this.#subscriber !== null) return
    const subscriber = (this.#client.duplicate as () => RedisSubscriberLike).call(this.#client)
    this.#subscriber = subscriber
    subscriber.on('error', err => { this.#failed(err, 'on its subscription to blocks') })
    subscriber.on('message', (channel, message) => { if (channel === this.#index) this.#heard(message) })
    subscriber.subscribe(this.#index).catch((err: Error) => { this.#failed(err, `subscribing to ${this.#index}`) })
    this.#timer = setInterval(this.#read, READ_EVERY_MS).unref()
    // Not in this turn of the event loop: ioredis gives an auto-pipelined batch the commands the
    // client had when the batch began, and one begun before the constructor defined the scripts
    // would take a call of them and never answer it (it breaks on the missing reply). A batch is
    // sent on the setImmediate queued when it began, before this one.
    setImmediate(this.#read)
  }

  #stop (): void {
    this.#subscriber?.disconnect()
    this.#subscriber = null
    clearInterval(this.#timer as NodeJS.Timeout)
    this.#timer = null
  }

  /** An announcement: 'block <ms> <member>' or 'reset <member>'; anything else ('probe') says nothing. */
  #heard (message: string): void {
    const space = message.indexOf(' ')
    const verb = message.slice(0, space)
    if (verb === 'reset') return this.reset(message.slice(space + 1))
    const second = message.indexOf(' ', space + 1)
    const ms = Number(message.slice(space + 1, second))
    if (verb === 'block' && second !== -1 && ms > 0 && ms !== Infinity) this.block(message.slice(second + 1), ms)
  }

  readonly #read = (): void => {
    if (this.#reading) return
    this.#reading = true
    this.#resetWhileReading.clear()
    this.#readInForce().then(() => { this.#reading = false }, (err: Error) => {
      this.#reading = false
      this.#failed(err, this.#probed ? 'reading the blocks in force' : 'running its scripts')
    })
  }

  /** Probes the ACL once, then blocks what the index holds (but what was reset meanwhile). */
  async #readInForce (): Promise<void> {
    if (!this.#probed) {
      const denied = await this.#commands.exchangepaceProbe(this.#probeKey, this.#index)
      this.#probed = true
      if (denied.length > 0) this.#denied(`the commands ${denied.join(', ')}`)
    }
    const found = await this.#commands.exchangepaceBlocks(this.#index)
    const now = defaultClock()
    for (let i = 0; i < found.length; i += 2) {
      const member = found[i]
      const ms = Number(found[i + 1])
      // A block heard of already ends where the index says, give or take the time the answers took:
      // only a block this replica missed, or missed the extension of, is written again.
      if (!this.#resetWhileReading.has(member) && now + ms > (this.#ends.get(member) ?? -Infinity) + READ_EVERY_MS) this.block(member, ms)
    }
  }

  /** A failure while hearing: a denial by the ACL is an error an operator must see; the rest is an outage's, logged elsewhere. */
  #failed (err: Error, doing: string): void {
    if (deniedByAcl(err.message)) this.#denied(`${doing} (${err.message})`)
    else this.#log?.debug({ err }, `exchangepace: the RedisStore failed ${doing}; it reads the blocks in force again within ${READ_EVERY_MS} ms of Redis answering`)
  }

  #denied (what: string): void {
    if (this.#deniedLogged.has(what)) return
    this.#deniedLogged.add(what)
    this.#log?.error(`exchangepace: Redis denies the RedisStore's user ${what}; grant it the keys ~${this.#prefix}*, the channel &${this.#index} and the commands of the ACL SETUSER line in docs/stores.md`)
  }
}
