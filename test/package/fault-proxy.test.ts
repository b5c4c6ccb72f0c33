import t from 'tap'
import { once } from 'node:events'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
// The bench's own: plain JavaScript, as tap runs tests without type-checking them.
import { forkFaultProxy, startFaultProxy } from '../../bench/shared/fault-proxy.js'

// The fault-injecting proxy the random fault schedules and the latency part use: each kind of
// fault does to the bytes and the connections what bench/shared/fault-proxy.js says, on a plain TCP echo
// server (no Redis needed).

interface Target {
  port: number
  /** What the server received, per connection, in order of connection. */
  received: Buffer[][]
  /** The server's side of each connection. */
  sockets: Socket[]
  server: Server
}

/** An echo server on a free loopback port that records what it received. */
async function echoServer (tt: typeof t): Promise<Target> {
  const target: Target = { port: 0, received: [], sockets: [], server: createServer({ allowHalfOpen: true }) }
  target.server.on('connection', socket => {
    const chunks: Buffer[] = []
    target.received.push(chunks)
    target.sockets.push(socket)
    socket.on('error', () => {}) // reset by the proxy: the test asserts what the client saw
    socket.on('data', chunk => {
      chunks.push(chunk)
      socket.write(chunk)
    })
    socket.on('end', () => socket.end())
  })
  target.server.listen(0, '127.0.0.1')
  await once(target.server, 'listening')
  target.port = (target.server.address() as { port: number }).port
  tt.teardown(() => {
    for (const socket of target.sockets) socket.destroy()
    target.server.close()
  })
  return target
}

/** A client of the proxy that collects what it reads, and how the connection ended. */
async function client (port: number) {
  const socket = connect({ port, host: '127.0.0.1' })
  const seen = { data: Buffer.alloc(0), error: null as Error | null, ended: false, closed: false }
  socket.on('data', chunk => { seen.data = Buffer.concat([seen.data, chunk]) })
  socket.on('error', err => { seen.error = err })
  socket.on('end', () => { seen.ended = true })
  socket.on('close', () => { seen.closed = true })
  // A connection reset as it is accepted may fail before 'connect': the caller checks `seen`.
  await new Promise(resolve => {
    socket.once('connect', resolve)
    socket.once('close', resolve)
  })
  return { socket, seen }
}

