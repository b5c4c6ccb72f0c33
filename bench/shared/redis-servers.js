// A Redis Cluster of three masters, each with a replica, on loopback ports free at run time, for
// the failover runs (bench/parts/failover/failover-run.js): the benchmark's part 9 and test/redis-failover.test.ts
// start it through here. Plain JavaScript, as tap runs tests without type-checking them.
//
// Each server runs under a small shell that kills it when this process's end of a pipe closes, so
// that no server outlives the run however it ends; `stop()` kills them all and waits for them.

import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import Redis, { Cluster } from 'ioredis'

/**
 * Runs "$0" (the server) with "$@", says its pid, and exits when the server does; a reader in the
 * background kills the server when standard input closes (kept on fd 3: an asynchronous list's
 * standard input is /dev/null in a shell without job control). The tests' servers run under it too
 * (test/helpers/cluster.ts).
 */
export const WATCHDOG = 'exec 3<&0; "$0" "$@" & server=$!; echo "$server"; (while read -r _; do :; done; kill -9 "$server" 2>/dev/null) <&3 & wait "$server"'

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

/** A client for one server, for administration: no retries, errors left to the caller. */
export function admin (port) {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 500 })
  client.on('error', () => {}) // a server being killed: the caller sees the failed command
  return client
}

/**
 * Resolves once `port` answers a PING, or rejects when `exited` (the server's exit, when given)
 * comes first or 10 s pass. The tests' servers wait for it too (test/helpers/cluster.ts).
 */
export async function answering (port, exited = null) {
  const server = { gone: false } // an object: the loop's condition changes from the callbacks
  exited?.then(() => { server.gone = true }, () => { server.gone = true })
  for (let waited = 0; waited < 10_000 && !server.gone; waited += 20) {
    const probe = admin(port)
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

/**
 * Starts `binary` on `port` (a free one when not given) with `args` (after the file `config`, when
 * given), on loopback, nothing kept on disk. The server's `kill()` sends SIGKILL and resolves
 * once it exited.
 */
export async function startServer (dir, args = [], { binary = 'redis-server', port, config } = {}) {
  const chosen = port ?? await spareClusterPort()
  const options = [...(config === undefined ? [] : [config]), '--port', String(chosen), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--logfile', join(dir, `${chosen}.log`), ...args]
  const shell = spawn('sh', ['-c', WATCHDOG, binary, ...options], { stdio: ['pipe', 'pipe', 'ignore'] })
  const exited = once(shell, 'exit')
  const [line] = await once(shell.stdout, 'data')
  const pid = Number.parseInt(line.toString(), 10)
  let killed = null
  const server = {
    port: chosen,
    pid,
    kill: () => {
      killed ??= (async () => {
        shell.stdin.end()
        try { process.kill(pid, 'SIGKILL') } catch {} // already gone
        await exited
      })()
      return killed
    }
  }
  await answering(chosen, exited).catch(async err => {
    await server.kill()
    throw err
  })
  return server
}

/** A scratch directory for the servers' files, and its removal. */
export function scratch () {
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-failover-'))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) }
}

async function clusterReady (clients, knownNodes) {
  const states = await Promise.all(clients.map(client => client.call('CLUSTER', 'INFO')))
  return states.every(info => /cluster_state:ok/.test(info) && new RegExp(`cluster_known_nodes:${knownNodes}\\b`).test(info))
}

async function until (what, check, timeoutMs = 20_000) {
  for (const started = performance.now(); !(await check());) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what} within ${timeoutMs / 1000} s`)
    await sleep(50)
  }
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
    for (let i = 0; i < 6; i++) {
      const port = await spareClusterPort()
      started.push(await startServer(dir, clusterArgs(port), { binary, port }))
    }
    admins.push(...started.map(server => admin(server.port)))
    const masters = admins.slice(0, 3)
    const replicas = admins.slice(3)
    await Promise.all(masters.map((client, i) => client.call('CLUSTER', 'ADDSLOTSRANGE', String(Math.floor(16384 * i / 3)), String(Math.floor(16384 * (i + 1) / 3) - 1))))
    await Promise.all(started.slice(1).map(({ port }) => admins[0].call('CLUSTER', 'MEET', '127.0.0.1', String(port))))
    await until('the six nodes did not meet', () => clusterReady(admins, 6))
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
    const port = await spareClusterPort()
    const server = await startServer(dir, clusterArgs(port), { binary, port })
    started.push(server)
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
