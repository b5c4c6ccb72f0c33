import { defaultClock, type Clock } from './pace.js'

/**
 * A call waiting for an answer, which expires unless it is marked `done` within the timeout. Whoever
 * sets `done` first decides: the answer (which sets it) or the deadline (which sets it, then calls
 * `expire`).
 */
export abstract class Waiting {
  /** The answer came, or the wait expired. */
  done = false
  /** @internal When the wait began, on the deadlines' clock. */
  startedAt = 0
  /** @internal The wait that began after this one, in the queue. */
  next: Waiting | null = null

  /** Called once, when the timeout passed with no answer; `done` is already set. */
  abstract expire (): void
}

/**
 * One timeout for many waits, with one timer for all of them. A timer per wait costs each call a
 * Timeout object, its insertion into and removal from Node's timer list, and the binding calls that
 * ref and unref the timer handle when the count of live timers passes through zero: more than the
 * rest of the wait's bookkeeping together.
 *
 * Invariants:
 * - the queue holds the waits in the order they began, which is the order of their deadlines (one
 *   timeout, a monotonic clock);
 * - a wait leaves the queue only when the check reaches it: answered (its `done` set by the
 *   answer) or due (the check expires it), so an answered wait costs nothing more than its flag;
 * - a check is scheduled exactly while the queue is not empty, for the head's deadline.
 *
 * A check waits for the event loop's current round of socket reads (setImmediate) before it
 * decides, because timers run before them: after a stall (a long GC pause, a sweep of a big table)
 * the timer fires late, and an answer that came in time is then still unread.
 */
export class Deadlines {
  readonly timeoutMs: number
  readonly #now: Clock
  #head: Waiting | null = null
  #tail: Waiting | null = null

  constructor (timeoutMs: number, now: Clock = defaultClock) {
    this.timeoutMs = timeoutMs
    this.#now = now
  }

  /** Starts `waiting`'s wait: it expires when the timeout passes before its `done` is set. */
  start (waiting: Waiting): void {
    waiting.startedAt = this.#now()
    if (this.#tail === null) {
      this.#head = waiting
      this.#schedule(this.timeoutMs)
    } else {
      this.#tail.next = waiting
    }
    this.#tail = waiting
  }

  #schedule (delayMs: number): void {
    setTimeout(this.#check, delayMs)
  }

  readonly #check = (): void => {
    setImmediate(this.#expireDue)
  }

  /** Drops the answered waits at the head and expires the due ones, then schedules the next check. */
  readonly #expireDue = (): void => {
    const now = this.#now()
    let head = this.#head as Waiting
    while (head.done || now - head.startedAt >= this.timeoutMs) {
      const next = head.next
      head.next = null
      this.#head = next
      if (next === null) this.#tail = null
      if (!head.done) {
        head.done = true
        head.expire()
      }
      if (next === null) return
      head = next
    }
    this.#schedule(head.startedAt + this.timeoutMs - now)
  }
}
