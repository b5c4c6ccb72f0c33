// Traffic through a failover: two app replicas (Fastify instances, each with its own ioredis
// client and RedisStore) serve a token route paced as the README recommends, while clients send at
// three times their rate, strangers name unknown client ids, and a guesser tries one client's
// secret; meanwhile one master of a Redis Cluster fails over to its replica (CLUSTER FAILOVER on
// the replica, or a SIGKILL of the master), or a single Redis restarts empty. What is recorded:
// every answer (who sent it, through which replica, when the handler ran), each store's outage log
// lines, the units each replica's memory kept, when the replica was promoted, and the keys left in
// Redis with their expiries.
//
// Used by bench/parts/failover/failover.js (part 9) and test/redis/switches/failover.test.ts, which passes lib/'s plugin
// (`lib`) so that the test runs the source. Plain JavaScript, as tap runs tests without
// type-checking them.

import { setTimeout as sleep } from 'node:timers/promises'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify from 'fastify'
import formbody from '@fastify/formbody'
import Redis from 'ioredis'
import { admin, promoted, scratch, startServer } from '../../shared/redis-servers.js'

const SECRET = 'failover-secret'
/** The failure budget of the recommended set-up: 5 per (client id, source) per hour. */
export const GUESS_LIMIT = 5
const GUESS_WINDOW = 3600
/** What the route's client pace is named, and where its keys live: prefix + name + ':' + id. */
const CLIENT_PACE = '/token#client'
const PAIR_PACE = '/token#client+source%3Arejected'
const GUESSER = '10.2.0.1'

/**
 * `store` with the replica's memory of the client pace recorded: each unit it granted, with the
 * time (its own clock's, performance.now) and whether it was refunded. Every admitted request
 * holds such a unit (the fallback is always warm), so the units kept are what bound the replica.
 */
function recording (store, kept) {
  // Pace and Reservation keep #private fields: their methods are called on themselves, not the proxy.
  const own = (target, property) => {
    const value = Reflect.get(target, property, target)
    return typeof value === 'function' ? value.bind(target) : value
  }
  const recordedPace = local => new Proxy(local, {
    get (target, property) {
      if (property !== 'reserve') return own(target, property)
      return key => {
        const reservation = target.reserve(key)
        if (!reservation.granted) return reservation
        const unit = { key, at: performance.now(), refunded: false }
        kept.push(unit)
        return new Proxy(reservation, {
          get (held, name) {
            if (name !== 'refund') return own(held, name)
            return () => {
              unit.refunded = true
              held.refund()
            }
          }
        })
      }
    }
  })
  // The shared pace of the client pace: each unit Redis granted gets the time Redis ran the
  // reserve (its clock, which no stall of this process delays), read from the grant.
  const recordedShared = (shared, limit) => ({
    get unanswered () { return shared.unanswered },
    reserve (key) {
      const before = kept.length
      return shared.reserve(key).then(reservation => {
        const unit = kept[before]
        if (reservation.granted && 'run' in reservation && unit !== undefined && unit.key === key) unit.redisAt = redisTime(reservation.at, limit)
        return reservation
      })
    }
  })
  return {
    scope: store.scope,
    outage: store.outage,
    pace: (name, rate, local, log) => name === CLIENT_PACE
      ? recordedShared(store.pace(name, rate, recordedPace(local), log), rate.limit)
      : store.pace(name, rate, local, log)
  }
}

/** 2^32: the reserve script reads Redis's clock in microseconds modulo this (a one-second pace). */
const CYCLE_US = 2 ** 32

/**
 * When Redis ran a reserve that granted at `at` (the script's microticks: microseconds of Redis's
 * clock modulo 2^32, times `limit`), on this process's performance.now() timeline, read just after
 * the answer came: Redis's clock is this machine's wall clock.
 */
function redisTime (at, limit) {
  const now = performance.now()
  const wallUs = ((performance.timeOrigin + now) * 1000) % CYCLE_US
  let behindUs = (wallUs - at / limit) % CYCLE_US
  if (behindUs < 0) behindUs += CYCLE_US
  if (behindUs > CYCLE_US / 2) behindUs -= CYCLE_US
  return now - behindUs / 1000
}

