// A Redis master, its replica and three sentinels on loopback ports free at run time, for the
// Sentinel runs of bench/parts/failover/failover-run.js (the benchmark's part 9 and test/redis-failover.test.ts).
// Plain JavaScript, as tap runs tests without type-checking them.

import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { admin, scratch, startServer } from './redis-servers.js'

const NAME = 'exchangepace'

async function until (what, check, timeoutMs = 20_000) {
  for (const started = performance.now(); !(await check());) {
    if (performance.now() - started > timeoutMs) throw new Error(`${what} within ${timeoutMs / 1000} s`)
    await sleep(50)
  }
}

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
