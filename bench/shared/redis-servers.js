// The Redis and Valkey servers the benchmark and the tests start themselves, on loopback ports free
// at run time, nothing kept on disk: one server alone (`startAlone`), a server with options of the
// caller's (`startServer`: replicas, sentinels, TLS), a three-master Redis Cluster (`formCluster`
// over servers started here; `startReplicatedCluster` adds a replica to each master and failover),
// and a master with a replica and three sentinels (`startSentinels`). bench/parts/* and
// test/helpers/* import them from here. Plain JavaScript, as tap runs tests without type-checking
// them.
//
// Each server runs under a small shell that kills it when this process's end of a pipe closes, so
// that no server outlives the run however it ends (a failed assertion, an exception, a kill); a
// server's `kill()` kills it at once and waits for it.

import { execFile, execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import Redis, { Cluster } from 'ioredis'

/**
 * One server started here: its port and pid, a way to freeze and thaw it, and its end.
 * @typedef {object} Server
 * @property {number} port
 * @property {number} pid
 * @property {() => void} pause SIGSTOP: the server keeps its connections open and answers nothing until `resume`.
 * @property {() => void} resume SIGCONT: it answers again, the commands that waited first.
 * @property {() => Promise<void>} kill SIGKILL (a paused server too); resolves once it and its watchdog have exited.
 */

/**
 * What a TLS-only server is given (`--port 0 --tls-port P`): its certificate and key, and the CA
 * that signed it, whose certificate (`ca`) the probes trust.
 * @typedef {object} TlsFiles
 * @property {string} certFile
 * @property {string} keyFile
 * @property {string} caFile
 * @property {Buffer} ca
 */

/** `redis-server --version`, or null when redis-server is not installed. */
export function redisServerVersion () {
  try {
    return execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim()
  } catch {
    return null
  }
}

/**
 * Runs "$0" (the server) with "$@", says its pid, and exits when the server does; a reader in the
 * background kills the server when standard input closes (kept on fd 3: an asynchronous list's
 * standard input is /dev/null in a shell without job control).
 */
const WATCHDOG = 'exec 3<&0; "$0" "$@" & server=$!; echo "$server"; (while read -r _; do :; done; kill -9 "$server" 2>/dev/null) <&3 & wait "$server"'

async function free (port) {
  const probe = createServer()
  try {
    await new Promise((resolve, reject) => {
      probe.once('error', reject)
      probe.listen(port, '127.0.0.1', resolve)
    })
    return true
  } catch {
    return false
  } finally {
    probe.close()
  }
}

/**
 * A loopback port free now whose cluster bus port (port + 10000) is free too, away from the usual
 * ones (6379 and up) and from the ephemeral range Linux hands out from 32768.
 */
export async function spareClusterPort () {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20000 + Math.floor(Math.random() * 12000)
    if (await free(port) && await free(port + 10000)) return port
  }
  throw new Error('no free pair of loopback ports for a cluster node')
}

/** A client for one server (over TLS with `tls`), for administration: no retries, errors left to the caller. */
export function admin (port, tls) {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 500, ...(tls === undefined ? {} : { tls: { ca: tls.ca } }) })
  client.on('error', () => {}) // a server being killed: the caller sees the failed command
  return client
}

/**
 * Resolves once `port` answers a PING (over TLS with `tls`), or rejects when `exited` (the
 * server's exit, when given) comes first or 10 s pass.
 */
async function answering (port, exited = null, tls = undefined) {
  const server = { gone: false } // an object: the loop's condition changes from the callbacks
  exited?.then(() => { server.gone = true }, () => { server.gone = true })
  for (let waited = 0; waited < 10_000 && !server.gone; waited += 20) {
    const probe = admin(port, tls)
    try {
      await probe.connect()
      await probe.ping()
      return
    } catch {
      await sleep(20)
    } finally {
      probe.disconnect()
    }
  }
  throw new Error(`the server on port ${port} ${server.gone ? 'exited' : 'did not answer within 10 s'}`)
}

/** The TLS arguments of a server on `port` with `tls`: no plain port, clients not asked for certificates. */
export function tlsArgs (tls, port) {
  return ['--port', '0', '--tls-port', String(port), '--tls-cert-file', tls.certFile, '--tls-key-file', tls.keyFile,
    '--tls-ca-cert-file', tls.caFile, '--tls-auth-clients', 'no']
}