/**
 * One app replica: the recommended paces on /token (or, with `settings.clientPaceOnly`, the
 * client pace alone, the shape of issue 37's runs), its store's outage lines recorded with their
 * time.
 */
async function replica (lib, client, settings, prefix, outageLines, index, kept) {
  const stream = {
    write: line => {
      if (line.includes('exchangepace: Redis')) outageLines.push({ at: performance.now(), replica: index, ...JSON.parse(line) })
    }
  }
  const app = Fastify({ logger: { level: 'info', stream } })
  await app.register(formbody)
  const store = new lib.RedisStore({ client, prefix, timeoutMs: settings.timeoutMs, retryMs: settings.retryMs })
  await app.register(lib.exchangePace, { store: recording(store, kept) })
  // The route's own lines (each request, each refusal) at warn: only the store's, on Fastify's logger, are kept.
  app.post('/token', {
    logLevel: 'warn',
    config: {
      pace: settings.clientPaceOnly === true
        ? [{ perSecond: settings.rate, key: 'client', spend: 'accepted', name: CLIENT_PACE }]
        : [
            { limit: GUESS_LIMIT, window: GUESS_WINDOW, key: ['client', 'source'], spend: 'rejected' },
            { perSecond: settings.rate, key: 'client', spend: 'accepted' },
            { perSecond: 50, key: 'source', spend: 'every' }
          ]
    }
  }, async (request, reply) => {
    const at = performance.now()
    if (request.body.client_secret !== SECRET || !request.body.client_id.startsWith('client-')) {
      request.pace.outcome = 'rejected'
      return reply.code(401).send({ error: 'invalid_client', at })
    }
    return { access_token: 'token', token_type: 'Bearer', at }
  })
  await app.ready()
  return app
}

/** Sends `send()` `perSecond` times a second, open loop (a late timer sends what it owes at once), until `stop`. */
async function sender (perSecond, stop, send, pending) {
  const interval = 1000 / perSecond
  let next = performance.now() + Math.random() * interval
  while (!stop.aborted) {
    const wait = next - performance.now()
    if (wait > 0) await sleep(wait)
    if (stop.aborted) break
    next += interval
    pending.push(send())
  }
}

/**
 * Traffic on `apps` until `stop`: each client id of `ids` at `settings.sendPerSecond`, strangers
 * and the guesser (at `guessed`, a client id) at theirs, each request through a replica chosen at
 * random. Resolves with every answer once the last is in.
 */
async function traffic (apps, ids, guessed, settings, stop) {
  const loop = monitorEventLoopDelay({ resolution: 10 })
  loop.enable()
  const answers = []
  const pending = []
  let strangers = 0
  const post = async (who, id, secret, address) => {
    const replica = Math.random() < 0.5 ? 0 : 1
    const sent = performance.now()
    try {
      const response = await apps[replica].inject({ method: 'POST', url: '/token', remoteAddress: address, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `client_id=${encodeURIComponent(id)}&client_secret=${secret}` })
      const at = response.statusCode === 200 || response.statusCode === 401 ? response.json().at : performance.now()
      answers.push({ who, id, replica, sent, at, status: response.statusCode })
    } catch (err) {
      answers.push({ who, id, replica, sent, at: performance.now(), status: 'error', error: err.message })
    }
  }
  // A client with a second's worth of requests unanswered sends no more until some are: a machine
  // too loaded to keep up sends less, rather than piling up requests to drain after the run.
  const waiting = new Map(ids.map(id => [id, 0]))
  const client = async (id, i) => {
    if (waiting.get(id) >= settings.sendPerSecond) {
      answers.skipped++
      return
    }
    waiting.set(id, waiting.get(id) + 1)
    await post('client', id, SECRET, `10.0.${i >> 8}.${i & 255}`)
    waiting.set(id, waiting.get(id) - 1)
  }
  answers.skipped = 0
  // In lockstep, every client sends in the same turn of the loop, so that each auto-pipelined
  // batch carries several clients' keys (of several slots); otherwise each at its own moments.
  const loops = settings.lockstep === true
    ? [sender(settings.sendPerSecond, stop, () => Promise.all(ids.map(client)), pending)]
    : ids.map((id, i) => sender(settings.sendPerSecond, stop, () => client(id, i), pending))
  if (settings.strangersPerSecond > 0) loops.push(sender(settings.strangersPerSecond, stop, () => post('stranger', `stranger-${strangers++}`, 'guess', `10.1.0.${strangers % 50}`), pending))
  if (settings.guessesPerSecond > 0) loops.push(sender(settings.guessesPerSecond, stop, () => post('guesser', guessed, 'guess', GUESSER), pending))
  await Promise.all(loops)
  await Promise.all(pending)
  loop.disable()
  // How late the event loop ran, in ms: a stall past timeoutMs times out every master at once.
  answers.loopDelayMs = { p99: Math.round(loop.percentile(99) / 1e5) / 10, max: Math.round(loop.max / 1e5) / 10 }
  return answers
}

