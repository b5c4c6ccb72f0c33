/**
 * What the plugin says of, and does with, the values an app hands it (options, what a function it
 * was given returned): how an error names one, and whether it is a Promise where none may be.
 */

/** A value as an error message shows it: a string quoted, an object as JSON, a function as such. */
export function describe (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'string') return JSON.stringify(value)
  // JSON would print NaN and Infinity as null.
  if (typeof value === 'number') return String(value)
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

/** Whether `value` is a Promise (or another thenable), which a synchronous option must not return. */
export function isThenable (value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** Handles a rejection of a Promise left behind: Node would end the process on an unhandled one. */
export function ignoreRejection (): void {}
