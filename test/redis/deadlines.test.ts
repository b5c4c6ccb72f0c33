import t from 'tap'
import { Deadlines, Waiting } from '../../lib/redis/deadlines.js'
import { intercept } from '../helpers/intercept.js'

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
    this.log.push(this.done ? this.name : `${this.name} (not done)`)
    this.#resolve()
  }
}

const TIMEOUT_MS = 1

/** Deadlines of TIMEOUT_MS on a test clock, and the log their expired waits write to. */
function setup () {
  const { clock, set, read } = testClock()
  const deadlines = new Deadlines(TIMEOUT_MS, clock)
  const log: string[] = []
  const named = (name: string) => new Named(name, log)
  return { deadlines, set, read, log, named }
}

/** A wait that, as it expires, starts `then`. */
function retrying (deadlines: Deadlines, log: string[], then: Waiting): Named {
  return new class extends Named {
    override expire (): void {
      super.expire()
      deadlines.start(then)
    }
  }('first', log)
}

t.test('a wait with no answer expires once the timeout has passed on the clock, and only then', async t => {
  const { deadlines, set, read, log, named } = setup()
  const a = named('a')
  deadlines.start(a)
  set(0.5)
  await read()
  t.same(log, [], 'not due at half the timeout: the check schedules the next')
  set(1)
  await a.expired
  t.same(log, ['a'])
})

t.test('an answered wait never expires, and leaves the queue at the next check', async t => {
  const { deadlines, set, read, log, named } = setup()
  const a = named('a')
  deadlines.start(a)
  t.equal(deadlines.answer(a), true, 'the answer claims the wait')
  t.equal(deadlines.answer(a), false, 'once')
  // With no wait left the timer holds nothing alive: this one keeps the test running until the check.
  const alive = setTimeout(() => {}, 60_000)
  t.teardown(() => clearTimeout(alive))
  set(5)
  await read()
  t.same(log, [])
  const b = named('b')
  deadlines.start(b)
  set(6)
  await b.expired
  t.same(log, ['b'], 'the queue had emptied: the next wait got a check of its own')
})

t.test('an answered head is dropped and the next wait keeps its own deadline', async t => {
  const { deadlines, set, read, log, named } = setup()
  const a = named('a')
  deadlines.start(a)
  set(0.5)
  const b = named('b')
  deadlines.start(b)
  deadlines.answer(a)
  set(1)
  await read()
  t.same(log, [], 'a answered; b is due at 1.5, not at a\'s deadline')
  set(1.5)
  await b.expired
  t.same(log, ['b'])
})

t.test('every due wait expires at one check, in the order they began', async t => {
  const { deadlines, set, read, log, named } = setup()
  const waits = ['a', 'b', 'c'].map(named)
  for (const [i, wait] of waits.entries()) {
    set(i * 0.25)
    deadlines.start(wait)
  }
  deadlines.answer(waits[1])
  set(3)
  await read()
  t.same(log, ['a', 'c'], 'at the one check that read the clock at 3')
  t.equal(deadlines.answer(waits[0]), false, 'an answer after the expiry comes too late')
})

t.test('a wait started by an expiring one is queued and expires in its turn', async t => {
  const { deadlines, set, log, named } = setup()
  const retried = named('retried')
  const first = retrying(deadlines, log, retried)
  deadlines.start(first)
  set(1)
  await first.expired
  set(2)
  await retried.expired
  t.same(log, ['first', 'retried'])
})

t.test('an answer in the middle of the queue leaves the waits around it their own deadlines', async t => {
  const { deadlines, set, read, log, named } = setup()
  const waits = ['a', 'b', 'c', 'd'].map(named)
  for (const [i, wait] of waits.entries()) {
    set(i * 0.25)
    deadlines.start(wait)
  }
  deadlines.answer(waits[3])
  deadlines.answer(waits[1])
  set(1.2)
  await read()
  t.same(log, ['a'], 'a is due at 1; c at 1.5')
  set(1.5)
  await waits[2].expired
  const e = named('e')
  deadlines.start(e)
  set(10)
  await e.expired
  t.same(log, ['a', 'c', 'e'], 'b and d, answered, never expire')
})

t.test('a wait started into a queue that an expiring wait left non-empty is checked in its turn', async t => {
  const { deadlines, set, log, named } = setup()
  const pending = named('pending')
  const retried = named('retried')
  const first = retrying(deadlines, log, retried)
  deadlines.start(first)
  set(0.5)
  deadlines.start(pending)
  set(1)
  await first.expired
  set(1.5)
  await pending.expired
  set(2)
  await retried.expired
  t.same(log, ['first', 'pending', 'retried'])
})

t.test('the timer holds the process alive while a wait waits, and no longer', async t => {
  const timers = () => process.getActiveResourcesInfo().filter(resource => resource === 'Timeout').length
  const { deadlines, set, named } = setup()
  const before = timers()
  const a = named('a')
  deadlines.start(a)
  t.equal(timers(), before + 1, 'a wait holds it')
  deadlines.answer(a)
  t.equal(timers(), before, 'answered: the timer stays for its check, but holds nothing')
  const b = named('b')
  deadlines.start(b)
  t.equal(timers(), before + 1, 'a new wait before the check holds it again')
  set(1)
  await b.expired
})

t.test('an expire that throws leaves the waits after it their checks', async t => {
  const { deadlines, set, log, named } = setup()
  class Throwing extends Named {
    override expire (): void {
      super.expire()
      throw new Error('a logger that throws')
    }
  }
  // The error leaves the check as an uncaught exception, which tap's own handler would count as a failure.
  const thrown = intercept('uncaughtException')
  const first = new Throwing('first', log)
  const second = named('second')
  deadlines.start(first)
  set(0.5)
  deadlines.start(second)
  set(1)
  t.match(await thrown, { message: 'a logger that throws' })
  set(2)
  await second.expired
  t.same(log, ['first', 'second'])
})
