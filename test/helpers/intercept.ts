/**
 * Resolves with the next `event` the process emits, which tap's own listeners (which would fail
 * the test) do not see: they are set aside until it comes, then put back.
 */
export function intercept (event: 'uncaughtException' | 'unhandledRejection'): Promise<unknown> {
  return new Promise(resolve => {
    const taps = process.rawListeners(event)
    process.removeAllListeners(event)
    process.once(event, (reason: unknown) => {
      for (const listener of taps) process.on(event, listener as (reason: unknown) => void)
      resolve(reason)
    })
  })
}