/**
 * Starts `binary` with `args` (an array, or a function of the port; after the file `config`, when
 * given, and the port, loopback and no persistence) on `port`, or on a free one (trying others when
 * another process took it first), its files in `dir`, serving only TLS with `tls`. Resolves once it
 * answers a PING.
 * @param {string} dir
 * @param {string[] | ((port: number) => string[])} [args]
 * @param {{ binary?: string, port?: number, config?: string, tls?: TlsFiles }} [options]
 * @returns {Promise<Server>}
 */
export async function startServer (dir, args = [], { binary = 'redis-server', port, config, tls } = {}) {
  for (let attempt = 0; ; attempt++) {
    const chosen = port ?? await spareClusterPort()
    const listen = tls === undefined ? ['--port', String(chosen)] : tlsArgs(tls, chosen)
    const options = [...(config === undefined ? [] : [config]), ...listen, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--logfile', join(dir, `${chosen}.log`), ...(typeof args === 'function' ? args(chosen) : args)]
    const shell = spawn('sh', ['-c', WATCHDOG, binary, ...options], { stdio: ['pipe', 'pipe', 'ignore'] })
    const exited = once(shell, 'exit')
    const [line] = await once(shell.stdout, 'data')
    const pid = Number.parseInt(line.toString(), 10)
    let killed = null
    const server = {
      port: chosen,
      pid,
      pause: () => { process.kill(pid, 'SIGSTOP') },
      resume: () => { process.kill(pid, 'SIGCONT') },
      kill: () => {
        killed ??= (async () => {
          shell.stdin.end()
          try { process.kill(pid, 'SIGKILL') } catch {} // already gone
          await exited
        })()
        return killed
      }
    }
    try {
      await answering(chosen, exited, tls)
      return server
    } catch (err) {
      await server.kill()
      if (port !== undefined || attempt === 4) throw err
    }
  }
}

/** A scratch directory for the servers' files, and its removal. */
export function scratch () {
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-servers-'))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) }
}

/**
 * One server of `binary` alone on `port` (a free one when not given), in a scratch directory of its
 * own removed with it.
 * @param {{ binary?: string, port?: number }} [options]
 * @returns {Promise<Server>}
 */
export async function startAlone ({ binary = 'redis-server', port } = {}) {
  const { dir, remove } = scratch()
  try {
    const server = await startServer(dir, [], { binary, port })
    const kill = server.kill
    return { ...server, kill: () => kill().finally(remove) }
  } catch (err) {
    remove()
    throw err
  }
}

async function until (what, check, timeoutMs = 20_000) {
  for (const started = performance.now(); !(await check());) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what} within ${timeoutMs / 1000} s`)
    await sleep(50)
  }
}

/**
 * Has the servers of `admins` (their clients, cluster mode on) form one cluster: the first three
 * masters of a third of the 16384 slots each, all meeting the first (faster than `redis-cli
 * --cluster create`, which waits a second at a time for the nodes to agree). Resolves once every
 * node reports the cluster ok, every slot assigned, with all of them known.
 */
export async function formCluster (admins) {
  const masters = admins.slice(0, 3)
  await Promise.all(masters.map((client, i) => client.call('CLUSTER', 'ADDSLOTSRANGE', String(Math.floor(16384 * i / 3)), String(Math.floor(16384 * (i + 1) / 3) - 1))))
  await Promise.all(admins.slice(1).map(client => admins[0].call('CLUSTER', 'MEET', '127.0.0.1', String(client.options.port))))
  const agreed = async client => {
    const info = await client.call('CLUSTER', 'INFO')
    return /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${admins.length}\\b`).test(info) && /cluster_slots_assigned:16384\b/.test(info)
  }
  await until(`the ${admins.length} nodes did not agree`, async () => (await Promise.all(admins.map(agreed))).every(Boolean))
}

/** Whether every replica has its master's data link up and every node lists each master with its replica. */
async function replicated (replicas, all) {
  const links = await Promise.all(replicas.map(replica => replica.info('replication')))
  if (!links.every(info => /master_link_status:up/.test(info))) return false
  const maps = await Promise.all(all.map(client => client.call('CLUSTER', 'SLOTS')))
  return maps.every(ranges => ranges.length === 3 && ranges.every(range => range.length === 4))
}

