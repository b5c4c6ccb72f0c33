/**
 * The Lua scripts a RedisStore runs and the row they keep under each key: what a row holds, how
 * time is counted, and how a reserve and a refund change it. Nothing here decides what happens
 * when Redis does not answer: that is the store's (store.ts).
 */
import type { PaceBucket } from '../store.js'

/**
 * A row's layout for Lua's struct library, little-endian: the format byte, then full, run, count
 * and last as doubles, the marks as an unsigned 32-bit integer, and the limit it was written at as
 * a double. The row of a pace whose window is not one second adds its window in ms, a double.
 */
const ROW = '<BddddI4d'
const WINDOWED_ROW = '<BddddI4dd'

/**
 * The format byte every row starts with: 2 for a one-second pace's row (the rows of earlier builds
 * had 1, or were text), 3 for the row of any other window.
 */
const ROW_FORMAT = 2
const WINDOWED_ROW_FORMAT = 3

/**
 * Lua: whether the key's value `row` (false when there is no key) is a row the scripts wrote for a
 * pace of this time base: the size (45 bytes, or 53 with the window) and the format byte of the
 * base (2, or 3 with the window). Anything else (a row of the other base, an earlier build's row,
 * a foreign value under the prefix) is no row: struct.unpack would fail on some of them, and a
 * failing script is an outage for the whole store. For the same reason the scripts read `row` with
 * redis.pcall: a key of another type (a hash) gives an error table, which is no row, where GET
 * would fail the script.
 */
const IS_ROW = 'row and #row == size and string.byte(row) == format'

/**
 * A block an operator set (`BLOCK`): `struct.pack('<Bd', 4, until)`, 9 bytes, the block's end in
 * Unix milliseconds on Redis's clock, under a key that expires at that end. It is no row of either
 * time base, so a refund gives nothing while it lasts; a reserve refuses until its end, and a
 * grant after it (the key outlived its expiry by a fraction of a millisecond) writes a row over it.
 * Rate-free, so an operator blocks a key without knowing the pace's rate.
 */
const BLOCK_FORMAT = 4
const IS_BLOCK = `row and #row == 9 and string.byte(row) == ${BLOCK_FORMAT}`

/**
 * The pace in Redis, with the in-process Pace's semantics. A key holds one row,
 * `struct.pack(ROW, 2, full, run, count, last, marks, limit)` (45 bytes) for a one-second pace: a
 * format byte, the time at which the bucket is full again, and for refunds (as in `Pace`) when the
 * run of spending began, the grants counted in it, when the latest came, which of the 32 latest
 * were refunded (bit i: the grant i before the latest), and the limit whose microticks
 * (below) its times are counted in. A pace of another window writes
 * `struct.pack(WINDOWED_ROW, 3, full, run, count, last, marks, limit, window)` (53 bytes): the same
 * fields, then its window in ms. No key means a full bucket, and every write sets the key to
 * expire at the moment it is full again (PX), so Redis holds only the keys that spent within the
 * last window. Each operation is one script on one key: atomic on the server, no read-then-write
 * from Node, and valid on Redis Cluster. The clock is the server's, so every replica shares it.
 *
 * Time is counted in microticks, in one of two time bases, as `Pace` counts its ticks (a debit or
 * a refund adds or subtracts an exact integer):
 * - a one-second pace (no window argument, or 1000 ms): one microsecond of TIME is `limit`
 *   microticks, a unit 1e6 of them and the bucket 1e6 x limit, and readings are taken modulo 2^32
 *   microseconds (71 minutes), which keeps every value an exact integer for integer rates up to
 *   2^21 per second;
 * - a window of W ms: TIME is read in whole milliseconds (rounded down), one of which is `limit`
 *   microticks, so a unit is W of them and the bucket W x limit, exactly `Pace`'s ticks on a
 *   millisecond clock; readings are taken modulo 2^36 ms (795 days), over twice the longest window
 *   (365 days), which keeps every value an exact integer below 2^53 for integer limits up to 2^16.
 *   Every window shares this base, so that the rows of one pace at another limit or window are
 *   the same moments, read as below.
 * A stored time is never more than one window ahead of now (the key expires when it is reached),
 * so its distance to now is read unambiguously from the modular difference. Redis's clock is
 * wall-clock time and can step back (or a failover can move rows to a server whose clock is
 * behind): a stored time more than one bucket ahead (by more than the half microtick a grant
 * rounds to at a fractional rate) is then rewritten one bucket ahead, an empty bucket that refills
 * from now, starting a run with no grant in it (refunds of the grants before the step give
 * nothing), so that a step back delays a key by at most one window. The row is binary (doubles,
 * which hold those integers exactly, and the marks as an unsigned 32-bit integer) because
 * converting numbers to and from text cost Redis more than the arithmetic; for the same reason the
 * expiry goes to Redis as text formatted with %d (Redis would format a Lua number argument as a
 * 17-digit double). A value not in its base's format (the other base's row, a row of an earlier
 * build, which lives at most a second) reads as no row: a full bucket. Replicas that declare
 * different buckets for one pace within one base (a deploy that changes `perSecond`, or a window's
 * limit or length) share its rows: a reserve reads a row written at another limit as the same
 * moments in its own microticks (the bucket as far from full in time); a row of a longer window
 * that is further ahead than this pace's bucket but within that window is this bucket empty
 * (refused, and left as it is), not a clock step; and a refund leaves a row written at another
 * bucket alone. The scripts are straight-line code: a Lua local function is a closure built anew on
 * every call.
 */

