import { defaultClock, type Clock } from '../bucket/pace.js'

/**
 * A call waiting for an answer. It ends once: answered (`Deadlines.answer` claims it) or expired
 * (the timeout passed first, and `expire` is called).
 */
export abstract class Waiting {
  /** The wait has ended: answered, or expired. */
  done = false
  /** @internal When the wait began, on the deadlines' clock. */
  startedAt = 0
  /** @internal The waits queued before and after this one, while it waits. */
  previous: Waiting | null = null
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
 * - the queue holds exactly the waits that have begun and not ended, in the order they began,
 *   which is the order of their deadlines (one timeout, a monotonic clock): an answer takes its
 *   wait out at once, so the queue keeps nothing an answer has released, and its head is the
 *   oldest unanswered wait;
 * - while the queue is not empty a check is scheduled, no later than the head's deadline; a check
 *   finding the head not yet due (it was answered meanwhile) schedules the next for the new head.
 *
 * The timer holds the process alive exactly while the queue is not empty, as a timer per wait
 * would: once every wait has been answered it is unref'd (not cleared, which would cost what the
 * timer per wait cost), and it is ref'd again when a wait begins before it fires.
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
  /** A check is on its way: its timer, then its setImmediate. */
  #scheduled = false
  /**
   * The latest check's timer, set by the first `start`. Once it has fired, ref and unref change
   * nothing, so they may be called on it whenever the queue fills or empties.
   */
  #timer: NodeJS.Timeout | null = null

  constructor (timeoutMs: number, now: Clock = defaultClock) {
    this.timeoutMs = timeoutMs
    this.#now = now
  }

  /** Starts `waiting`'s wait: it expires when the timeout passes before `answer` claims it. */
  start (waiting: Waiting): void {
    waiting.startedAt = this.#now()
    const tail = this.#tail
    if (tail === null) this.#head = waiting
    else tail.next = waiting
    waiting.previous = tail
    this.#tail = waiting
    if (!this.#scheduled) this.#schedule(this.timeoutMs)
    else if (tail === null) (this.#timer as NodeJS.Timeout).ref()
  }

  /** Ends `waiting`'s wait with its answer. False when it had already ended (it expired): the answer came too late. */
  answer (waiting: Waiting): boolean {
    if (waiting.done) return false
    waiting.done = true
    this.#remove(waiting)
    if (this.#head === null) (this.#timer as NodeJS.Timeout).unref()
    return true
  }

  #remove (waiting: Waiting): void {
    const { previous, next } = waiting
    if (previous === null) this.#head = next
    else previous.next = next
    if (next === null) this.#tail = previous
    else next.previous = previous
    waiting.previous = null
    waiting.next = null
  }

  #schedule (delayMs: number): void {
    this.#scheduled = true
    this.#timer = setTimeout(this.#check, delayMs)
  }

  readonly #check = (): void => {
    setImmediate(this.#expireDue)
  }

  /**
   * Expires the due waits, oldest first, then schedules the next check for the head. Until then
   * the check counts as scheduled, so that a wait an `expire` starts schedules nothing of its own
   * (its check could come after the head's deadline). Should an `expire` throw, the error goes on
   * as an uncaught exception would, and the waits after it still get their check.
   */
  readonly #expireDue = (): void => {
    const now = this.#now()
    try {
      for (let head = this.#head; head !== null && now - head.startedAt >= this.timeoutMs; head = this.#head) {
        head.done = true
        this.#remove(head)
        head.expire()
      }
    } finally {
      this.#scheduled = false
      const head = this.#head
      if (head !== null) this.#schedule(head.startedAt + this.timeoutMs - now)
    }
  }
}
