// A fault-injecting TCP proxy, in the manner of Toxiproxy, for the tests and the benchmark: the
// random fault schedules between app replicas and Redis (test/redis/faults.test.ts, the bench's
// faults part) and the latency part's delayed round trips start it through here. Plain JavaScript,
// as tap runs tests without type-checking them; the types are in JSDoc.
//
// A proxy listens on a loopback port free at run time and forwards every connection to one target.
// Its sockets send at once (TCP_NODELAY), as Redis's and ioredis's do: a proxy that waited to
// gather small writes (Nagle's algorithm) would add up to the peer's delayed-ACK time, 40 ms on
// Linux, to a command written on its own while another's answer is out.
// Faults are added and removed while connections are open; each applies to the bytes and
// connections it meets while it is on:
// - `latency`: every chunk is held `ms` (plus or minus up to `jitterMs`, uniformly) before it is
//   passed on, in each direction named; chunks keep their order (a chunk never overtakes the one
//   before it), as TCP's do. Sub-millisecond delays are kept by polling the event loop for the last
//   1.5 ms of a wait, as Node's timers count whole milliseconds.
// - `stall`: bytes are held, the connection stays open; they are passed on, in order, once the
//   stall is removed (as TCP delivers once a partition heals). The reader is paused meanwhile, so
//   the kernel's buffers fill and the sender's writes back up, as on a real link.
// - `reset`: every open connection is closed with a TCP RST on both sides, and every connection
//   made while the fault is on is reset as soon as it is accepted.
// - `half-open`: the bytes of one direction (or both) are dropped, on every connection open while
//   the fault is on: no FIN, no RST, the other side learns nothing (as when a host or a link dies
//   without a word, a NAT forgets the connection, or a partition drops one way). A byte stream
//   that lost bytes cannot go on, so removing the fault resets (RST) the connections that lost
//   some, as a peer that is back answers a connection it no longer knows at the sender's next
//   segment (TCP would send that segment after its retransmission backoff, up to minutes later:
//   the proxy does it at once); connections made afterwards are sound.
// - `slow-close`: when one side closes (FIN or RST), the other side learns of it `delayMs` later.

import { fork } from 'node:child_process'
import { once } from 'node:events'
import { connect, createServer } from 'node:net'
import { fileURLToPath } from 'node:url'

/**
 * @typedef {'upstream' | 'downstream' | 'both'} Direction `upstream` is the client's bytes to the
 *   target, `downstream` the target's answers to the client.
 * @typedef {{ kind: 'latency', ms: number, jitterMs?: number, direction?: Direction }} LatencyFault
 * @typedef {{ kind: 'stall', direction?: Direction }} StallFault
 * @typedef {{ kind: 'reset' }} ResetFault
 * @typedef {{ kind: 'half-open', direction?: Direction }} HalfOpenFault `direction` defaults to
 *   `downstream`: the target's answers are lost, the requests still reach it.
 * @typedef {{ kind: 'slow-close', delayMs: number }} SlowCloseFault
 * @typedef {LatencyFault | StallFault | ResetFault | HalfOpenFault | SlowCloseFault} Fault
 *
 * @typedef {object} FaultProxy
 * @property {string} host where it listens (loopback)
 * @property {number} port where it listens, free when it started
 * @property {(fault: Fault) => Promise<number>} add turns `fault` on; resolves with its id
 * @property {(id: number) => Promise<void>} remove turns the fault `id` off (an unknown id: nothing)
 * @property {() => Promise<void>} clear turns every fault off
 * @property {() => Promise<{ connections: number, accepted: number, faults: Fault[] }>} state the
 *   connections open now and accepted since the start, and the faults on
 * @property {() => Promise<void>} close stops listening, destroys every connection, and resolves
 *   once the listener is closed (for a forked proxy, once its process exited)
 */

const DIRECTIONS = new Set(['upstream', 'downstream', 'both'])
const KINDS = new Set(['latency', 'stall', 'reset', 'half-open', 'slow-close'])
/** How long before a delayed chunk is due the proxy stops sleeping on a timer and polls instead. */
const POLL_MS = 1.5

function nonNegative (fault, name) {
  const value = fault[name]
  if (!Number.isFinite(value) || value < 0) throw new TypeError(`fault-proxy: ${fault.kind}'s ${name} must be a number >= 0, got ${String(value)}`)
}

/** Checks `fault` and returns it with its direction filled in. */
function validated (fault) {
  if (fault === null || typeof fault !== 'object' || !KINDS.has(fault.kind)) {
    throw new TypeError(`fault-proxy: a fault's kind must be one of ${[...KINDS].join(', ')}, got ${String(fault?.kind)}`)
  }
  if (fault.kind === 'latency') {
    nonNegative(fault, 'ms')
    nonNegative({ jitterMs: 0, ...fault }, 'jitterMs')
  }
  if (fault.kind === 'slow-close') nonNegative(fault, 'delayMs')
  const direction = fault.direction ?? (fault.kind === 'half-open' ? 'downstream' : 'both')
  if (!DIRECTIONS.has(direction)) throw new TypeError(`fault-proxy: a fault's direction must be upstream, downstream or both, got ${String(direction)}`)
  return { ...fault, direction }
}

