import t from 'tap'
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

/** Whether the tests run under CI, where what a test needs must be there (.ci/run installs it). */
export function underCI (): boolean {
  return process.env.CI !== undefined && process.env.CI !== '' && process.env.CI !== 'false'
}