/**
 * Lua: the time base of the pace the script runs for, from ARGV[1], its limit, and
 * ARGV[`windowArgument`], its window in ms, absent for a one-second pace (1000 is read the same
 * way): the unit, the cycle the clock is read modulo and its steps per ms, the size, format and
 * layout of its rows, and `wrap`, the cycle in microticks. A one-second pace only tests its window
 * argument, so that its calls cost Redis what they did before other windows.
 */
function timeBase (windowArgument: number): string {
  return `
local limit = tonumber(ARGV[1])
local window = ARGV[${windowArgument}]
local unit = 1000000
local cycle = 4294967296
local perMs = 1000
local size = 45
local format = ${ROW_FORMAT}
local layout = '${ROW}'
if window and window ~= '1000' then
  window = tonumber(window)
  unit = window
  cycle = 68719476736
  perMs = 1
  size = 53
  format = ${WINDOWED_ROW_FORMAT}
  layout = '${WINDOWED_ROW}'
end
local wrap = cycle * limit
`
}

/** Lua: `now`, Redis TIME in the pace's microticks, modulo `wrap`. Requires the time base. */
const CLOCK = `
local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
if perMs == 1 then now = math.floor(now / 1000) end
now = (now % cycle) * limit
`

/**
 * Takes one unit if the bucket holds one. `fullIn` is how far ahead of now the stored time is; a
 * key whose time has come (or no key, or a value not in the row's format) is a full bucket, and a
 * grant on it begins a new run, so the rest of the row is read only when the run goes on. The
 * reply is one binary string of doubles, little-endian (a table reply cost Redis a tenth of the
 * script's time, converting it): refused, 8 bytes, the wait in ms; granted, 40 bytes, the whole
 * units left, for the refund the run, the grant's number in it and its time, and the ms until the
 * bucket is full again (the RateLimit header's `t`). ARGV: the limit,
 * and the window in ms for a pace whose window is not one second.
 */