/**
 * Three masters with a third of the slots each, and a replica of each, failover on
 * (`cluster-node-timeout` `nodeTimeoutMs`, replicas always eligible), every slot served only while
 * every master is up with `fullCoverage` (Redis's default) or each master's on their own without,
 * and a replica's first sync at once (not after 5 s). Resolves once the cluster is ok, every
 * replica in sync and every node's slot map lists each replica (Redis lists a replica once its
 * master's replication offset moved: the master's ping to its replicas every second moves it, where
 * the default period, 10 s, kept the start waiting). `stop()` kills them all.
 */
export async function startReplicatedCluster ({ nodeTimeoutMs = 1000, fullCoverage = true, binary = 'redis-server' } = {}) {
  const { dir, remove } = scratch()
  const started = []
  const stop = async () => {
    await Promise.all(started.map(server => server.kill()))
    remove()
  }
  const clusterArgs = port => ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`),
    '--cluster-node-timeout', String(nodeTimeoutMs), '--cluster-replica-validity-factor', '0', '--cluster-replica-no-failover', 'no',
    '--cluster-require-full-coverage', fullCoverage ? 'yes' : 'no', '--repl-diskless-sync-delay', '0',
    '--repl-ping-replica-period', '1']
  const admins = []
  try {
    for (let i = 0; i < 6; i++) started.push(await startServer(dir, clusterArgs, { binary }))
    admins.push(...started.map(server => admin(server.port)))
    const masters = admins.slice(0, 3)
    const replicas = admins.slice(3)
    await formCluster(admins)
    const ids = await Promise.all(masters.map(client => client.call('CLUSTER', 'MYID')))
    await Promise.all(replicas.map((client, i) => client.call('CLUSTER', 'REPLICATE', ids[i])))
    await until('the replicas did not sync', () => replicated(replicas, admins))
  } catch (err) {
    await stop()
    throw err
  } finally {
    for (const client of admins) client.disconnect()
  }
  /** A new master, empty, joined to the cluster (`redis-cli --cluster add-node`), with the others' settings. */
  const addMaster = async () => {
    const server = await startServer(dir, clusterArgs, { binary })
    started.push(server)
    const { port } = server
    const known = await liveNode(started)
    await execFileAsync('redis-cli', ['--cluster', 'add-node', `127.0.0.1:${port}`, `127.0.0.1:${known.port}`])
    // Every node that answers knows it, and it has read the slots: a node that has not sees the
    // cluster down, and answers the rebalance's MIGRATE with CLUSTERDOWN.
    const clients = started.map(node => admin(node.port))
    try {
      await until('the new master did not join', async () => (await Promise.all(clients.map(client =>
        client.call('CLUSTER', 'INFO').then(info => /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${started.length}\\b`).test(info), () => client !== clients[clients.length - 1])))).every(Boolean))
    } finally {
      for (const client of clients) client.disconnect()
    }
    return server
  }
  return clusterOf(started.slice(0, 3), started.slice(3), stop, addMaster, started)
}

const execFileAsync = promisify(execFile)

/** A node of `servers` that answers. */
async function liveNode (servers) {
  for (const server of servers) {
    const probe = admin(server.port)
    try {
      await probe.connect()
      await probe.ping()
      return server
    } catch {
      // killed: try the next
    } finally {
      probe.disconnect()
    }
  }
  throw new Error('no node of the cluster answers')
}

/**
 * `ClientClass` (of `client`): the ioredis `Cluster` constructor the clients are made with (this package's
 * ioredis, or another major's, as the tests and the bench run both).
 */