async function until (what: string, check: () => boolean, timeoutMs = 5000): Promise<void> {
  for (const started = performance.now(); !check(); await sleep(2)) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what} within ${timeoutMs} ms`)
  }
}

t.test('forwards both ways and closes cleanly, connections included', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  const { socket, seen } = await client(proxy.port)
  socket.write('hello')
  await until('the echo', () => seen.data.toString() === 'hello')
  t.match(await proxy.state(), { connections: 1, accepted: 1, faults: [] })
  socket.end()
  await until('the close', () => seen.closed)
  t.ok(seen.ended, 'the target\'s FIN reached the client')
  t.equal(seen.error, null)
  await until('the proxy\'s links gone', () => target.sockets[0].destroyed)
  await sleep(20) // the proxy's own close events
  t.equal((await proxy.state()).connections, 0, 'the proxy holds no connection once both sides closed')
  const open = await client(proxy.port)
  await proxy.close()
  await until('the open connection closed by close()', () => open.seen.closed)
  const refused = await client(proxy.port)
  t.match(refused.seen.error, { code: 'ECONNREFUSED' }, 'nothing listens after close()')
})

t.test('latency holds every chunk each way, keeps their order with jitter, and stops when removed', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const { socket, seen } = await client(proxy.port)
  const id = await proxy.add({ kind: 'latency', ms: 30 })
  const sent = performance.now()
  socket.write('a')
  await until('the echo', () => seen.data.length === 1)
  t.ok(performance.now() - sent >= 60, 'a round trip takes at least 30 ms each way')
  await proxy.remove(id)
  await proxy.add({ kind: 'latency', ms: 5, jitterMs: 5 })
  const expected = Array.from({ length: 200 }, (_, i) => `<${i}>`).join('')
  for (let i = 0; i < 200; i++) {
    socket.write(`<${i}>`)
    if (i % 20 === 0) await sleep(1)
  }
  await until('every chunk back', () => seen.data.length === 1 + expected.length)
  t.equal(seen.data.toString(), 'a' + expected, 'jitter never lets a chunk overtake the one before it')
  await proxy.clear()
  t.match(await proxy.state(), { faults: [] }, 'clear() removes every fault')
  socket.end()
})

t.test('latency can be one way, and below a millisecond', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const { socket, seen } = await client(proxy.port)
  await proxy.add({ kind: 'latency', ms: 40, direction: 'downstream' })
  const sent = performance.now()
  socket.write('x')
  await until('the target reading it', () => target.received[0]?.length === 1)
  const reached = performance.now() - sent
  await until('the echo', () => seen.data.length === 1)
  t.ok(performance.now() - sent >= 40, 'the answer waited 40 ms')
  t.ok(reached < performance.now() - sent, 'the request went through before its answer came back')
  await proxy.clear()
  await proxy.add({ kind: 'latency', ms: 0.25 })
  const small = performance.now()
  socket.write('y')
  await until('the echo', () => seen.data.length === 2)
  t.ok(performance.now() - small >= 0.5, 'a quarter of a millisecond each way is kept, not rounded to nothing')
  socket.end()
})

t.test('a stall holds the bytes with the connection open, then delivers them in order', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const { socket, seen } = await client(proxy.port)
  socket.write('before')
  await until('the echo', () => seen.data.toString() === 'before')
  const id = await proxy.add({ kind: 'stall' })
  socket.write('-held')
  await sleep(50)
  t.equal(target.received[0].length, 1, 'nothing more reached the target while stalled')
  t.equal(seen.data.toString(), 'before')
  t.notOk(seen.closed, 'the connection stays open')
  await proxy.remove(id)
  await until('the held bytes', () => seen.data.toString() === 'before-held')
  const down = await proxy.add({ kind: 'stall', direction: 'downstream' })
  socket.write('!')
  await until('the target reading it', () => Buffer.concat(target.received[0]).toString() === 'before-held!')
  await sleep(30)
  t.equal(seen.data.toString(), 'before-held', 'a downstream stall holds only the answers')
  await proxy.remove(down)
  await until('the answer', () => seen.data.toString() === 'before-held!')
  socket.end()
})

t.test('a reset sends RST on open connections and on every connection made while it is on', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const open = await client(proxy.port)
  open.socket.write('x')
  await until('the echo', () => open.seen.data.length === 1)
  const id = await proxy.add({ kind: 'reset' })
  await until('the reset', () => open.seen.closed)
  t.match(open.seen.error, { code: 'ECONNRESET' })
  const during = await client(proxy.port)
  await until('the reset', () => during.seen.closed)
  t.match(during.seen.error, { code: 'ECONNRESET' }, 'a connection made during the reset is reset')
  await proxy.remove(id)
  const after = await client(proxy.port)
  after.socket.write('y')
  await until('the echo', () => after.seen.data.toString() === 'y')
  t.equal(after.seen.error, null, 'removed: connections work again')
  after.socket.end()
})

t.test('a reset reaches the client when the target itself is gone', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  await new Promise(resolve => target.server.close(resolve))
  const refused = await client(proxy.port)
  await until('the reset', () => refused.seen.closed)
  t.match(refused.seen.error, { code: 'ECONNRESET' })
})

t.test('a half-open connection drops one direction silently, and is reset when the fault ends', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const { socket, seen } = await client(proxy.port)
  const id = await proxy.add({ kind: 'half-open' })
  socket.write('lost answer')
  await until('the target reading it', () => target.received[0]?.length === 1)
  await sleep(30)
  t.equal(seen.data.length, 0, 'the answer never arrives')
  t.notOk(seen.closed, 'no FIN, no RST')
  const fresh = await client(proxy.port)
  fresh.socket.write('lost too')
  await until('the target reading it', () => target.received[1]?.length === 1)
  await proxy.remove(id)
  await until('the reset', () => seen.closed && fresh.seen.closed)
  t.equal(seen.data.length, 0, 'the answer never arrived')
  t.match([seen.error, fresh.seen.error], [{ code: 'ECONNRESET' }, { code: 'ECONNRESET' }], 'removing the fault resets the connections that lost bytes, a connection made during it too')
  const sound = await client(proxy.port)
  sound.socket.write('fine')
  await until('the echo', () => sound.seen.data.toString() === 'fine')
  const upstream = await proxy.add({ kind: 'half-open', direction: 'upstream' })
  sound.socket.write('never sent')
  await sleep(30)
  t.equal(Buffer.concat(target.received[2]).toString(), 'fine', 'an upstream half-open loses the requests')
  const other = await proxy.add({ kind: 'half-open', direction: 'upstream' })
  await proxy.remove(upstream)
  await sleep(10)
  t.notOk(sound.seen.closed, 'a connection still dropped by another fault is not reset yet')
  await proxy.remove(other)
  await until('the reset', () => sound.seen.closed)
})

t.test('a slow close tells the other side of a close only after the delay', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  const { socket, seen } = await client(proxy.port)
  socket.write('x')
  await until('the echo', () => seen.data.length === 1)
  await proxy.add({ kind: 'slow-close', delayMs: 60 })
  const closing = performance.now()
  target.sockets[0].end()
  await until('the FIN', () => seen.ended)
  t.ok(performance.now() - closing >= 60, 'the FIN waited 60 ms')
  const second = await client(proxy.port)
  second.socket.write('y')
  await until('the echo', () => second.seen.data.length === 1)
  const resetAt = performance.now()
  target.sockets[1].resetAndDestroy()
  await until('the reset', () => second.seen.closed)
  t.ok(performance.now() - resetAt >= 60, 'the RST waited 60 ms')
  t.match(second.seen.error, { code: 'ECONNRESET' })
  socket.end()
})

t.test('faults are checked', async t => {
  const target = await echoServer(t)
  const proxy = await startFaultProxy({ target: { port: target.port } })
  t.teardown(proxy.close)
  await t.rejects(proxy.add({ kind: 'flood' } as never), new TypeError('fault-proxy: a fault\'s kind must be one of latency, stall, reset, half-open, slow-close, got flood'))
  await t.rejects(proxy.add({ kind: 'latency', ms: -1 }), { message: "fault-proxy: latency's ms must be a number >= 0, got -1" })
  await t.rejects(proxy.add({ kind: 'latency', ms: 1, jitterMs: Number.NaN }), { message: "fault-proxy: latency's jitterMs must be a number >= 0, got NaN" })
  await t.rejects(proxy.add({ kind: 'slow-close' } as never), { message: "fault-proxy: slow-close's delayMs must be a number >= 0, got undefined" })
  await t.rejects(proxy.add({ kind: 'stall', direction: 'sideways' } as never), { message: 'fault-proxy: a fault\'s direction must be upstream, downstream or both, got sideways' })
  t.same((await proxy.state()).faults, [], 'a refused fault is not on')
  await proxy.remove(99) // unknown: nothing
})

t.test('a forked proxy does the same through IPC, and its process ends with close()', async t => {
  const target = await echoServer(t)
  const proxy = await forkFaultProxy({ target: { port: target.port } })
  const { socket, seen } = await client(proxy.port)
  const id = await proxy.add({ kind: 'latency', ms: 20 })
  t.equal(typeof id, 'number')
  const sent = performance.now()
  socket.write('z')
  await until('the echo', () => seen.data.length === 1)
  t.ok(performance.now() - sent >= 40, 'the forked proxy delays too')
  t.match(await proxy.state(), { connections: 1, faults: [{ kind: 'latency', ms: 20, direction: 'both' }] })
  await t.rejects(proxy.add({ kind: 'nothing' } as never), TypeError, 'a refused fault rejects in the caller')
  await proxy.remove(id)
  await proxy.close()
  await until('the connection closed', () => seen.closed)
})