const RESERVE = `${timeBase(2)}${CLOCK}
local row = redis.pcall('GET', KEYS[1])
local capacity = unit * limit
local at = math.floor(now + 0.5) % wrap
local after = unit
local run = at
local count = 1
local marks = 0
if ${IS_ROW} then
  local _, full, rowRun, grants, last, refunded, written = struct.unpack('${ROW}', row)
  if written ~= limit then
    full = math.floor(full / written * limit + 0.5) % wrap
    rowRun = math.floor(rowRun / written * limit + 0.5) % wrap
  end
  local fullIn = (full - now) % wrap
  local reach = capacity
  if format == ${WINDOWED_ROW_FORMAT} then
    local stretch = struct.unpack('<d', row, 46)
    if stretch > window then reach = stretch * limit end
  end
  if fullIn > reach + 0.5 and fullIn <= wrap / 2 then
    redis.call('SET', KEYS[1], struct.pack(layout, format, math.floor(now + capacity + 0.5) % wrap, at, 0, at, 0, limit, window), 'PX', string.format('%d', unit / perMs))
    return struct.pack('<d', unit / perMs / limit)
  end
  if fullIn > 0 and fullIn <= wrap / 2 then
    after = fullIn + unit
    run = rowRun
    count = grants + 1
    marks = refunded * 2 % 4294967296
  end
elseif ${IS_BLOCK} then
  local wait = struct.unpack('<d', row, 2) - (time[1] * 1000 + time[2] / 1000)
  if wait > 0 then return struct.pack('<d', wait) end
end
local shortfall = after - capacity
if shortfall > 0.5 then
  return struct.pack('<d', shortfall / limit / perMs)
end
redis.call('SET', KEYS[1], struct.pack(layout, format, math.floor(now + after + 0.5) % wrap, run, count, at, marks, limit, window), 'PX', string.format('%d', math.ceil(after / limit / perMs)))
return struct.pack('<ddddd', math.floor((0.5 - shortfall) / unit), run, count, at, after / limit / perMs)
`

/**
 * Gives back grant number ARGV[3] of the run that began at ARGV[2], made at ARGV[4], by
 * `Pace._giveBack`'s rule, counted from the latest grant (`ahead`: how far the stored time is past
 * it): nothing once the run is over (no key, a value not in the row's format, or another run) or
 * when the row was written at another bucket (its times are counted in other microticks, or its
 * units are another length); the run's latest grant gives its unit and uncounts; any other gives
 * what the later grants still kept leave room for, and is marked refunded (the marks are counted
 * byte by byte: LuaBitOp's operations take doubles, and a multiplication that spreads the bytes'
 * sums would pass 2^51, where it stops reading them exactly). A grant already refunded (uncounted
 * as the latest, or marked) gives nothing again: ioredis resends a command whose answer a lost
 * connection kept from it, and Redis may have run it already; not when its number was given again
 * (an uncounted latest grant's goes to the next grant), nor when 32 grants or more came after it
 * (no mark records it): docs/stores.md says what such a resend gives. The marks move down one when
 * the latest grant is uncounted, so the latest grant's own mark (bit 0) is set when it was refunded
 * before the grant after it was. A key left at or before the latest grant is full and goes without
 * a reading of the clock (a stranger's rejected exchange); one whose time stays keeps its expiry
 * (only the mark changes); one that moves is written with the expiry its new time calls for, one
 * window at most: a time more than a bucket ahead (by more than the half microtick a grant rounds
 * to, as the reserve script reads it) means Redis's clock stepped back since the grants, and the
 * key lives no longer than a reserve would let it (which rewrites such a time one bucket ahead).
 * ARGV: the limit, the grant's run, number and time, and the window in ms for a pace whose window
 * is not one second.
 */