const covers = (fault, direction) => fault.direction === 'both' || fault.direction === direction

/**
 * One direction of one connection: bytes read from `source` and written to `sink`, through a
 * queue ordered by when each chunk is due.
 */
class Pipe {
  /** @type {{ chunk: Buffer | null, due: number }[]} a null chunk is the end of the stream */
  #queue = []
  #lastDue = 0
  #timer = null
  #poll = null
  #waitingDrain = false
  stalled = false
  dropped = false

  constructor (proxy, direction, source, sink) {
    this.proxy = proxy
    this.direction = direction
    this.source = source
    this.sink = sink
    source.on('data', chunk => this.#take(chunk))
    source.on('end', () => this.#take(null))
    sink.on('drain', () => {
      this.#waitingDrain = false
      this.flow()
    })
  }

  #take (chunk) {
    if (this.dropped) return
    const delay = this.proxy.delayOf(this.direction)
    const due = Math.max(this.#lastDue, performance.now() + delay)
    this.#lastDue = due
    this.#queue.push({ chunk, due })
    this.flow()
  }

  /** Passes on every chunk that is due, unless stalled, and waits for the next. */
  flow () {
    if (this.sink.destroyed) return
    const now = performance.now()
    while (!this.stalled && !this.dropped && !this.#waitingDrain && this.#queue.length > 0 && this.#queue[0].due <= now) {
      const { chunk } = this.#queue.shift()
      if (chunk === null) this.proxy.closeLater(() => this.sink.end())
      else if (!this.sink.write(chunk)) this.#waitingDrain = true
    }
    if (this.stalled || this.#waitingDrain) this.source.pause()
    else this.source.resume()
    this.#wake()
  }

  #wake () {
    clearTimeout(this.#timer)
    clearImmediate(this.#poll)
    this.#timer = this.#poll = null
    if (this.stalled || this.dropped || this.#waitingDrain || this.#queue.length === 0) return
    const wait = this.#queue[0].due - performance.now()
    if (wait > POLL_MS) this.#timer = setTimeout(() => this.flow(), Math.floor(wait - POLL_MS + 1))
    else this.#poll = setImmediate(() => this.flow())
  }

  /** Drops every byte from now on, the held ones too. */
  drop () {
    this.dropped = true
    this.#queue.length = 0
    this.source.resume() // read and discard, so that the sender sees its bytes leave
    this.#wake()
  }

  stop () {
    clearTimeout(this.#timer)
    clearImmediate(this.#poll)
  }
}

/** One client connection and its connection to the target. */
class Link {
  constructor (proxy, client, target) {
    this.proxy = proxy
    this.client = client
    this.upstream = connect({ ...target, allowHalfOpen: true, noDelay: true })
    this.pipes = {
      upstream: new Pipe(proxy, 'upstream', client, this.upstream),
      downstream: new Pipe(proxy, 'downstream', this.upstream, client)
    }
    this.upstream.pause() // nothing read before the first flow, which the stall state decides
    for (const [socket, other] of [[client, this.upstream], [this.upstream, client]]) {
      // A side that fails (a RST, a refused connection) is reset on the other side too.
      socket.on('error', () => proxy.closeLater(() => reset(other)))
      socket.on('close', () => this.#closed())
    }
    this.apply()
  }

  /** Applies the faults on now: stalls and drops; a connection that lost bytes to a half-open fault now gone is reset. */
  apply () {
    const on = this.proxy.faultsOn()
    for (const [direction, pipe] of Object.entries(this.pipes)) {
      const dropping = on.some(fault => fault.kind === 'half-open' && covers(fault, direction))
      if (pipe.dropped && !dropping) {
        this.reset()
        return
      }
      pipe.stalled = on.some(fault => fault.kind === 'stall' && covers(fault, direction))
      if (dropping) pipe.drop()
      pipe.flow()
    }
  }

  reset () {
    reset(this.client)
    reset(this.upstream)
  }

  #closed () {
    if (!this.client.destroyed || !this.upstream.destroyed) return
    for (const pipe of Object.values(this.pipes)) pipe.stop()
    this.proxy.links.delete(this)
  }
}

function reset (socket) {
  if (socket.destroyed) return
  if (socket.connecting) socket.destroy() // nothing sent yet: no connection to reset
  else socket.resetAndDestroy()
}

class Proxy {
  links = new Set()
  accepted = 0
  closing = false
  /** @type {Map<number, Fault>} */
  #faults = new Map()
  #nextId = 1

  constructor (target, random) {
    this.target = target
    this.random = random
    this.server = createServer({ allowHalfOpen: true, pauseOnConnect: true, noDelay: true }, client => this.#accept(client))
  }

  #accept (client) {
    this.accepted++
    if (this.closing) {
      client.destroy()
      return
    }
    if (this.faultsOn().some(fault => fault.kind === 'reset')) {
      client.on('error', () => {})
      client.resetAndDestroy()
      return
    }
    this.links.add(new Link(this, client, this.target))
  }

  faultsOn () {
    return [...this.#faults.values()]
  }

  /** The delay of a chunk read now in `direction`: the sum of the latencies on, each with its jitter. */
  delayOf (direction) {
    let delay = 0
    for (const fault of this.#faults.values()) {
      if (fault.kind !== 'latency' || !covers(fault, direction)) continue
      const jitter = fault.jitterMs ?? 0
      delay += Math.max(0, fault.ms + (2 * this.random() - 1) * jitter)
    }
    return delay
  }

  /** Runs `close` now, or after the slow close's delay while one is on. */
  closeLater (close) {
    const slow = this.faultsOn().find(fault => fault.kind === 'slow-close')
    if (slow === undefined) close()
    else setTimeout(close, slow.delayMs)
  }

  add (fault) {
    const checked = validated(fault)
    const id = this.#nextId++
    this.#faults.set(id, checked)
    if (checked.kind === 'reset') for (const link of this.links) link.reset()
    else for (const link of this.links) link.apply()
    return id
  }

  remove (id) {
    if (!this.#faults.delete(id)) return
    for (const link of this.links) link.apply()
  }

  clear () {
    this.#faults.clear()
    for (const link of this.links) link.apply()
  }

  state () {
    return { connections: this.links.size, accepted: this.accepted, faults: this.faultsOn() }
  }

  async close () {
    this.closing = true
    const closed = new Promise(resolve => this.server.close(resolve))
    for (const link of this.links) {
      link.client.destroy()
      link.upstream.destroy()
    }
    await closed
  }
}

/**
 * Starts a proxy in this process to `target` (`{ host, port }`), listening on `listen.host`
 * (default loopback) and `listen.port` (default: one free now). `random` draws the jitter (pass a
 * seeded one for a schedule that replays).
 *
 * @param {{ target: { host?: string, port: number }, listen?: { host?: string, port?: number }, random?: () => number }} options
 * @returns {Promise<FaultProxy>}
 */
export async function startFaultProxy ({ target, listen = {}, random = Math.random }) {
  const proxy = new Proxy({ host: target.host ?? '127.0.0.1', port: target.port }, random)
  const host = listen.host ?? '127.0.0.1'
  proxy.server.listen(listen.port ?? 0, host)
  await once(proxy.server, 'listening')
  const sync = fn => async (...args) => fn(...args)
  return {
    host,
    port: proxy.server.address().port,
    add: sync(fault => proxy.add(fault)),
    remove: sync(id => proxy.remove(id)),
    clear: sync(() => proxy.clear()),
    state: sync(() => proxy.state()),
    close: () => proxy.close()
  }
}

/**
 * Starts the same proxy in a process of its own, so that its polling for sub-millisecond delays
 * takes no time from the caller's event loop; the methods are the same, through IPC. The process
 * exits when the caller does.
 *
 * @param {{ target: { host?: string, port: number }, listen?: { host?: string, port?: number } }} options
 * @returns {Promise<FaultProxy>}
 */
export async function forkFaultProxy ({ target, listen = {} }) {
  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const exited = once(child, 'exit')
  const pending = new Map()
  let nextCall = 0
  child.on('message', ({ call, value, error }) => {
    const { resolve, reject } = pending.get(call)
    pending.delete(call)
    if (error === undefined) resolve(value)
    else reject(new TypeError(error))
  })
  const request = (method, ...args) => new Promise((resolve, reject) => {
    const call = nextCall++
    pending.set(call, { resolve, reject })
    child.send({ call, method, args })
  })
  const { host, port } = await request('start', { target, listen })
  return {
    host,
    port,
    add: fault => request('add', fault),
    remove: id => request('remove', id),
    clear: () => request('clear'),
    state: () => request('state'),
    close: async () => {
      await request('close')
      child.disconnect()
      await exited
    }
  }
}

/** The forked proxy's side: one proxy, driven by the parent's messages, gone with the parent. */
async function serve () {
  let proxy = null
  process.on('disconnect', () => process.exit(0))
  process.on('message', async ({ call, method, args }) => {
    try {
      if (method === 'start') {
        proxy = await startFaultProxy(args[0])
        process.send({ call, value: { host: proxy.host, port: proxy.port } })
      } else {
        process.send({ call, value: await proxy[method](...args) })
      }
    } catch (err) {
      process.send({ call, error: err.message })
    }
  })
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === '--serve') await serve()
