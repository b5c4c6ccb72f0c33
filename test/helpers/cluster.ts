import t from 'tap'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { Cluster, type ClusterOptions } from 'ioredis'
import { admin, formCluster, scratch, startServer as startBenchServer } from '../../bench/shared/redis-servers.js'
import { underCI } from './redis.js'

/**
 * Servers the tests start themselves, through bench/shared/redis-servers.js (which the benchmark
 * starts its servers with too), with their files in a temporary directory: a three-master Redis
 * Cluster, or one server alone. Each server dies with the test process however it ends (a failed
 * assertion, an exception, a kill); the teardown also kills them at once and waits for them to exit.
 */

/** The server binaries the tests know: Redis's and Valkey's (which takes the same options). */
export type ServerBinary = 'redis-server' | 'valkey-server'

/** One server the test started (a `Server` of bench/shared/redis-servers.js): its port and pid, a way to freeze and thaw it, and its end. */
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

/** Starts `binary` on a free port with `args` (bench/shared/redis-servers.js), and has `t`'s teardown kill it. */
async function startServer (tt: typeof t, binary: ServerBinary, dir: string, args: (port: number) => string[]): Promise<Server> {
  const server: Server = await startBenchServer(dir, args, { binary })
  tt.teardown(server.kill)
  return server
}

/** A temporary directory for the servers' files, removed when `t` ends. */
function scratchFor (tt: typeof t): string {
  const { dir, remove } = scratch()
  tt.teardown(remove)
  return dir
}

/** One server of `binary` alone, started for `t` and killed when it ends. */
export async function startAlone (tt: typeof t, binary: ServerBinary): Promise<Server> {
  return await startServer(tt, binary, scratchFor(tt), () => [])
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
  const dir = scratchFor(tt)
  const masters = await Promise.all([0, 1, 2].map(() => startServer(tt, binary, dir, port =>
    ['--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`)])))
  const admins = masters.map(({ port }) => admin(port))
  try {
    await formCluster(admins)
  } finally {
    for (const client of admins) client.disconnect()
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