const REFUND = `${timeBase(5)}
local row = redis.pcall('GET', KEYS[1])
if not (${IS_ROW}) then return 0 end
local _, full, run, grants, last, marks, written = struct.unpack('${ROW}', row)
if run ~= tonumber(ARGV[2]) or written ~= limit then return 0 end
if format == ${WINDOWED_ROW_FORMAT} and struct.unpack('<d', row, 46) ~= window then return 0 end
local ahead = (full - last) % wrap
local left
if grants == tonumber(ARGV[3]) then
  if marks % 2 == 1 then return 0 end
  left = ahead - unit
  grants = grants - 1
  marks = math.floor(marks / 2)
else
  local later = grants - ARGV[3]
  local bits = bit.tobit(marks)
  if later < 0 or (later < 32 and bit.band(bits, bit.lshift(1, later)) ~= 0) then return 0 end
  if later < 32 then bits = bit.band(bits, bit.lshift(1, later) - 1) end
  bits = bits - bit.band(bit.rshift(bits, 1), 0x55555555)
  bits = bit.band(bits, 0x33333333) + bit.band(bit.rshift(bits, 2), 0x33333333)
  bits = bit.band(bits + bit.rshift(bits, 4), 0x0f0f0f0f)
  bits = bits % 256 + bit.rshift(bits, 8) % 256 + bit.rshift(bits, 16) % 256 + bit.rshift(bits, 24)
  left = math.min(ahead - unit + (last - ARGV[4]) % wrap, math.max(ahead - unit, math.min(ahead, (later - bits) * unit)))
  if later < 32 then marks = bit.bor(bit.tobit(marks), bit.lshift(1, later)) % 4294967296 end
end
if left <= 0.5 then
  redis.call('DEL', KEYS[1])
  return 1
end
if left >= ahead then
  redis.call('SET', KEYS[1], struct.pack(layout, format, full, run, grants, last, marks, written, window), 'KEEPTTL')
  return 1
end
${CLOCK}
local fullIn = (last + left - now) % wrap
if fullIn == 0 or fullIn > wrap / 2 then
  redis.call('DEL', KEYS[1])
else
  if fullIn > unit * limit + 0.5 then fullIn = unit * limit end
  redis.call('SET', KEYS[1], struct.pack(layout, format, (last + left) % wrap, run, grants, last, marks, limit, window), 'PX', string.format('%d', math.ceil(fullIn / limit / perMs)))
end
return 1
`

/**
 * What an operator sees of a key, whatever pace wrote it: nothing is written, and the caller needs
 * no limit, because a row carries its own. The reply is five doubles, little-endian: how far the
 * row's time is ahead of now in ms (0 for a full bucket, which has no row), the block's end in Unix
 * ms (0 when none), Redis's clock in Unix ms, and the limit and window in ms the row was
 * written at (0 and 0 without a row). A time more than half a cycle ahead is behind now: full.
 */
const INSPECT = `
local row = redis.pcall('GET', KEYS[1])
local time = redis.call('TIME')
local nowMs = time[1] * 1000 + time[2] / 1000
if type(row) ~= 'string' then return struct.pack('<ddddd', 0, 0, nowMs, 0, 0) end
if ${IS_BLOCK} then return struct.pack('<ddddd', 0, struct.unpack('<d', row, 2), nowMs, 0, 0) end
local format = string.byte(row)
local cycle = 4294967296
local now = (time[1] * 1000000 + time[2]) % cycle
local perMs = 1000
local window = 1000
if #row == 53 and format == ${WINDOWED_ROW_FORMAT} then
  cycle = 68719476736
  now = math.floor(time[1] * 1000 + time[2] / 1000) % cycle
  perMs = 1
  window = struct.unpack('<d', row, 46)
elseif not (#row == 45 and format == ${ROW_FORMAT}) then
  return struct.pack('<ddddd', 0, 0, nowMs, 0, 0)
end
local _, full, _, _, _, _, limit = struct.unpack('${ROW}', row)
local fullIn = (full - now * limit) % (cycle * limit)
if fullIn > cycle * limit / 2 then fullIn = 0 end
return struct.pack('<ddddd', fullIn / limit / perMs, 0, nowMs, limit, window)
`

/** Makes the key's bucket full again, and lifts a block: the key goes. */
const RESET = "return redis.call('DEL', KEYS[1])"

/**
 * Blocks the key for ARGV[1] ms (an integer) from now on Redis's clock, whatever it held: the
 * block row above, expiring at the block's end. Replies its end in Unix ms, as one double.
 */
