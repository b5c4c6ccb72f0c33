// The scripts bench/parts/capacity/capacity.js calls besides the stores' own: the floors of a reservation's work
// in Redis, and a prototype that reserves three paces' keys in one call.

import { SCRIPTS } from '../../../dist/redis/scripts.js'

/** A script call that does nothing: what every call costs Redis before any work. */
export const EMPTY = 'return {1, 2}'

/** The floor of a reservation: TIME, GET and SET PX of a 45-byte row (a reserve's row), no arithmetic. */
export const FLOOR = `
local time = redis.call('TIME')
local row = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '${'r'.repeat(45)}', 'PX', '1000')
return time[2]
`

/** The same with the row unpacked and packed by Lua's struct library, as the reserve script does. */
export const FLOOR_STRUCT = `
local time = redis.call('TIME')
local now = time[1] * 1000000 + time[2]
local row = redis.call('GET', KEYS[1])
local full = now
if row and #row == 45 then
  local _, f = struct.unpack('<BddddI4d', row)
  full = f
end
redis.call('SET', KEYS[1], struct.pack('<BddddI4d', 2, now, full, 1, now, 0, 1), 'PX', '1000')
return time[2]
`

/**
 * A prototype, to weigh one script per request against one per pace: exchangepace's reserve script
 * run for each key of the call (KEYS[i] with ARGV[2i - 1], its rate, and ARGV[2i], its window in ms,
 * '1000' for a one-second pace), answering a table of the replies. It costs what a real one would
 * in the common case, where every pace grants (a real one would refuse all three when one refuses,
 * and read TIME once, not three times); on Redis Cluster its keys must share a slot (a hash tag),
 * which puts every key of the route on one shard.
 */
export const RESERVE_THREE = `
local function reserve (key, rate, windowMs)
${SCRIPTS.reserve.replaceAll('KEYS[1]', 'key').replaceAll('ARGV[1]', 'rate').replaceAll('ARGV[2]', 'windowMs')}
end
local replies = {}
for i = 1, #KEYS do
  replies[i] = reserve(KEYS[i], ARGV[2 * i - 1], ARGV[2 * i])
end
return replies
`
