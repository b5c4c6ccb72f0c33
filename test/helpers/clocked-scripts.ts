import type { Redis } from 'ioredis'
import { SCRIPTS } from '../../lib/redis-scripts.js'

/**
 * The store's Lua scripts on a clock the test passes, for tests that need Redis's time to move as
 * they say: TIME is read from the last argument (in microseconds), and every expiry is 10 minutes
 * (a history runs faster or slower than the time it simulates; other tests check that a key
 * expires when its bucket is full again).
 */
export function onTestClock (script: string): string {
  const clocked = script.replace("redis.call('TIME')", '{0, ARGV[#ARGV]}')
  const lasting = clocked.replace(/string\.format\('%d', math\.ceil\((after|spent) \/ rate \/ 1000\)\)/g, "'600000'")
  if (clocked === script || lasting === clocked) throw new Error('the scripts changed: update onTestClock')
  return lasting
}

export interface ClockedCommands {
  /** The reserve script's reply as it came: 8 bytes (refused: the wait) or 32 (granted: left, run, number, time), doubles. */
  clockedReserveBuffer (key: string, perSecond: number, micros: number): Promise<Buffer>
  clockedRefund (key: string, perSecond: number, run: number, count: number, at: number, micros: number): Promise<number>
}

/** Defines the clocked scripts on `client` as `clockedReserve` and `clockedRefund`. */
export function defineClocked (client: Redis): Redis & ClockedCommands {
  client.defineCommand('clockedReserve', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.reserve) })
  client.defineCommand('clockedRefund', { numberOfKeys: 1, lua: onTestClock(SCRIPTS.refund) })
  return client as Redis & ClockedCommands
}