const BLOCK = `
local time = redis.call('TIME')
local ending = time[1] * 1000 + math.floor(time[2] / 1000) + tonumber(ARGV[1])
redis.call('SET', KEYS[1], struct.pack('<Bd', ${BLOCK_FORMAT}, ending), 'PX', ARGV[1])
return struct.pack('<d', ending)
`

/**
 * A pace name as it appears in Redis keys, with no ':' in it (':' as %3A, and '%' as %25), so that
 * the first ':' after it ends it: otherwise pace "/a" with key "b:c" and pace "/a:b" with key "c"
 * would share one Redis key. A name without either character is written as it is.
 */
export function redisPaceName (name: string): string {
  return name.replace(/[%:]/g, found => found === ':' ? '%3A' : '%25')
}

/** @internal The scripts' text, for tests that run them on a clock of their own. */
export const SCRIPTS = { reserve: RESERVE, refund: REFUND, inspect: INSPECT, reset: RESET, block: BLOCK } as const

/** The highest rate a one-second pace's microticks keep exact (see above), per second. */
export const MAX_RATE = 2 ** 21

/** The highest limit the microticks of a pace of another window keep exact (see above). */
export const MAX_WINDOW_LIMIT = 2 ** 16

/** The longest window the scripts count, in seconds (365 days): their cycle, 2^36 ms, holds over twice it. */
export const MAX_WINDOW = 365 * 86_400

/**
 * The window argument of the scripts for the pace `name` of `bucket`: null for a one-second pace
 * (the scripts' first time base, whose calls and rows are those of the builds before other
 * windows), or its window in ms. Throws a TypeError naming the pace when the scripts cannot count
 * its bucket exactly: a rate above MAX_RATE per second, or for another window, a window not a
 * whole number of milliseconds (a fraction of one, as a product like 1.001 x 1000 leaves, is
 * rounded off), longer than MAX_WINDOW, or a limit above MAX_WINDOW_LIMIT.
 */
export function scriptWindow (name: string, bucket: PaceBucket): number | null {
  const { limit, window } = bucket
  const pace = `pace ${JSON.stringify(name)}`
  const windowMs = Math.round(window * 1000)
  if (Math.abs(windowMs - window * 1000) > 1e-6 || windowMs === 0) {
    throw new TypeError(`exchangepace: RedisStore counts windows in whole milliseconds; ${pace} declares window ${window}`)
  }
  if (windowMs === 1000) {
    if (limit > MAX_RATE) throw new TypeError(`exchangepace: RedisStore counts rates up to ${MAX_RATE} per second exactly; ${pace} declares perSecond ${limit}`)
    return null
  }
  if (window > MAX_WINDOW) throw new TypeError(`exchangepace: RedisStore counts windows up to ${MAX_WINDOW} seconds (365 days); ${pace} declares window ${window}`)
  if (limit > MAX_WINDOW_LIMIT) {
    throw new TypeError(`exchangepace: RedisStore counts limits up to ${MAX_WINDOW_LIMIT} per window exactly for windows other than one second; ${pace} declares limit ${limit} per window ${window}`)
  }
  return windowMs
}

/**
 * The part of an ioredis client (`Redis` or `Cluster`) the store uses: `defineCommand` for its
 * scripts; and to hear of the blocks and resets made on other replicas (block-news.ts), `duplicate`
 * for a connection to subscribe on and `on` for the client's 'end' and 'ready'. A client without
 * the last two works, and its replica hears of no block made elsewhere (the store warns).
 */
export interface RedisClientLike {
  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void
  duplicate? (): RedisSubscriberLike
  on? (event: 'end' | 'ready', listener: () => void): unknown
}

/** A connection subscribed to the store's announcements of blocks: an ioredis `Redis` or `Cluster`, duplicated. */
export interface RedisSubscriberLike {
  subscribe (channel: string): Promise<unknown>
  on (event: 'message', listener: (channel: string, message: string) => void): unknown
  on (event: 'error', listener: (err: Error) => void): unknown
  disconnect (): void
}

