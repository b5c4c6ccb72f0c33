import t from 'tap'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis, type ClusterOptions } from 'ioredis'
import { answering, spareClusterPort, WATCHDOG } from '../../bench/shared/redis-servers.js'
import { underCI } from './redis.js'

/**
 * Servers the tests start themselves, on loopback ports free at run time, with their files in a
 * temporary directory: a three-master Redis Cluster, or one server alone. Each server runs under a
 * small shell that kills it when the test process's end of a pipe closes, so that no server
 * outlives the test run however it ends (a failed assertion, an exception, a kill); the teardown
 * also kills them at once and waits for them to exit.
 */

/** The server binaries the tests know: Redis's and Valkey's (which takes the same options). */
export type ServerBinary = 'redis-server' | 'valkey-server'

/** One server the test started: its port and pid, a way to freeze and thaw it, and its end. */
export interface Server {
  readonly port: number
  readonly pid: number
  /** SIGSTOP: the server keeps its connections open and answers nothing until `resume`. */
  pause: () => void
  /** SIGCONT: it answers again, the commands that waited first. */
  resume: () => void
  /** Kills it (SIGKILL, a paused server too) and resolves once it and its watchdog have exited. */
  kill: () => Promise<void>
}

/** Whether `binary` (a server, or curl) can be run; outside CI, a missing one skips the file's tests with `reason`. */
export function installedOrSkip (binary: ServerBinary | 'curl', why: string): boolean {
  if (spawnSync(binary, ['--version']).status === 0) return true
  const reason = `${binary} is not installed; ${why}`
  if (underCI()) throw new Error(`CI needs ${binary} (.ci/run installs it): ${reason}`)
  t.skip(reason)
  return false
}

/**
 * Starts `binary` on a free port with `args` (after the port, loopback and no persistence), and
 * registers its kill with `t`'s teardown. Tries other ports when the chosen one was taken first.
 */
async function startServer (tt: typeof t, binary: ServerBinary, dir: string, args: (port: number) => string[]): Promise<Server> {
  for (let attempt = 0; ; attempt++) {
    const port = await spareClusterPort()
    const options = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--logfile', join(dir, `${port}.log`), ...args(port)]
    const shell: ChildProcess = spawn('sh', ['-c', WATCHDOG, binary, ...options], { stdio: ['pipe', 'pipe', 'ignore'] })
    const exited = once(shell, 'exit')
    const [line] = await once(shell.stdout!, 'data') as [Buffer]
    const pid = Number.parseInt(line.toString(), 10)
    let killed: Promise<void> | null = null
    const server: Server = {
      port,
      pid,
      pause: () => { process.kill(pid, 'SIGSTOP') },
      resume: () => { process.kill(pid, 'SIGCONT') },
      kill: () => {
        killed ??= (async () => {
          shell.stdin!.end()
          try { process.kill(pid, 'SIGKILL') } catch {} // already gone
          await exited
        })()
        return killed
      }
    }
    tt.teardown(server.kill)
    try {
      await answering(port, exited)
      return server
    } catch (err) {
      await server.kill()
      if (attempt === 4) throw err
    }
  }
}

/** A temporary directory for the servers' files, removed when `t` ends. */
function scratch (tt: typeof t): string {
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-servers-'))
  tt.teardown(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** One server of `binary` alone, started for `t` and killed when it ends. */
export async function startAlone (tt: typeof t, binary: ServerBinary): Promise<Server> {
  return await startServer(tt, binary, scratch(tt), () => [])
}

/** A cluster of three masters (no replicas), each holding a third of the slots. */
export interface TestCluster {
  readonly masters: readonly Server[]
  /** A client of the cluster, disconnected when `t` ends. */
  client: (options?: ClusterOptions) => Cluster
  /** The master that holds `key`'s slot. */
  masterOf: (key: string) => Promise<Server>
}

/**
 * Starts three masters of `binary` with cluster mode on, gives each a third of the 16384 slots and
 * has them meet: faster than `redis-cli --cluster create`, which waits a second at a time for the
 * nodes to agree. Resolves once every node reports the cluster ok with all three masters known.
 * Failure detection is left at its default (15 s), longer than any test keeps a master paused.
 * `ClientClass`: the ioredis `Cluster` constructor its clients are made with (default: this
 * package's ioredis 5; the tests also run ioredis 6, as the devDependency ioredis6).
 */
export async function startCluster (tt: typeof t, binary: ServerBinary, ClientClass: typeof Cluster = Cluster): Promise<TestCluster> {
  const dir = scratch(tt)
  const masters = await Promise.all([0, 1, 2].map(() => startServer(tt, binary, dir, port =>
    ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`)])))
  const admins = masters.map(({ port }) => new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: 1 }))
  try {
    await Promise.all(admins.map((admin, i) => admin.call('CLUSTER', 'ADDSLOTSRANGE', String(Math.floor(16384 * i / 3)), String(Math.floor(16384 * (i + 1) / 3) - 1))))
    await Promise.all(masters.slice(1).map(({ port }) => admins[0].call('CLUSTER', 'MEET', '127.0.0.1', String(port))))
    const agreed = async (admin: Redis): Promise<boolean> => {
      const info = await admin.call('CLUSTER', 'INFO') as string
      return /cluster_state:ok/.test(info) && /cluster_known_nodes:3\b/.test(info) && /cluster_slots_assigned:16384\b/.test(info)
    }
    for (let waited = 0; !(await Promise.all(admins.map(agreed))).every(Boolean); waited += 50) {
      if (waited > 20000) throw new Error('the cluster did not agree within 20 s')
      await sleep(50)
    }
  } finally {
    for (const admin of admins) admin.disconnect()
  }
  const byPort = new Map(masters.map(master => [master.port, master]))
  const clients: Cluster[] = []
  tt.teardown(() => { for (const client of clients) client.disconnect() })
  const client = (options: ClusterOptions = {}): Cluster => {
    const cluster = new ClientClass(masters.map(({ port }) => ({ host: '127.0.0.1', port })), options)
    clients.push(cluster)
    return cluster
  }
  const lookup = client()
  return {
    masters,
    client,
    masterOf: async (key: string) => {
      const slot = await lookup.cluster('KEYSLOT', key)
      const slots = await lookup.cluster('SLOTS')
      const [, , [, port]] = slots.find(([first, last]) => slot >= first && slot <= last)!
      return byPort.get(port)!
    }
  }
}
