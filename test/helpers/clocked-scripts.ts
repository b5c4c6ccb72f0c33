import type { Redis } from 'ioredis'
import { SCRIPTS } from '../../lib/redis/scripts.js'
import { onTestClock } from './redis.js'

/**
 * The store's Lua scripts on a clock the test passes (see `onTestClock`), called by hand: for tests
 * that drive the scripts directly rather than through a RedisStore (`ClockedClient`). A one-second
 * pace is called with a window of 1000 ms.
 */
export interface ClockedCommands {
  /** The reserve script's reply as it came: 8 bytes (refused: the wait) or 32 (granted: left, run, number, time), doubles. */
  clockedReserveBuffer (key: string, limit: number, windowMs: number, micros: number): Promise<Buffer>
  clockedRefund (key: string, limit: number, run: number, count: number, at: number, windowMs: number, micros: number): Promise<number>
}

/** Defines the clocked scripts on `client` as `clockedReserve` and `clockedRefund`. */
export function defineClocked (client: Redis): Redis & ClockedCommands {
  client.defineCommand('clockedReserve', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.reserve) })
  client.defineCommand('clockedRefund', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.refund) })
  return client as Redis & ClockedCommands
}
