import t from 'tap'
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis'
import { formCluster, spareClusterPort, startServer, tlsArgs } from '../../bench/shared/redis-servers.js'
import type { Server, ServerBinary } from './cluster.js'
import { underCI } from './redis.js'

/**
 * Redis servers that speak only TLS (`--port 0 --tls-port P`), with certificates made for the
 * test by openssl in a temporary directory: a CA, and a server certificate it signed for
 * 127.0.0.1 and localhost. Each server is started by bench/shared/redis-servers.js, as the others
 * (test/helpers/cluster.ts), and is killed when the test ends.
 */

/** The files of a test's certificates, and the CA's certificate as clients take it. */
export interface Certificates {
  readonly dir: string
  readonly caFile: string
  readonly ca: Buffer
  readonly certFile: string
  readonly keyFile: string
}

/** The options of a TLS client of these servers, as the `user` with `password` (the default user without). */
export function tlsOptions (certs: Certificates, user?: string, password?: string): RedisOptions {
  return { host: '127.0.0.1', tls: { ca: certs.ca }, ...(user === undefined ? {} : { username: user, password }) }
}

/**
 * Makes a CA and a server certificate in a temporary directory removed when `tt` ends; or, when
 * openssl is missing or `binary` was built without TLS, skips `tt`'s tests with the reason (and
 * fails under CI) and resolves to null.
 */
export async function certificatesOrSkip (tt: typeof t, binary: ServerBinary): Promise<Certificates | null> {
  const skip = (reason: string): null => {
    if (underCI()) throw new Error(`CI needs it: ${reason}`)
    tt.skip(reason)
    return null
  }
  if (spawnSync(binary, ['--version']).status !== 0) return skip(`${binary} is not installed; the TLS tests start servers of their own`)
  if (spawnSync('openssl', ['version']).status !== 0) return skip('openssl is not installed; the TLS tests make their certificates with it')
  const dir = mkdtempSync(join(tmpdir(), 'exchangepace-tls-'))
  tt.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const file = (name: string): string => join(dir, name)
  writeFileSync(file('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n')
  const steps = [
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=exchangepace test CA', '-keyout', file('ca.key'), '-out', file('ca.crt')],
    ['req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-keyout', file('server.key'), '-out', file('server.csr')],
    ['x509', '-req', '-days', '2', '-in', file('server.csr'), '-CA', file('ca.crt'), '-CAkey', file('ca.key'), '-CAcreateserial', '-extfile', file('server.ext'), '-out', file('server.crt')]
  ]
  for (const step of steps) {
    const made = spawnSync('openssl', step, { encoding: 'utf8' })
    if (made.status !== 0) throw new Error(`openssl ${step[0]} failed: ${made.stderr}`)
  }
  const certs = { dir, caFile: file('ca.crt'), ca: readFileSync(file('ca.crt')), certFile: file('server.crt'), keyFile: file('server.key') }
  const reason = await tlsRefused(binary, certs)
  if (reason !== null) return skip(`${binary} does not serve TLS (${reason}); the TLS tests need a build with TLS`)
  return certs
}

/**
 * Null when `binary` serves TLS with `certs`: a server started on a free TLS port is ready within
 * 5 s; else what its log or its output says (a build without TLS refuses the port, or exits).
 */
async function tlsRefused (binary: ServerBinary, certs: Certificates): Promise<string | null> {
  const port = await spareClusterPort()
  const log = join(certs.dir, 'tls-check.log')
  const server = spawn(binary, [...tlsArgs(certs, port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', certs.dir, '--logfile', log], { stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  server.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
  server.stderr.on('data', (chunk: Buffer) => { output += chunk.toString() })
  const exited = once(server, 'exit')
  try {
    for (let waited = 0; waited < 5000; waited += 20) {
      let written = ''
      try { written = readFileSync(log, 'utf8') } catch {} // not written yet
      if (written.includes('Ready to accept')) return null
      const lines = `${output}${written}`.trim().split('\n')
      if (server.exitCode !== null) return lines[lines.length - 1]
      await sleep(20)
    }
    return 'not ready within 5 s'
  } finally {
    server.kill('SIGKILL')
    await exited
  }
}

/** Starts `binary` on a free TLS port with `args` after the TLS ones, killed when `tt` ends. */
export async function startTlsServer (tt: typeof t, binary: ServerBinary, certs: Certificates, args: (port: number) => string[] = () => []): Promise<Server> {
  const server: Server = await startServer(certs.dir, args, { binary, tls: certs })
  tt.teardown(server.kill)
  return server
}

/** A TLS cluster of three masters, each with a third of the slots, and a way to make its clients. */
export interface TlsCluster {
  readonly masters: readonly Server[]
  /** A Cluster client over TLS as `user` (the default user without), disconnected when `tt` ends. */
  client: (options?: ClusterOptions, user?: string, password?: string) => Cluster
  /** A client of each master over TLS as the default user, for administration. */
  admins: () => Redis[]
}

/** Starts three TLS masters with cluster mode on (and TLS on the cluster bus), and has them agree. */
export async function startTlsCluster (tt: typeof t, binary: ServerBinary, certs: Certificates): Promise<TlsCluster> {
  const masters = await Promise.all([0, 1, 2].map(() => startTlsServer(tt, binary, certs, port =>
    ['--cluster-enabled', 'yes', '--tls-cluster', 'yes', '--cluster-config-file', join(certs.dir, `nodes-${port}.conf`)])))
  const admins = (): Redis[] => masters.map(({ port }) => {
    const admin = new Redis({ ...tlsOptions(certs), port, maxRetriesPerRequest: 1 })
    tt.teardown(() => { admin.disconnect() })
    return admin
  })
  const setup = admins()
  await formCluster(setup)
  for (const admin of setup) admin.disconnect()
  return {
    masters,
    admins,
    client: (options = {}, user, password) => {
      const cluster = new Cluster(masters.map(({ port }) => ({ host: '127.0.0.1', port })), {
        ...options,
        redisOptions: { ...options.redisOptions, ...tlsOptions(certs, user, password) }
      })
      tt.teardown(() => { cluster.disconnect() })
      return cluster
    }
  }
}