/** Every key under `prefix` on the servers at `ports`, and how many have no expiry (PTTL -1). */
async function expiries (ports, prefix) {
  let keys = 0
  let withoutExpiry = 0
  for (const port of ports) {
    const client = admin(port)
    try {
      let cursor = '0'
      do {
        const [next, found] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
        cursor = next
        keys += found.length
        const ttls = await Promise.all(found.map(key => client.pttl(key)))
        withoutExpiry += ttls.filter(ttl => ttl === -1).length
      } while (cursor !== '0')
    } finally {
      client.disconnect()
    }
  }
  return { keys, withoutExpiry }
}

/** The masters' ports, as a node that answers says. */
async function masterPorts (cluster) {
  for (const server of [...cluster.masters, ...cluster.replicas]) {
    const client = admin(server.port)
    try {
      const ranges = await client.call('CLUSTER', 'SLOTS')
      return [...new Set(ranges.map(range => range[2][1]))]
    } catch {
      // killed: ask the next
    } finally {
      client.disconnect()
    }
  }
  throw new Error('no node of the cluster answers')
}

/**
 * `count` client ids, a third of them (at least one) with their client keys on `master` and the
 * rest on the other masters, taken in order from `client-0` on.
 */
async function clientsBy (cluster, prefix, master, count) {
  const wanted = Math.max(1, Math.round(count / 3))
  const onTarget = []
  const others = []
  for (let i = 0; onTarget.length < wanted || others.length < count - wanted; i++) {
    const id = `client-${i}`
    const owner = await cluster.masterOf(`${prefix}${CLIENT_PACE}:${id}`)
    const list = owner === master ? onTarget : others
    if (list.length < (owner === master ? wanted : count - wanted)) list.push(id)
  }
  return { ids: [...onTarget, ...others], onTarget: new Set(onTarget) }
}

/** A client id the guesser names, whose pair key (from GUESSER) the cluster serves on `master`. */
async function guessedOn (cluster, prefix, master) {
  for (let i = 0; i < 200; i++) {
    const id = `client-guessed-${i}`
    if (await cluster.masterOf(`${prefix}${PAIR_PACE}:${id}\u001f${GUESSER}`) === master) return id
  }
  throw new Error('no client id found whose failure budget lives on the target master')
}

/** CLUSTER FAILOVER on `replica`: its master hands its slots over once the replica has caught up. */
async function failOver (replica) {
  const client = admin(replica.port)
  try {
    await client.call('CLUSTER', 'FAILOVER')
  } finally {
    client.disconnect()
  }
}

/**
 * Two app replicas, each on a client `makeClient()` gives, under traffic for `ids` and the guesser
 * at `guessed`: `beforeMs`, then `trigger()` (which resolves with the time Redis answers again as
 * the new master), then `afterMs`. Resolves with every answer, the units each replica's memory
 * kept, the outage lines, and the keys under the run's prefix on the servers `ports()` names.
 */