function clusterOf (masters, replicas, stop, addMaster, all) {
  const clients = []
  const client = (options = {}, ClientClass = Cluster) => {
    const cluster = new ClientClass(masters.map(({ port }) => ({ host: '127.0.0.1', port })), options)
    clients.push(cluster)
    return cluster
  }
  return {
    masters,
    replicas,
    client,
    /**
     * Adds an empty master and moves slots onto it from every master under way
     * (`redis-cli --cluster rebalance --cluster-use-empty-masters`); resolves once done.
     */
    async rebalance () {
      const added = await addMaster()
      const known = await liveNode(all.filter(node => node !== added))
      await execFileAsync('redis-cli', ['--cluster', 'rebalance', `127.0.0.1:${known.port}`, '--cluster-use-empty-masters'])
      return added
    },
    /** The server that serves `key`'s slot now, asked of a node that answers. */
    async masterOf (key) {
      for (const server of all) {
        const probe = admin(server.port)
        try {
          const slot = await probe.call('CLUSTER', 'KEYSLOT', key)
          const ranges = await probe.call('CLUSTER', 'SLOTS')
          const [, , [, port]] = ranges.find(([first, last]) => slot >= first && slot <= last)
          return all.find(candidate => candidate.port === port)
        } catch {
          // killed: ask the next
        } finally {
          probe.disconnect()
        }
      }
      throw new Error('no node of the cluster answers')
    },
    /** The replica of `master` (at the start). */
    replicaOf: master => replicas[masters.indexOf(master)],
    async stop () {
      for (const cluster of clients) cluster.disconnect()
      await stop()
    }
  }
}

/**
 * Polls `server` every 20 ms until ROLE says master; resolves with performance.now() then. A
 * connection of its own per poll: a Sentinel failover closes the promoted server's connections.
 */
export async function promoted (server, timeoutMs = 20_000) {
  for (const started = performance.now(); performance.now() - started < timeoutMs; await sleep(20)) {
    const probe = admin(server.port)
    try {
      const [role] = await probe.call('ROLE')
      if (role === 'master') return performance.now()
    } catch {
      // closed under it: poll again
    } finally {
      probe.disconnect()
    }
  }
  throw new Error(`the replica on port ${server.port} was not promoted within ${timeoutMs / 1000} s`)
}

const NAME = 'exchangepace'

/** `command` on the server at `port`, on a connection of its own. */
async function ask (port, ...command) {
  const client = admin(port)
  try {
    return await client.call(...command)
  } finally {
    client.disconnect()
  }
}

/**
 * The master, a replica in sync, and three sentinels (quorum 2) that each know the replica and
 * the two other sentinels: a failover is possible from then on. The master is declared down after
 * `downAfterMs` without an answer. `stop()` kills them all.
 */
export async function startSentinels ({ downAfterMs = 1000 } = {}) {
  const { dir, remove } = scratch()
  const started = []
  const stop = async () => {
    await Promise.all(started.map(server => server.kill()))
    remove()
  }
  const sync = ['--repl-diskless-sync-delay', '0', '--repl-ping-replica-period', '1']
  try {
    const master = await startServer(dir, sync)
    started.push(master)
    const replica = await startServer(dir, [...sync, '--replicaof', '127.0.0.1', String(master.port)])
    started.push(replica)
    await until('the replica did not sync', async () => /master_link_status:up/.test(await ask(replica.port, 'INFO', 'replication')))
    const sentinels = []
    for (let i = 0; i < 3; i++) {
      const config = join(dir, `sentinel-${i}.conf`)
      writeFileSync(config, [`sentinel monitor ${NAME} 127.0.0.1 ${master.port} 2`, `sentinel down-after-milliseconds ${NAME} ${downAfterMs}`,
        `sentinel failover-timeout ${NAME} 10000`, ''].join('\n'))
      const sentinel = await startServer(dir, ['--sentinel'], { config })
      started.push(sentinel)
      sentinels.push(sentinel)
    }
    await until('the sentinels did not find each other and the replica', async () => {
      const views = await Promise.all(sentinels.map(async ({ port }) => [await ask(port, 'SENTINEL', 'REPLICAS', NAME), await ask(port, 'SENTINEL', 'SENTINELS', NAME)]))
      return views.every(([replicas, others]) => replicas.length === 1 && others.length === 2)
    })
    const servers = [master, replica]
    return {
      name: NAME,
      sentinels: sentinels.map(({ port }) => ({ host: '127.0.0.1', port })),
      /** The master and the replica now, as the first sentinel names the master (a failover swaps them). */
      async roles () {
        const [, port] = await ask(sentinels[0].port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME)
        const now = servers.find(server => server.port === Number(port))
        return { master: now, replica: servers.find(server => server !== now) }
      },
      /** SENTINEL FAILOVER: the sentinels promote the replica and demote the master, closing its clients' connections. */
      failOver: () => ask(sentinels[0].port, 'SENTINEL', 'FAILOVER', NAME),
      stop
    }
  } catch (err) {
    await stop()
    throw err
  }
}
