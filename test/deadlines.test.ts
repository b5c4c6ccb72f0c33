import t from 'tap'
import { Deadlines, Waiting } from '../lib/deadlines.js'

// The deadlines read a clock the test moves; only their one timer is real. A check that the timer
// starts before the test has moved the clock finds nothing due and schedules the next, so every
// assertion holds whatever the real timer does.

/** A clock the test sets; `read()` resolves once the deadlines have read it again (their check has then run to its end). */
function testClock () {
  let now = 0
  let readers: Array<() => void> = []
  const clock = () => {
    const waiting = readers
    readers = []
    for (const resolve of waiting) resolve()
    return now
  }
  return {
    clock,
    set: (ms: number) => { now = ms },
    read: () => new Promise<void>(resolve => { readers.push(resolve) })
  }
}

class Named extends Waiting {
  readonly expired: Promise<void>
  #resolve!: () => void

  constructor (readonly name: string, readonly log: string[]) {
    super()
    this.expired = new Promise(resolve => { this.#resolve = resolve })
  }

  expire (): void {
    t.equal(this.done, true, 'done is set before expire is called')
    this.log.push(this.name)
    this.#resolve()
  }
}

const TIMEOUT_MS = 1

t.test('a wait with no answer expires once the timeout has passed on the clock, and only then', async t => {
  const { clock, set, read } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const a = new Named('a', log)
  deadlines.start(a)
  set(0.5)
  await read()
  t.same(log, [], 'not due at half the timeout: the check schedules the next')
  set(1)
  await a.expired
  t.same(log, ['a'])
})

t.test('an answered wait never expires, and leaves the queue at the next check', async t => {
  const { clock, set, read } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const a = new Named('a', log)
  deadlines.start(a)
  a.done = true
  set(5)
  await read()
  t.same(log, [])
  const b = new Named('b', log)
  deadlines.start(b)
  set(6)
  await b.expired
  t.same(log, ['b'], 'the queue had emptied: the next wait got a check of its own')
})

t.test('an answered head is dropped and the next wait keeps its own deadline', async t => {
  const { clock, set, read } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const a = new Named('a', log)
  deadlines.start(a)
  set(0.5)
  const b = new Named('b', log)
  deadlines.start(b)
  a.done = true
  set(1)
  await read()
  t.same(log, [], 'a answered; b is due at 1.5, not at a\'s deadline')
  set(1.5)
  await b.expired
  t.same(log, ['b'])
})

t.test('every due wait expires at one check, in the order they began', async t => {
  const { clock, set } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const waits = ['a', 'b', 'c'].map(name => new Named(name, log))
  for (const [i, wait] of waits.entries()) {
    set(i * 0.25)
    deadlines.start(wait)
  }
  waits[1].done = true
  set(3)
  await Promise.all([waits[0].expired, waits[2].expired])
  t.same(log, ['a', 'c'])
})

t.test('a wait started by an expiring one is queued and expires in its turn', async t => {
  const { clock, set } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const retried = new Named('retried', log)
  class Retrying extends Named {
    override expire (): void {
      super.expire()
      deadlines.start(retried)
    }
  }
  const first = new Retrying('first', log)
  deadlines.start(first)
  set(1)
  await first.expired
  set(2)
  await retried.expired
  t.same(log, ['first', 'retried'])
})