async function drive (lib, makeClient, scenario, settings) {
  const { prefix, ids, guessed, trigger, ports } = scenario
  const errors = []
  const outageLines = []
  const apps = []
  const kept = [[], []]
  const clients = [0, 1].map(() => {
    const client = makeClient()
    client.on('error', err => { errors.push(err.message) })
    return client
  })
  try {
    await Promise.all(clients.map(client => client.connect()))
    for (const [i, client] of clients.entries()) apps.push(await replica(lib, client, settings, prefix, outageLines, i, kept[i]))
    const stop = new AbortController()
    const started = performance.now()
    const running = traffic(apps, ids, guessed, settings, stop.signal)
    await sleep(settings.beforeMs)
    const triggeredAt = performance.now()
    let promotedAt
    try {
      promotedAt = await trigger()
    } catch (err) {
      stop.abort()
      await running
      throw err
    }
    await sleep(settings.afterMs)
    stop.abort()
    const answers = await running
    const stoppedAt = performance.now()
    const left = await expiries(await ports(), prefix)
    // What each replica decided without Redis's answer, of the client pace (fastify.pace.counts).
    const unanswered = apps.map(app => {
      const { grantedWithoutStore, refusedWithoutStore } = app.pace.counts(CLIENT_PACE)
      return { granted: grantedWithoutStore, refused: refusedWithoutStore }
    })
    return { started, triggeredAt, promotedAt, stoppedAt, answers, kept, ids, guessed, outageLines, clientErrors: errors, left, unanswered, timeoutMs: settings.timeoutMs }
  } finally {
    await Promise.all(apps.map(app => app.close()))
    for (const client of clients) client.disconnect()
  }
}

/** The master serving each of `ids`' client keys now, by port. */
async function ownersOf (cluster, prefix, ids) {
  const owners = new Map()
  for (const id of ids) owners.set(id, (await cluster.masterOf(`${prefix}${CLIENT_PACE}:${id}`)).port)
  return owners
}

/**
 * One failover of `master` under traffic: `how` is 'failover' (CLUSTER FAILOVER on its replica,
 * the coordinated switch an operator starts) or 'kill' (SIGKILL of the master, which the cluster
 * detects after cluster-node-timeout); or, with `master` null, 'rebalance': an empty master added
 * and slots moved onto it from every master (`redis-cli --cluster rebalance
 * --cluster-use-empty-masters`), the target's clients then being those whose slot moved. Traffic
 * runs `beforeMs` before and `afterMs` after the promotion (the rebalance's end). `lib` is the
 * plugin's module: `{ exchangePace, RedisStore }`.
 */
export async function runFailover (lib, cluster, master, how, settings) {
  return (await runFailovers(lib, cluster, master, how, [settings]))[0]
}

/**
 * `runFailover` for several sets of `settings` at once, through one failover: each its own two
 * app replicas, clients and keys, the switch made once for all of them (so that the ioredis majors
 * meet the same failover). In each, `clientClass` is the ioredis `Cluster` constructor (default:
 * this package's ioredis), the replicas' clients made with `enableAutoPipelining` and otherwise
 * its defaults, but for `maxRetriesPerRequest` 1 unless `clientDefaults`; `label` tells the runs'
 * keys apart.
 */
