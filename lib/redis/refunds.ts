/**
 * The refunds a RedisStore has yet to send. The plugin decides a refund as the answer is handed
 * over (its onSend hook), and the response is written in that same turn of the event loop: a
 * refund sent at once would be written to Redis before the response, and a write costs the event
 * loop a system call. So a refund waits here until the code that asked for it is done
 * (process.nextTick), or until the store sends its next command, whichever comes first.
 *
 * Invariant: the store's commands reach its client in the order they were asked for, refunds
 * included, so a replica's own requests meet its refunds exactly as one in-process Pace would
 * (a reserve asked after a refund runs after it in Redis). Every command the store sends other
 * than a refund is sent after `flush`.
 */
export class Refunds {
  #queued: Array<() => void> = []

  /** Queues `send`, which sends one refund (and hears of its failure itself). */
  add (send: () => void): void {
    if (this.#queued.push(send) === 1) process.nextTick(this.flush)
  }

  /** Sends every queued refund, in the order they were queued. */
  readonly flush = (): void => {
    const queued = this.#queued
    if (queued.length === 0) return
    this.#queued = []
    for (const send of queued) send()
  }
}
