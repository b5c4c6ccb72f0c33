/**
 * The Lua scripts a RedisStore runs and the row they keep under each key: what a row holds, how
 * time is counted, and how a reserve and a refund change it. Nothing here decides what happens
 * when Redis does not answer: that is the store's (redis-store.ts).
 */

/**
 * A row's layout for Lua's struct library, little-endian: the format byte, then full, run, count
 * and last as doubles, the marks as an unsigned 32-bit integer, and the rate it was written at as
 * a double.
 */
const ROW = '<BddddI4d'

/** The format byte every row starts with (the rows of earlier builds had 1, or were text). */
const ROW_FORMAT = 2

/**
 * Lua: whether the key's value `row` (false when there is no key) is a row the scripts wrote: the
 * size of ROW (45 bytes) and the format byte (2). Anything else (an earlier build's row, a foreign
 * value under the prefix) is no row: struct.unpack would fail on it, and a failing script is an
 * outage for the whole store. For the same reason the scripts read `row` with redis.pcall: a key
 * of another type (a hash) gives an error table, which is no row, where GET would fail the script.
 */
const IS_ROW = `row and #row == 45 and string.byte(row) == ${ROW_FORMAT}`

/**
 * The pace in Redis, with the in-process Pace's semantics. A key holds one row of 45 bytes,
 * `struct.pack(ROW, 2, full, run, count, last, marks, rate)`: a format byte (2), the Redis TIME at
 * which the bucket is full again, and for refunds (as in `Pace`) when the run of spending began,
 * the grants counted in it, when the latest came, which of the 32 latest were refunded (bit i: the
 * grant i before the latest), and the rate whose microticks (below) its times are counted in. No
 * key means a full bucket, and every write sets the key to expire at the moment it is full again
 * (PX), so Redis holds only the keys that spent within the last second. Each operation is one
 * script on one key: atomic on the server, no read-then-write from Node, and valid on Redis
 * Cluster. The clock is the server's, so every replica shares it.
 *
 * Time is counted in microticks: one microsecond of TIME is `rate` microticks, so one unit refills
 * in exactly 1e6 microticks and a bucket holds 1e6 x rate, and a debit or a refund adds or
 * subtracts an exact integer (as `Pace` does with its ticks). Readings are taken modulo 2^32
 * microseconds (71 minutes), which keeps every value an exact integer for integer rates up to 2^21
 * per second; a stored time is never more than one bucket ahead of now (the key expires when it is
 * reached), so its distance to now is read unambiguously from the modular difference. Redis's
 * clock is wall-clock time and can step back (or a failover can move rows to a server whose clock
 * is behind): a stored time more than one bucket ahead (by more than the half microtick a grant
 * rounds to at a fractional rate) is then rewritten one bucket ahead, an empty bucket that refills
 * from now, starting a run with no grant in it (refunds of the grants before the step give
 * nothing), so that a step back delays a key by at most one second. The row is binary (doubles,
 * which hold those integers exactly, and the marks as an unsigned 32-bit integer) because
 * converting numbers to and from text cost Redis more than the arithmetic; for the same reason the
 * expiry goes to Redis as text formatted with %d (Redis would format a Lua number argument as a
 * 17-digit double). A value not in this format (not 45 bytes, or not starting with the format byte,
 * such as the rows of earlier builds, which live at most a second) reads as no row: a full bucket.
 * Replicas that declare different rates for one pace (a deploy that changes `perSecond`) share its
 * rows: a reserve reads a row written at another rate as the same moments in its own microticks
 * (the bucket as far from full in time), and a refund leaves such a row alone. The scripts are
 * straight-line code: a Lua local function is a closure built anew on every call.
 */
const CLOCK = `
local rate = tonumber(ARGV[1])
local wrap = 4294967296 * rate
local time = redis.call('TIME')
local now = ((time[1] * 1000000 + time[2]) % 4294967296) * rate
`

/**
 * Takes one unit if the bucket holds one. `spent` is how far ahead of now the stored time is; a
 * key whose time has come (or no key, or a value not in the row's format) is a full bucket, and a
 * grant on it begins a new run, so the rest of the row is read only when the run goes on. The
 * reply is one binary string of doubles, little-endian (a table reply cost Redis a tenth of the
 * script's time, converting it): refused, 8 bytes, the wait in ms; granted, 32 bytes, the whole
 * units left and, for the refund, the run, the grant's number in it and its time.
 */
const RESERVE = `${CLOCK}
local row = redis.pcall('GET', KEYS[1])
local at = math.floor(now + 0.5) % wrap
local after = 1000000
local run = at
local count = 1
local marks = 0
if ${IS_ROW} then
  local _, full, since, grants, last, refunded, written = struct.unpack('${ROW}', row)
  if written ~= rate then
    full = math.floor(full / written * rate + 0.5) % wrap
    since = math.floor(since / written * rate + 0.5) % wrap
  end
  local spent = (full - now) % wrap
  if spent > 1000000 * rate + 0.5 and spent <= wrap / 2 then
    redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, math.floor(now + 1000000 * rate + 0.5) % wrap, at, 0, at, 0, rate), 'PX', '1000')
    return struct.pack('<d', 1000 / rate)
  end
  if spent > 0 and spent <= wrap / 2 then
    after = spent + 1000000
    run = since
    count = grants + 1
    marks = refunded * 2 % 4294967296
  end
end
local shortfall = after - 1000000 * rate
if shortfall > 0.5 then
  return struct.pack('<d', shortfall / rate / 1000)
end
redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, math.floor(now + after + 0.5) % wrap, run, count, at, marks, rate), 'PX', string.format('%d', math.ceil(after / rate / 1000)))
return struct.pack('<dddd', math.floor((0.5 - shortfall) / 1000000), run, count, at)
`

