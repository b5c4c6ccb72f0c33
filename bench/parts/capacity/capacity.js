// Part 10, capacity: what one request costs Redis, and so how many requests one Redis core (one
// Cluster shard) carries. On a redis-server of the part's own (a spare loopback port, nothing kept
// on disk, nothing else using it), so that its statistics can be reset and read for each line:
//
// - Redis's CPU per request from INFO commandstats: the microseconds spent in EVALSHA (and EVAL),
//   which include the commands the scripts call; and from INFO cpu (used_cpu_user + used_cpu_sys),
//   which also counts reading and writing the sockets and the event loop;
// - bytes on the wire per request (INFO stats: total_net_input_bytes, total_net_output_bytes) and
//   the socket reads Redis made per request (total_reads_processed): round trips, as batched;
// - the Node process's CPU per request (process.cpuUsage of this process, which drives the load).
//
// Lines, each in every round, the order alternating, the figures the median round's:
// - script calls through ioredis as each store makes them, 16 in flight, over 1,000 keys: an empty
//   script; the floor (TIME, GET, SET PX of a 45-byte row) with and without struct pack/unpack;
//   @fastify/rate-limit's script; exchangepace's reserve; reserve + refund; three reserves + a
//   refund (the recommended token route's calls for an accepted exchange) against one call reserving
//   the three keys (bench/parts/capacity/capacity-scripts.js) + the refund;
// - the token route through the plugins (inject, 32 in flight, 1,000 client ids and addresses):
//   @fastify/rate-limit with one limit; exchangepace with one pace, accepted and refunded; with the
//   recommended three paces, accepted and refunded; the three paces without auto-pipelining.
// Rates no client reaches (nothing is refused): the cost of a grant, the common case.
//
// Run alone: node bench/parts/capacity/capacity.js [--quick|--smoke] [--out DIR]. Needs redis-server; without it
// the part records that it was skipped.

import { createRequire } from 'node:module'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import rateLimit from '@fastify/rate-limit'
import Redis from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'
import { TOKEN_PACES } from '../../../examples/server.js'
import { FORM, NEVER } from '../../shared/apps.js'
import { EMPTY, FLOOR, FLOOR_STRUCT, RESERVE_THREE } from './capacity-scripts.js'
import { byMode, fmt, log, median, parseOptions, table, writeResult } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const require = createRequire(import.meta.url)
const RateLimitRedisStore = require('@fastify/rate-limit/store/RedisStore')

const options = parseOptions()
const settings = byMode(options, {
  full: { rounds: 7, scriptOps: 20_000, requests: 10_000 },
  quick: { rounds: 2, scriptOps: 10_000, requests: 5_000 },
  smoke: { rounds: 1, scriptOps: 300, requests: 200 }
})
const KEYS = 1000

/**
 * The recommended paces at rates nothing reaches: the failure budget as declared (accepted
 * exchanges give it back), the others at NEVER; the per-source failure budget left out, as when
 * these figures were first measured ("the recommended three").
 */
const THREE_PACES = TOKEN_PACES.filter(pace => !(pace.key === 'source' && pace.spend === 'rejected')).map(pace => pace.spend === 'rejected' ? { ...pace } : { perSecond: NEVER, key: pace.key, spend: pace.spend })
const BUDGET_MS = 3600 * 1000

/** INFO fields, as numbers. */
async function info (client, section) {
  const text = await client.info(section)
  return Object.fromEntries(text.split('\r\n').filter(line => line.includes(':') && !line.startsWith('#')).map(line => line.split(':')))
}

/** Microseconds Redis spent in script calls (EVALSHA and EVAL, the commands they call included), and the calls. */
async function scriptMicros (client) {
  const stats = await info(client, 'commandstats')
  let usec = 0
  let calls = 0
  for (const name of ['cmdstat_evalsha', 'cmdstat_eval']) {
    if (stats[name] === undefined) continue
    const fields = Object.fromEntries(stats[name].split(',').map(pair => pair.split('=')))
    usec += Number(fields.usec)
    calls += Number(fields.calls)
  }
  return { usec, calls }
}

