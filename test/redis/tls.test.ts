import t from 'tap'
import { readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { Redis, type Cluster } from 'ioredis'
import { RedisStore } from '../../lib/index.js'
import { main } from '../../lib/operator/cli.js'
import { redisPaceName } from '../../lib/redis/scripts.js'
import { blockBehaviour } from '../helpers/block-behaviour.js'
import { extractBlocks } from '../helpers/doc-blocks.js'
import { ClockedClient } from '../helpers/redis.js'
import { certificatesOrSkip, startTlsCluster, startTlsServer, tlsOptions } from '../helpers/tls.js'
import { operatorBehaviour } from '../helpers/operator-behaviour.js'
import { build, form, sharedBehaviour, type TapTest } from '../helpers/shared-behaviour.js'

// Production Redis speaks TLS and gives the application a user of its own: servers of the file's
// own that speak only TLS, with certificates it makes, and the user docs/stores.md's ACL SETUSER
// lines create, run exactly as written there. As that user: the store's behaviours, the operator
// API, the blocks through an outage and the CLI, on one Redis and on a cluster of three masters;
// and a user missing a permission gets an error naming it, never a silent outage.

/** docs/stores.md's ACL SETUSER lines: for one Redis, and for each node of a cluster. */
function aclLines (): { alone: string, cluster: string } {
  const { blocks } = extractBlocks('docs/stores.md', readFileSync(new URL('../../docs/stores.md', import.meta.url), 'utf8'))
  const lines = blocks.filter(block => block.code.startsWith('ACL SETUSER')).map(block => block.code.trim())
  if (lines.length !== 2) throw new Error(`docs/stores.md should give two ACL SETUSER lines, gives ${lines.length}`)
  return { alone: lines[0], cluster: lines[1] }
}

/** The user and password the lines create. */
const USER = 'exchangepace'
const PASSWORD = 'CHANGE-ME'

/** Runs an ACL SETUSER line through `admin`, as redis-cli would split it. */
async function run (admin: Redis, line: string): Promise<unknown> {
  const [command, ...args] = line.split(/\s+/)
  return await admin.call(command, ...args)
}

/** Each prefix the store is given: under the lines' `~exchangepace:*`. */
let stores = 0
const nextPrefix = (label: string): string => `exchangepace:${label}-${++stores}:`

/** The CLI's output and exit code. */
async function cli (...argv: string[]): Promise<{ stdout: string, stderr: string, code: number }> {
  const out = { stdout: '', stderr: '', code: -1 }
  out.code = await main(argv, {
    stdout: { write: (text: string) => { out.stdout += text } },
    stderr: { write: (text: string) => { out.stderr += text } },
    env: {}
  })
  return out
}

const certs = await certificatesOrSkip(t, 'redis-server')
if (certs !== null) {
  const lines = aclLines()

  t.test('one Redis over TLS, as the user of docs/stores.md\'s ACL SETUSER line', async t => {
    const server = await startTlsServer(t, 'redis-server', certs)
    const admin = new Redis({ ...tlsOptions(certs), port: server.port })
    t.teardown(() => admin.quit())
    t.equal(await run(admin, lines.alone), 'OK', 'the line, exactly as written')
    const userClient = (t: TapTest, user = USER): Redis => {
      const client = new Redis({ ...tlsOptions(certs, user, PASSWORD), port: server.port, enableAutoPipelining: true })
      client.on('error', () => {}) // a connection the server drops when the test ends
      t.teardown(() => client.quit())
      return client
    }
    const url = (user = USER): string => `rediss://${user}:${PASSWORD}@127.0.0.1:${server.port}`

    t.test('the store\'s behaviours', async t => {
      const client = userClient(t)
      let prefix = ''
      const store = (): Record<string, unknown> => {
        prefix = nextPrefix('shared')
        return { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }
      }
      const rows = async (_app: unknown, name: string): Promise<number> => {
        // Refunds are sent from onResponse without waiting: once the user's connection has answered
        // a command sent after them, a KEYS on the administrator's sees their effect.
        await new Promise(resolve => setImmediate(resolve))
        await client.time()
        return (await admin.keys(`${prefix}${name}:*`)).length
      }
      sharedBehaviour(t, store, rows)
    })

    t.test('the operator API', async t => {
      let clock = 1_000_000
      const clocked = new ClockedClient(userClient(t), () => clock * 1000)
      const prefix = nextPrefix('operator')
      operatorBehaviour(t, {
        options: scope => ({ now: () => clock, store: new RedisStore({ client: clocked, prefix: `${prefix}${scope}:`, timeoutMs: 1000 }) }),
        advance: ms => { clock += ms },
        shared: true,
        hasRow: async (scope, _app, name, key) => await admin.exists(`${prefix}${scope}:${redisPaceName(name)}:${key}`) === 1
      })
    })

    t.test('blocks through an outage', async t => {
      blockBehaviour(t, {
        client: userClient,
        cli: ['--redis', url(), '--tls-ca', certs.caFile],
        pause: async () => {
          server.pause()
          return () => { server.resume() }
        },
        call: async (...command) => await admin.call(command[0], ...command.slice(1))
      }, nextPrefix)
    })

    t.test('the CLI over rediss:// with --tls-ca, as the user', async t => {
      const common = ['--pace', '/token', '--client', 'webapp', '--prefix', nextPrefix('cli'), '--redis', url(), '--tls-ca', certs.caFile]
      const blocked = await cli('block', ...common, '--seconds', '60', '--json')
      t.equal(blocked.code, 0, blocked.stderr)
      t.match(JSON.parse((await cli('inspect', ...common, '--json')).stdout), { bucket: { state: 'blocked' } })
      t.match((await cli('reset', ...common)).stdout, /it was blocked\.\n$/)
      const unverified = await cli('inspect', ...common.slice(0, -2))
      t.same({ code: unverified.code, stdout: unverified.stdout }, { code: 1, stdout: '' }, 'without --tls-ca, the test CA is not one of the system\'s')
      t.match(unverified.stderr, new RegExp(`^exchangepace: Redis at rediss://127\\.0\\.0\\.1:${server.port} does not answer \\(self[- ]signed certificate in certificate chain\\); nothing was changed\\n$`))
    })

    t.test('a user missing a permission gets an error naming it, at start-up or on the first call, never a silent outage', async t => {
      const cases: Array<[string, string, RegExp]> = [
        ['a command its scripts call', '-time', /^exchangepace: Redis denies the RedisStore's user the commands TIME \(ERR The user executing the script can't run this command or subcommand\); grant it the keys ~exchangepace:lacking-\d+:\*, the channel &exchangepace:lacking-\d+:blocks and the commands of the ACL SETUSER line in docs\/stores\.md$/],
        ['its keys', 'resetkeys ~elsewhere:*', /^exchangepace: Redis denies the RedisStore's user running its scripts \(NOPERM this user has no permissions to access one of the keys used as arguments\); grant it the keys ~exchangepace:lacking-\d+:\*/],
        ['its channel', 'resetchannels', /the commands PUBLISH \(ERR The user executing the script can't publish to the channel mentioned in the command\)/],
        ['SUBSCRIBE', '-subscribe', /^exchangepace: Redis denies the RedisStore's user subscribing to exchangepace:lacking-\d+:blocks \(NOPERM this user has no permissions to run the 'subscribe' command\)/],
        ['EVALSHA, which a connection sends from its second call of a script on', '-evalsha', /^exchangepace: Redis denies the RedisStore's user reading the blocks in force \(NOPERM this user has no permissions to run the 'evalsha' command\)/]
      ]
      for (const [what, lacking, said] of cases) {
        const user = `lacking-${++stores}`
        await run(admin, `${lines.alone.replace(`SETUSER ${USER} `, `SETUSER ${user} `)} ${lacking}`)
        const log: Array<Record<string, unknown>> = []
        const app = await replica(t, userClient(t, user), `exchangepace:${user}:`, log)
        t.ok(await logged(log, said), `${what}: said at start-up`)
        await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'webapp']) })
        const second = await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'webapp']) })
        t.equal(second.statusCode, 200, `${what}: requests are answered`)
        // A user denied its keys cannot write the catalog either: that is said, as a warning of its own.
        t.same(log.filter(line => line.level === 40 && !String(line.msg).startsWith('exchangepace: the store did not record the catalog')), [], `${what}: nothing says Redis is unavailable`)
      }
      const user = `lacking-${++stores}`
      await run(admin, `${lines.alone.replace(`SETUSER ${USER} `, `SETUSER ${user} `)} -evalsha`)
      const log: Array<Record<string, unknown>> = []
      const app = await replica(t, userClient(t, user), `exchangepace:${user}:`, log)
      const statuses = []
      for (let i = 0; i < 3; i++) statuses.push((await app.inject({ method: 'POST', url: '/token', ...form(['client_id', 'webapp']) })).statusCode)
      t.same(statuses, [200, 200, 200], 'a request Redis denies is answered, paced in memory')
      t.match(log.filter(line => /a permission is missing, not the server/.test(String(line.msg))), [{ level: 50, msg: /^exchangepace: Redis store denies the RedisStore's user a command \(NOPERM this user has no permissions to run the 'evalsha' command\): a permission is missing, not the server; pacing per replica in memory until it is granted/ }], 'and logged as the permission it lacks, once')
      const cliUser = `lacking-${++stores}`
      await run(admin, `${lines.alone.replace(`SETUSER ${USER} `, `SETUSER ${cliUser} `)} -publish`)
      const blocked = await cli('block', '--pace', '/token', '--client', 'webapp', '--seconds', '60', '--prefix', `exchangepace:${cliUser}:`, '--redis', url(cliUser), '--tls-ca', certs.caFile)
      t.same({ code: blocked.code, stdout: blocked.stdout }, { code: 1, stdout: '' })
      t.match(blocked.stderr, /(^|\n)exchangepace: the key is blocked in Redis, but telling the replicas failed \(ERR The user executing the script can't run this command or subcommand/, 'the CLI says what Redis denied')
    })
  })

  t.test('a cluster over TLS, as the user of docs/stores.md\'s Cluster line', async t => {
    const cluster = await startTlsCluster(t, 'redis-server', certs)
    for (const admin of cluster.admins()) t.equal(await run(admin, lines.cluster), 'OK', 'the line, exactly as written, on each node')
    const admin = cluster.client()
    const userClient = (t: TapTest): Cluster => {
      const client = cluster.client({ enableAutoPipelining: true }, USER, PASSWORD)
      client.on('error', () => {})
      t.teardown(() => client.quit())
      return client
    }

    t.test('the store\'s behaviours', async t => {
      const client = userClient(t)
      let prefix = ''
      const store = (): Record<string, unknown> => {
        prefix = nextPrefix('cluster')
        return { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }
      }
      const rows = async (_app: unknown, name: string): Promise<number> => {
        await new Promise(resolve => setImmediate(resolve))
        await Promise.all(client.nodes('master').map(async node => await node.time()))
        const counts = await Promise.all(admin.nodes('master').map(async node => (await node.keys(`${prefix}${name}:*`)).length))
        return counts.reduce((sum, count) => sum + count, 0)
      }
      sharedBehaviour(t, store, rows, 2000)
    })

    t.test('blocks through an outage', async t => {
      blockBehaviour(t, {
        client: userClient,
        cli: ['--cluster', '--redis', `rediss://${USER}:${PASSWORD}@127.0.0.1:${cluster.masters[0].port}`, '--tls-ca', certs.caFile],
        pause: async () => {
          for (const master of cluster.masters) master.pause()
          return () => { for (const master of cluster.masters) master.resume() }
        },
        call: async (...command) => await admin.call(command[0], ...command.slice(1))
      }, nextPrefix)
    })
  })
}

/** A replica on `client` with one pace, `/token` by client at 5 a second, logging to `log`. */
async function replica (t: TapTest, client: Redis, prefix: string, log: Array<Record<string, unknown>>): Promise<FastifyInstance> {
  return await build(t, { store: new RedisStore({ client, prefix, timeoutMs: 1000 }) }, app => {
    app.post('/token', { config: { pace: { perSecond: 5, key: 'client', spend: 'every' } } }, async () => 'token')
  }, { logger: { level: 'info', stream: { write: (line: string) => { log.push(JSON.parse(line)) } } } })
}

/** Waits, at most 5 s, for a line of `log` at error level that matches `said`. */
async function logged (log: ReadonlyArray<Record<string, unknown>>, said: RegExp): Promise<boolean> {
  for (let waited = 0; waited < 5000; waited += 20) {
    if (log.some(line => line.level === 50 && said.test(String(line.msg)))) return true
    await sleep(20)
  }
  return false
}