/**
 * Gives back grant number ARGV[3] of the run that began at ARGV[2], made at ARGV[4], by
 * `Pace._giveBack`'s rule, counted from the latest grant (`ahead`: how far the stored time is past
 * it): nothing once the run is over (no key, a value not in the row's format, or another run) or
 * when the row was written at another rate (its times are counted in other microticks); the run's
 * latest grant gives its unit and uncounts; any other gives what the later grants still kept leave
 * room for, and is marked refunded (the marks are counted byte by byte: LuaBitOp's operations take
 * doubles, and a multiplication that spreads the bytes' sums would pass 2^51, where it stops
 * reading them exactly). A grant already refunded (uncounted as the latest, or marked) gives
 * nothing again: ioredis resends a command whose answer a lost connection kept from it, and Redis
 * may have run it already; not when its number was given again (an uncounted latest grant's goes to
 * the next grant), nor when 32 grants or more came after it (no mark records it): docs/stores.md
 * says what such a resend gives. The marks move down one when the latest grant is uncounted, so the
 * latest grant's own mark (bit 0) is set when it was refunded before the grant after it was. A key
 * left at or before the latest grant is full and goes without a reading of the clock (a stranger's
 * rejected exchange); one whose time stays keeps its expiry (only the mark changes); one that moves
 * is written with the expiry its new time calls for, one second at most: a time more than a bucket
 * ahead (by more than the half microtick a grant rounds to, as the reserve script reads it) means
 * Redis's clock stepped back since the grants, and the key lives no longer than a reserve would let
 * it (which rewrites such a time one bucket ahead).
 */
const REFUND = `
local row = redis.pcall('GET', KEYS[1])
if not (${IS_ROW}) then return 0 end
local _, full, since, grants, last, marks, written = struct.unpack('${ROW}', row)
if since ~= tonumber(ARGV[2]) or written ~= tonumber(ARGV[1]) then return 0 end
local span = 4294967296 * ARGV[1]
local ahead = (full - last) % span
local left
if grants == tonumber(ARGV[3]) then
  if marks % 2 == 1 then return 0 end
  left = ahead - 1000000
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
  left = math.min(ahead - 1000000 + (last - ARGV[4]) % span, math.max(ahead - 1000000, math.min(ahead, (later - bits) * 1000000)))
  if later < 32 then marks = bit.bor(bit.tobit(marks), bit.lshift(1, later)) % 4294967296 end
end
if left <= 0.5 then
  redis.call('DEL', KEYS[1])
  return 1
end
if left >= ahead then
  redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, full, since, grants, last, marks, written), 'KEEPTTL')
  return 1
end
${CLOCK}
local spent = (last + left - now) % wrap
if spent == 0 or spent > wrap / 2 then
  redis.call('DEL', KEYS[1])
else
  if spent > 1000000 * rate + 0.5 then spent = 1000000 * rate end
  redis.call('SET', KEYS[1], struct.pack('${ROW}', ${ROW_FORMAT}, (last + left) % wrap, since, grants, last, marks, rate), 'PX', string.format('%d', math.ceil(spent / rate / 1000)))
end
return 1
`

/**
 * A pace name as it appears in Redis keys, with no ':' in it (':' as %3A, and '%' as %25), so that
 * the first ':' after it ends it: otherwise pace "/a" with key "b:c" and pace "/a:b" with key "c"
 * would share one Redis key. A name without either character is written as it is.
 */
export function keyName (name: string): string {
  return name.replace(/[%:]/g, found => found === ':' ? '%3A' : '%25')
}

/** @internal The scripts' text, for tests that run them on a clock of their own. */
export const SCRIPTS = { reserve: RESERVE, refund: REFUND } as const

/** The highest rate the scripts' microticks keep exact (see above), per second. */
export const MAX_RATE = 2 ** 21

/** The part of an ioredis client (`Redis` or `Cluster`) the store uses. */
export interface RedisClientLike {
  defineCommand (name: string, definition: { numberOfKeys: number, lua: string }): void
}

/** The reserve script's reply: a refusal, the wait in ms; a grant, the units left, the run, the grant's number and its time. */
export const REFUSAL_BYTES = 8
export const GRANT_BYTES = 32

/**
 * The commands `defineCommand` adds (ioredis loads each script once and calls it by SHA). The
 * reserve script's reply is read as it came (the `Buffer` form of the command), not as text.
 */
export interface PaceCommands {
  exchangepaceReserveBuffer (key: string, perSecond: number): Promise<Buffer>
  exchangepaceRefund (key: string, perSecond: number, run: number, count: number, at: number): Promise<number>
}

/** Defines the scripts on `client` as commands, and returns it as what calls them. */
export function defineCommands (client: RedisClientLike): PaceCommands {
  client.defineCommand('exchangepaceReserve', { numberOfKeys: 1, lua: RESERVE })
  client.defineCommand('exchangepaceRefund', { numberOfKeys: 1, lua: REFUND })
  return client as unknown as PaceCommands
}