/** The reserve script's reply: a refusal, the wait in ms; a grant, the units left, the run, the grant's number, its time and the ms until full. */
export const REFUSAL_BYTES = 8
export const GRANT_BYTES = 40

/**
 * The commands `defineCommand` adds (ioredis loads each script once and calls it by SHA). The
 * reserve script's reply is read as it came (the `Buffer` form of the command), not as text.
 */
export interface PaceCommands {
  exchangepaceReserveBuffer (key: string, limit: number, windowMs?: number): Promise<Buffer>
  /** The reserve, never auto-pipelined: a command of its own, whose redirections ioredis follows (see `defineCommands`). */
  exchangepaceReserveAloneBuffer (key: string, limit: number, windowMs?: number): Promise<Buffer>
  exchangepaceRefund (key: string, limit: number, run: number, count: number, at: number, windowMs?: number): Promise<number>
  exchangepaceInspectBuffer (key: string): Promise<Buffer>
  exchangepaceReset (key: string): Promise<number>
  exchangepaceBlockBuffer (key: string, ms: number): Promise<Buffer>
}

/** What the store reads of a client's options: the commands it never auto-pipelines. */
interface PipeliningOptions {
  readonly isCluster?: boolean
  options?: { autoPipeliningIgnoredCommands?: readonly string[] | undefined }
}

/**
 * Adds `names` to the commands `client` never auto-pipelines: its own `autoPipeliningIgnoredCommands`,
 * a new array (ioredis shares the default one between clients); nothing else of the client changes.
 * A command no request waits for goes there: ioredis has one auto-pipelined batch in flight per
 * connection (per node of a Cluster) and holds the next until its answer, so such a command in a
 * batch would hold the requests' reservations for a round trip.
 */
export function neverAutoPipelined (client: RedisClientLike, names: readonly string[]): void {
  const pipelining = client as PipeliningOptions
  if (pipelining.options !== undefined) {
    pipelining.options.autoPipeliningIgnoredCommands = [...(pipelining.options.autoPipeliningIgnoredCommands ?? []), ...names]
  }
}

/**
 * Defines the scripts on `client` as commands, and returns it as what calls them. The reserve is
 * defined twice, under one script (one SHA, one entry in Redis's script cache): as
 * `exchangepaceReserve`, which goes as the client's options say, and as `exchangepaceReserveAlone`,
 * which a Cluster client never auto-pipelines. ioredis 5 follows a MOVED or ASK only for a command
 * sent on its own, or a batch all of whose commands were redirected alike; a reservation that got
 * one handed back from a mixed batch is resent as the latter (see `RedisPace`), which ioredis then
 * follows, correcting its slot map.
 *
 * The refund is never auto-pipelined either: ioredis has one auto-pipelined batch in flight per
 * connection (per node of a Cluster) and holds the next until its answer, so a refund sent in a
 * batch as a request's answer goes would hold the next request's reservations for a round trip,
 * and a request would wait for Redis twice. Sent on its own it holds nothing, and nothing waits
 * for its answer (see `neverAutoPipelined`).
 */
export function defineCommands (client: RedisClientLike): PaceCommands {
  client.defineCommand('exchangepaceReserve', { numberOfKeys: 1, lua: RESERVE })
  client.defineCommand('exchangepaceReserveAlone', { numberOfKeys: 1, lua: RESERVE })
  client.defineCommand('exchangepaceRefund', { numberOfKeys: 1, lua: REFUND })
  neverAutoPipelined(client, (client as PipeliningOptions).isCluster === true ? ['exchangepaceReserveAlone', 'exchangepaceRefund'] : ['exchangepaceRefund'])
  client.defineCommand('exchangepaceInspect', { numberOfKeys: 1, lua: INSPECT })
  client.defineCommand('exchangepaceReset', { numberOfKeys: 1, lua: RESET })
  client.defineCommand('exchangepaceBlock', { numberOfKeys: 1, lua: BLOCK })
  return client as unknown as PaceCommands
}
