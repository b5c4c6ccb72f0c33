// One replica of the soak (bench/parts/soak/soak.js), in its own process: `node --expose-gc
// bench/parts/soak/soak-replica.js WINDOW memory` or `... WINDOW redis PORT`. It serves the README's
// recommended token route (examples/server.js's TOKEN_PACES, the failure budget's window shortened
// to WINDOW seconds, as bench/parts/soak/soak-traffic.js says) behind a proxy on loopback (trustProxy
// 127.0.0.1: each request's X-Forwarded-For is its source), and answers the parent over IPC:
//
//   'sample'  the rows each pace holds in this replica's memory, heap (after a full collection) and
//             RSS, the event loop's delay since the last sample (p99 and max, monitorEventLoopDelay,
//             less its sampling interval, which its readings include), each pace's counts, and on
//             Redis the refund script's calls and their answers
//   'tidy'    the same after sweeping every pace whose sweep is due (the end of the run)
//   'exit'    closes the app (and the Redis client) and exits
//
// The refund script's calls are counted by wrapping the command the store defines on the client:
// each call sent, each answered 1 (gave back) or 0 (nothing to give), each that failed.
//
// bench/parts/timeouts/timeouts.js starts it with a fourth argument, TIMEOUT_MS, the store's `timeoutMs`: each
// reserve script call is then timed from the store's call to its answer (what the store's timeout
// counts), and 'answers' returns them (when each began, in Unix ms, and its time) since the previous 'answers'.

import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import Redis from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'
import { soakPaces, soakSecret } from './soak-traffic.js'

const [budgetWindow, store, port, timeoutArg] = process.argv.slice(2)

/** Warnings and info lines of the plugin: each outage of the Redis store logs one of each. */
const logged = { outages: 0, returns: 0 }
const stream = {
  write (line) {
    if (line.includes('Redis store unavailable')) logged.outages++
    else if (line.includes('Redis store answers again')) logged.returns++
  }
}

const refunds = { sent: 0, gave: 0, nothing: 0, failed: 0 }
let client = null
let timeoutMs = null

function countRefunds (redis) {
  const refund = redis.exchangepaceRefund
  redis.exchangepaceRefund = function (...args) {
    const answering = refund.apply(this, args)
    // With auto-pipelining, ioredis calls the command again on the pipeline it queues it in.
    if (this !== redis) return answering
    refunds.sent++
    answering.then(answer => { if (answer === 1) refunds.gave++; else refunds.nothing++ }, () => { refunds.failed++ })
    return answering
  }
}

/** The reserve calls since the last 'answers': when each began (Unix ms) and its answer time in ms. */
let answers = []

function timeReserves (redis) {
  const reserve = redis.exchangepaceReserveBuffer
  redis.exchangepaceReserveBuffer = function (...args) {
    const started = performance.now()
    const answering = reserve.apply(this, args)
    if (this !== redis) return answering
    const took = () => { answers.push([performance.timeOrigin + started, performance.now() - started]) }
    answering.then(took, took)
    return answering
  }
}

const app = Fastify({ trustProxy: '127.0.0.1', logger: { level: 'info', stream } })
await app.register(formbody)
if (store === 'redis') {
  client = new Redis({ host: '127.0.0.1', port: Number(port), enableAutoPipelining: true })
  client.on('error', () => {}) // a stopped server is the point of the run; the store reports it
  await client.ping()
  const redisStore = new RedisStore({ client, prefix: 'soak:', ...(timeoutArg === undefined ? {} : { timeoutMs: Number(timeoutArg) }) })
  timeoutMs = redisStore.timeoutMs
  countRefunds(client)
  if (timeoutArg !== undefined) timeReserves(client)
  await app.register(exchangePace, { store: redisStore })
} else {
  await app.register(exchangePace)
}
app.post('/token', { config: { pace: soakPaces(Number(budgetWindow)) } }, (request, reply) => {
  const { client_id: clientId, client_secret: secret } = request.body
  reply.header('cache-control', 'no-store')
  if (secret !== soakSecret(clientId)) {
    request.pace.outcome = 'rejected'
    return reply.code(401).send({ error: 'invalid_client' })
  }
  return reply.send({ access_token: 'soak', token_type: 'Bearer', expires_in: 3600 })
})
await app.listen({ host: '127.0.0.1', port: 0 })

/** monitorEventLoopDelay's sampling interval in ms: each reading is the interval plus the delay. */
const RESOLUTION = 10
const delay = monitorEventLoopDelay({ resolution: RESOLUTION })
delay.enable()

function sample (tidy) {
  const names = app.pace.names()
  if (tidy) for (const name of names) app.pace.get(name).tidy()
  const eld = { p99Ms: Math.max(0, delay.percentile(99) / 1e6 - RESOLUTION), maxMs: Math.max(0, delay.max / 1e6 - RESOLUTION) }
  delay.reset()
  globalThis.gc()
  const { heapUsed, rss } = process.memoryUsage()
  return {
    rows: Object.fromEntries(names.map(name => [name, app.pace.get(name).size])),
    counts: Object.fromEntries(names.map(name => [name, { ...app.pace.counts(name) }])),
    heapMB: heapUsed / 2 ** 20,
    rssMB: rss / 2 ** 20,
    eld,
    logged: { ...logged },
    refunds: store === 'redis' ? { ...refunds } : null
  }
}

process.on('message', async message => {
  if (message.cmd === 'sample' || message.cmd === 'tidy') process.send({ cmd: message.cmd, sample: sample(message.cmd === 'tidy') })
  else if (message.cmd === 'answers') {
    process.send({ cmd: 'answers', answers, logged: { ...logged } })
    answers = []
  } else if (message.cmd === 'exit') {
    await app.close()
    if (client !== null) client.disconnect()
    process.exit(0)
  }
})

// The parent gone (a run that failed, a test that timed out), nothing is left serving.
process.on('disconnect', () => process.exit(0))

process.send({ cmd: 'ready', port: app.server.address().port, pid: process.pid, timeoutMs })