async function readings (client) {
  const [cpu, stats] = await Promise.all([info(client, 'cpu'), info(client, 'stats')])
  return {
    cpuMicros: (Number(cpu.used_cpu_user) + Number(cpu.used_cpu_sys)) * 1e6,
    netIn: Number(stats.total_net_input_bytes),
    netOut: Number(stats.total_net_output_bytes),
    reads: Number(stats.total_reads_processed)
  }
}

/** `operations` calls of `call(i)`, `inFlight` at a time. */
async function run (call, operations, inFlight) {
  await Promise.all(Array.from({ length: inFlight }, async (_, lane) => {
    for (let i = lane; i < operations; i += inFlight) await call(i)
  }))
}

/** One line's figures per operation: Redis's script time and CPU, bytes, reads, Node's CPU. */
async function measureLine (admin, line, operations) {
  await admin.config('RESETSTAT')
  const before = await readings(admin)
  const node = process.cpuUsage()
  await run(line.call, operations, line.inFlight)
  const nodeCpu = process.cpuUsage(node)
  const after = await readings(admin)
  const scripts = await scriptMicros(admin)
  const writes = line.writes?.() ?? null
  return {
    scriptMicros: scripts.usec / operations,
    scriptCalls: scripts.calls / operations,
    redisCpuMicros: (after.cpuMicros - before.cpuMicros) / operations,
    bytesIn: (after.netIn - before.netIn) / operations,
    bytesOut: (after.netOut - before.netOut) / operations,
    redisReads: (after.reads - before.reads) / operations,
    clientWrites: writes === null ? null : writes / operations,
    nodeCpuMicros: (nodeCpu.user + nodeCpu.system) / operations
  }
}

/** Counts the writes on `client`'s socket (each a round trip's request half, however many commands it carries). */
function countWrites (client) {
  const socket = client.stream
  const write = socket.write
  let writes = 0
  socket.write = function (...args) {
    writes++
    return write.apply(this, args)
  }
  return () => {
    const counted = writes
    writes = 0
    return counted
  }
}

/** The i-th key of a script line: each line its own 1,000 keys (the floor's rows are no counter for @fastify/rate-limit's INCR). */
const keyOf = line => i => `capacity:${line}:${i % KEYS}`
/** The i-th request's client and address: 1,000 of each, paired anew every 1,000 requests (a pair fails at most once in a million requests). */
const clientOf = i => `client-${i % KEYS}`
const addressOf = i => {
  const k = (7 * i + Math.floor(i / KEYS)) % KEYS
  return `10.0.${k >> 8}.${k & 255}`
}
const threeKeys = i => [`capacity:{token}:c:${clientOf(i)}`, `capacity:{token}:s:${addressOf(i)}`, `capacity:{token}:b:${clientOf(i)}:${addressOf(i)}`]

/** A refusal from a reserve script (8 bytes; a grant is 40) where none was expected. */
function granted (reply) {
  if (reply.length !== 40) throw new Error('capacity: a reserve was refused; the rates are meant to grant everything')
  return reply
}

function scriptLines (c) {
  const refundBudget = (k, reply) => c.exchangepaceRefund(k, 5, reply.readDoubleLE(8), reply.readDoubleLE(16), reply.readDoubleLE(24), BUDGET_MS)
  const [empty, floor, struct, window, reserve, refunded] = ['empty', 'floor', 'struct', 'window', 'reserve', 'refunded'].map(keyOf)
  return [
    { name: 'empty script (return {1, 2})', call: i => c.capacityEmpty(empty(i)) },
    { name: 'floor: TIME, GET, SET PX of a 45-byte row', call: i => c.capacityFloor(floor(i)) },
    { name: 'floor with the row\'s struct unpack and pack', call: i => c.capacityFloorStruct(struct(i)) },
    { name: '@fastify/rate-limit\'s script (INCR, PTTL)', call: i => c.rateLimit(window(i), 1000, NEVER, false, false), rateLimit: true },
    { name: 'exchangepace\'s reserve', call: i => c.exchangepaceReserveBuffer(reserve(i), NEVER).then(granted) },
    {
      name: 'exchangepace\'s reserve, then refund',
      call: async i => {
        const reply = granted(await c.exchangepaceReserveBuffer(refunded(i), NEVER))
        await c.exchangepaceRefund(refunded(i), NEVER, reply.readDoubleLE(8), reply.readDoubleLE(16), reply.readDoubleLE(24))
      }
    },
    {
      name: 'three paces, a call each, then the budget\'s refund',
      three: 'calls',
      call: async i => {
        const [client, source, budget] = threeKeys(i)
        const replies = await Promise.all([c.exchangepaceReserveBuffer(budget, 5, BUDGET_MS), c.exchangepaceReserveBuffer(client, NEVER), c.exchangepaceReserveBuffer(source, NEVER)])
        await refundBudget(budget, granted(replies[0]))
      }
    },
    {
      name: 'three paces in one call (one slot), then the budget\'s refund',
      three: 'one call',
      call: async i => {
        const [client, source, budget] = threeKeys(i)
        const replies = await c.capacityReserveThreeBuffer(budget, client, source, 5, BUDGET_MS, NEVER, 1000, NEVER, 1000)
        await refundBudget(budget, granted(replies[0]))
      }
    }
  ].map(line => ({ ...line, inFlight: 16 }))
}