export async function runFailovers (lib, cluster, master, how, settingsList) {
  const rebalance = how === 'rebalance'
  const plans = []
  for (const [i, settings] of settingsList.entries()) {
    const prefix = `exchangepace-failover:${how}:${settings.label ?? i}:${process.pid}:${Date.now()}:`
    const { ids, onTarget } = rebalance
      ? { ids: Array.from({ length: settings.clients }, (_, n) => `client-${n}`), onTarget: null }
      : await clientsBy(cluster, prefix, master, settings.clients)
    const before = rebalance ? await ownersOf(cluster, prefix, ids) : null
    const guessed = rebalance ? 'client-guessed' : await guessedOn(cluster, prefix, master)
    plans.push({ settings, prefix, ids, onTarget, before, guessed })
  }
  const replicaServer = rebalance ? null : cluster.replicaOf(master)
  let added = null
  let switching = null
  const trigger = () => {
    switching ??= (async () => {
      if (rebalance) {
        added = await cluster.rebalance()
        return performance.now()
      }
      const promotion = promoted(replicaServer)
      if (how === 'failover') await failOver(replicaServer)
      else await master.kill()
      return await promotion
    })()
    return switching
  }
  return await Promise.all(plans.map(async ({ settings, prefix, ids, onTarget, before, guessed }) => {
    const options = settings.clientDefaults === true
      ? { enableAutoPipelining: true, lazyConnect: true }
      : { enableAutoPipelining: true, lazyConnect: true, redisOptions: { maxRetriesPerRequest: 1 } }
    const makeClient = () => cluster.client({ ...options, ...settings.clientOptions }, settings.clientClass)
    const run = await drive(lib, makeClient, { prefix, ids, guessed, trigger, ports: () => masterPorts(cluster) }, settings)
    const label = settings.label ?? null
    if (rebalance) {
      const after = await ownersOf(cluster, prefix, ids)
      const moved = ids.filter(id => after.get(id) !== before.get(id))
      return { how, label, target: null, successor: `127.0.0.1:${added.port}`, onTarget: moved, ...run }
    }
    return { how, label, target: `127.0.0.1:${master.port}`, successor: `127.0.0.1:${replicaServer.port}`, onTarget: [...onTarget], ...run }
  }))
}

/**
 * A single Redis (started here, on a port of its own) that restarts empty under traffic: SIGKILL,
 * then a new server on the same port at once, with no rows. Each replica's client reconnects by
 * itself (ioredis's default retry strategy).
 */
export async function runRestart (lib, settings) {
  const { dir, remove } = scratch()
  let server = await startServer(dir)
  const port = server.port
  const ids = Array.from({ length: settings.clients }, (_, i) => `client-${i}`)
  const trigger = async () => {
    await server.kill()
    server = await startServer(dir, [], { port })
    return performance.now() // the empty server answers from here on
  }
  const makeClient = () => new Redis({ port, host: '127.0.0.1', enableAutoPipelining: true, maxRetriesPerRequest: 1, lazyConnect: true })
  try {
    const scenario = { prefix: `exchangepace-restart:${process.pid}:${Date.now()}:`, ids, guessed: 'client-guessed', trigger, ports: () => [port] }
    return { how: 'restart', target: null, onTarget: ids, ...await drive(lib, makeClient, scenario, settings) }
  } finally {
    await server.kill()
    remove()
  }
}

/**
 * A Sentinel failover under traffic (bench/shared/redis-servers.js's master, replica and three sentinels):
 * `how` is 'failover' (SENTINEL FAILOVER, which demotes the master and disconnects its clients) or
 * 'kill' (SIGKILL of the master, which the sentinels detect after down-after-milliseconds). The
 * replicas' clients are ioredis Sentinel clients, which ask the sentinels for the master.
 */
export async function runSentinel (lib, deployment, how, settings) {
  const ids = Array.from({ length: settings.clients }, (_, i) => `client-${i}`)
  const { master, replica: successor } = await deployment.roles()
  const trigger = async () => {
    const promotion = promoted(successor)
    if (how === 'failover') await deployment.failOver()
    else await master.kill()
    return await promotion
  }
  const makeClient = () => new Redis({ sentinels: deployment.sentinels, name: deployment.name, enableAutoPipelining: true, maxRetriesPerRequest: 1, lazyConnect: true })
  const scenario = { prefix: `exchangepace-sentinel:${how}:${process.pid}:${Date.now()}:`, ids, guessed: 'client-guessed', trigger, ports: () => [successor.port] }
  return { how: `sentinel ${how}`, target: null, onTarget: ids, ...await drive(lib, makeClient, scenario, settings) }
}
