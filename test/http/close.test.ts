import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { installedOrSkip, startCluster } from '../helpers/cluster.js'
import { redisOrSkip } from '../helpers/redis.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

// fastify.close() leaves nothing of the plugin's open: a child process that paces real requests
// over keep-alive connections, closes the app (and its Redis client), and must then exit by
// itself, with no timer, socket or handle left to keep it alive.

const FIXTURE = fileURLToPath(new URL('../fixtures/close-app.js', import.meta.url))
/** How long the child may take, start to exit, on a busy machine; it needs about a second. */
const BOUND_MS = 20000

/** How long the child may take from its report to its exit: Node exits at once when nothing is left open. */
const EXIT_MS = 5000

async function runToExit (t: TapTest, ...store: ['memory'] | ['redis'] | ['cluster', string]): Promise<void> {
  const child = spawn(process.execPath, [FIXTURE, ...store], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  let closedAt = Number.NaN
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString()
    if (out.endsWith('\n')) closedAt = performance.now()
  })
  child.stderr.on('data', (chunk: Buffer) => { err += chunk.toString() })
  const timer = setTimeout(() => child.kill('SIGKILL'), BOUND_MS)
  const [code, signal] = await once(child, 'exit') as [number | null, string | null]
  const exitedAt = performance.now()
  clearTimeout(timer)
  t.equal(signal, null, `exited by itself within ${BOUND_MS} ms, not killed`)
  t.equal(code, 0, err)
  t.same(JSON.parse(out), { statuses: [401, 401, 200, 200, 429, 200, 200, 429] }, 'paced: strangers refunded, 2 of 3 exchanges, 2 of 3 authorizations')
  t.ok(exitedAt - closedAt < EXIT_MS, `exited ${Math.round(exitedAt - closedAt)} ms after everything was closed`)
}

t.test('with the default store, the process exits by itself once the app is closed', async t => {
  await runToExit(t, 'memory')
})

const client = await redisOrSkip()
if (client !== null) {
  t.test('with a RedisStore, the process exits by itself once the app and its client are closed', async t => {
    await runToExit(t, 'redis')
  })
}

if (installedOrSkip('redis-server', 'the close test on a cluster starts one of its own')) {
  t.test('with a RedisStore on a Cluster client, the process exits by itself once the app and its client are closed', async t => {
    const cluster = await startCluster(t, 'redis-server')
    await runToExit(t, 'cluster', String(cluster.masters[0].port))
  })
}