/** The token route on its own client: @fastify/rate-limit with one limit, or exchangepace with `paces`. */
async function tokenApp (client, paces) {
  const app = Fastify()
  await app.register(formbody)
  if (paces === null) await app.register(rateLimit, { global: false, redis: client, nameSpace: 'capacity:rl:' })
  // A timeout no answer reaches on a loaded machine: a request paced in memory alone would cost Redis nothing.
  else await app.register(exchangePace, { store: new RedisStore({ client, prefix: 'capacity:', timeoutMs: 10_000 }) })
  const config = paces === null
    ? { rateLimit: { max: NEVER, timeWindow: 1000, hook: 'preHandler', keyGenerator: request => request.body.client_id } }
    : { pace: paces }
  app.post('/token', { config }, (request, reply) => {
    if (request.body.client_secret !== `${request.body.client_id}-secret`) {
      if (request.pace) request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client' })
    }
    return reply.send({ access_token: 'capacity', token_type: 'Bearer', expires_in: 3600 })
  })
  await app.ready()
  return app
}

/** The route lines: each app with its own client, its socket's writes counted. */
async function routeLines (port, clients) {
  const route = async (name, paces, status, { pipelining = true, rateLimit = false } = {}) => {
    const client = new Redis({ host: '127.0.0.1', port, enableAutoPipelining: pipelining })
    clients.push(client)
    const app = await tokenApp(client, paces)
    await client.ping()
    const writes = countWrites(client)
    // Numbered across runs, so that no (client, address) pair fails twice in the rounds.
    let served = 0
    const call = async () => {
      const i = served++
      const secret = status === 200 ? `${clientOf(i)}-secret` : 'wrong'
      const response = await app.inject({ method: 'POST', url: '/token', remoteAddress: addressOf(i), headers: { 'content-type': FORM }, payload: `grant_type=client_credentials&client_id=${clientOf(i)}&client_secret=${secret}` })
      if (response.statusCode !== status) throw new Error(`capacity: ${name} answered ${response.statusCode}, not ${status}`)
    }
    return { name, call, writes, inFlight: 32, rateLimit, route: true, app }
  }
  const one = { perSecond: NEVER, key: 'client', spend: 'accepted' }
  return [
    await route('@fastify/rate-limit, one limit (200)', null, 200, { rateLimit: true }),
    await route('exchangepace, one pace (200)', [one], 200),
    await route('exchangepace, one pace, wrong secret (401, refunded)', [one], 401),
    await route('exchangepace, the recommended three paces (200)', THREE_PACES, 200),
    await route('exchangepace, the recommended three paces, wrong secret (401)', THREE_PACES, 401),
    await route('exchangepace, three paces, no auto-pipelining (200)', THREE_PACES, 200, { pipelining: false })
  ]
}

const METRICS = ['scriptMicros', 'scriptCalls', 'redisCpuMicros', 'bytesIn', 'bytesOut', 'redisReads', 'clientWrites', 'nodeCpuMicros']

/** Every line in every round, the order alternating; per line the median of each metric, and of its per-round ratios to @fastify/rate-limit's line of its kind. */
async function measureRounds (admin, lines) {
  const samples = lines.map(() => [])
  for (let round = 0; round < settings.rounds; round++) {
    const order = round % 2 === 0 ? lines : [...lines].reverse()
    for (const line of order) {
      const operations = line.route ? settings.requests : settings.scriptOps
      await run(line.call, Math.min(operations, 2000), line.inFlight) // warm-up, uncounted
      line.writes?.()
      samples[lines.indexOf(line)].push(await measureLine(admin, line, operations))
    }
    log(`  capacity: round ${round + 1}/${settings.rounds} done`)
  }
  return lines.map((line, i) => {
    const base = lines.findIndex(other => other.rateLimit && Boolean(other.route) === Boolean(line.route))
    const figures = Object.fromEntries(METRICS.map(metric => [metric, samples[i][0][metric] === null ? null : median(samples[i].map(s => s[metric]))]))
    const ratio = metric => median(samples[i].map((s, round) => s[metric] / samples[base][round][metric]))
    return { name: line.name, kind: line.route ? 'route' : 'script', three: line.three, ...figures, ratioToRateLimit: { scriptMicros: ratio('scriptMicros'), redisCpuMicros: ratio('redisCpuMicros'), nodeCpuMicros: ratio('nodeCpuMicros') }, rounds: samples[i] }
  })
}

/** Requests per second one Redis core carries at a line's CPU per request, whole (with I/O) and in scripts alone. */
function capacityOf (line) {
  return { perCoreWithIo: 1e6 / line.redisCpuMicros, perCoreScriptsOnly: 1e6 / line.scriptMicros, bytesPerRequest: line.bytesIn + line.bytesOut }
}

function print (results) {
  log(`\ncapacity: per request (operation), median of ${settings.rounds} rounds; Redis ${redisServerVersion()}`)
  log(table(['line', 'Redis µs in scripts', 'script calls', 'Redis CPU µs (INFO cpu)', 'x rate-limit', 'bytes in/out', 'Redis reads', 'client writes', 'Node CPU µs', 'req/s per Redis core'],
    results.map(r => [r.name, fmt(r.scriptMicros, 2), fmt(r.scriptCalls, 2), fmt(r.redisCpuMicros, 2), `${fmt(r.ratioToRateLimit.redisCpuMicros, 2)}x`, `${fmt(r.bytesIn, 0)}/${fmt(r.bytesOut, 0)}`,
      fmt(r.redisReads, 3), r.clientWrites === null ? '-' : fmt(r.clientWrites, 3), fmt(r.nodeCpuMicros, 1), Math.round(r.capacity.perCoreWithIo).toLocaleString('en-US')])))
}

async function main () {
  const version = redisServerVersion()
  if (version === null) {
    log('capacity: skipped: redis-server is not installed')
    writeResult(options, 'capacity', { skipped: 'redis-server is not installed' })
    return
  }
  const server = await startAlone()
  const { port } = server
  const clients = []
  const apps = []
  try {
    const admin = new Redis({ host: '127.0.0.1', port })
    const scripts = new Redis({ host: '127.0.0.1', port, enableAutoPipelining: true })
    clients.push(admin, scripts)
    new RedisStore({ client: scripts }) // eslint-disable-line no-new -- defines its commands, as the store does
    new RateLimitRedisStore(false, false, scripts) // eslint-disable-line no-new
    scripts.defineCommand('capacityEmpty', { numberOfKeys: 1, lua: EMPTY })
    scripts.defineCommand('capacityFloor', { numberOfKeys: 1, lua: FLOOR })
    scripts.defineCommand('capacityFloorStruct', { numberOfKeys: 1, lua: FLOOR_STRUCT })
    scripts.defineCommand('capacityReserveThree', { numberOfKeys: 3, lua: RESERVE_THREE })
    const routes = await routeLines(port, clients)
    apps.push(...routes.map(line => line.app))
    const results = await measureRounds(admin, [...scriptLines(scripts), ...routes])
    for (const r of results) r.capacity = capacityOf(r)
    print(results)
    const file = writeResult(options, 'capacity', {
      description: 'Redis\'s CPU per request (commandstats and INFO cpu), bytes and round trips per request, Node\'s CPU per request, per script line and per token route',
      redisServer: version,
      keys: KEYS,
      scriptOps: settings.scriptOps,
      requests: settings.requests,
      rounds: settings.rounds,
      results
    })
    log(`\ncapacity: wrote ${file}`)
  } finally {
    await Promise.all(apps.map(app => app.close()))
    for (const client of clients) client.disconnect()
    await server.kill()
  }
}

await main()
