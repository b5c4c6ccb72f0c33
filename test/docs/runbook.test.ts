import t from 'tap'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { delimiter, dirname, join } from 'node:path'
import { extractBlocks } from '../helpers/doc-blocks.js'
import { installedOrSkip } from '../helpers/cluster.js'
import { redisOrSkip, spareDatabase } from '../helpers/redis.js'
import type { TapTest } from '../helpers/shared-behaviour.js'

/**
 * The runbook's commands, run as written (issue 41, item 9): every `sh` block of docs/operating.md
 * goes through bash, against the two replicas of examples/oauth2-server.js that the runbook starts
 * (its own block starts them) on one Redis, and each block's effect is checked on both replicas.
 *
 * What the test changes in a block, and nothing else:
 * - the replicas' Redis URL (`redis://127.0.0.1:6379` in the block that starts them) is the test's
 *   $REDIS_URL with a database of its own (`/N`), so that the default prefix the runbook's
 *   commands use (they give no --prefix) holds only this test's keys; Pub/Sub is not per database,
 *   so the replicas may hear other tests' announcements, on paces and keys this test never uses;
 * - their ports (`PORT=3001`, `PORT=3002`) are 0, any free port, read from what each replica prints;
 * - the admin route's host, `https://auth.internal`, is the first replica's address.
 * `npx exchangepace` runs this checkout's built CLI (dist/operator/bin.js): an `npx` shim first on
 * PATH, so that nothing is fetched from a registry, and `node` the Node that runs the test.
 */

const repo = join(import.meta.dirname, '..', '..')
const RUNBOOK = 'docs/operating.md'
const blocks = extractBlocks(RUNBOOK, readFileSync(join(repo, RUNBOOK), 'utf8')).blocks.filter(block => block.lang === 'sh')

const redis = installedOrSkip('curl', 'the runbook\'s admin route is called with curl') ? await redisOrSkip() : null
if (redis !== null) {
  t.setTimeout(60_000)
  const base = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
  const { url: redisUrl, db } = await spareDatabase(redis, base)
  const ADMIN_TOKEN = randomBytes(16).toString('hex')
  const bin = mkdtempSync(join(tmpdir(), 'exchangepace-runbook-'))
  t.teardown(() => rmSync(bin, { recursive: true, force: true }))
  writeFileSync(join(bin, 'npx'), `#!/bin/sh\n[ "$1" = exchangepace ] || { echo "npx shim: only exchangepace, got $1" >&2; exit 127; }\nshift\nexec '${process.execPath}' '${join(repo, 'dist', 'operator', 'bin.js')}' "$@"\n`)
  chmodSync(join(bin, 'npx'), 0o755)
  const env = { ...process.env, PATH: [bin, dirname(process.execPath), process.env.PATH].join(delimiter), REDIS_URL: redisUrl, ADMIN_TOKEN }
  const keysOfTheTest = redis.duplicate({ db })
  t.teardown(async () => {
    const keys = await keysOfTheTest.keys('exchangepace:*')
    if (keys.length > 0) await keysOfTheTest.del(...keys)
    await keysOfTheTest.quit()
  })

  /** Which sh blocks the test ran: every one of the runbook's must be. */
  const ran = new Set<string>()
  /** The runbook's one sh block that holds `text`. */
  const blockWith = (text: string): string => {
    const found = blocks.filter(block => block.code.includes(text))
    if (found.length !== 1) throw new Error(`${RUNBOOK}: ${found.length} sh blocks hold ${JSON.stringify(text)}, expected one`)
    ran.add(found[0].code)
    return found[0].code
  }
  /** Runs `script` through bash in the repository, with the runbook's environment; its output and exit code. */
  const bash = async (script: string): Promise<{ code: number | null, stdout: string, stderr: string }> => {
    const child = spawn('bash', ['-euo', 'pipefail', '-c', script], { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
    const [code] = await once(child, 'exit') as [number | null]
    return { code, stdout, stderr }
  }

  // "Run the examples as a fleet": the block that starts two replicas, in a process group of its
  // own that the test ends (SIGTERM: each replica closes its server and its Redis connection).
  const start = blockWith('node examples/oauth2-server.js &')
    .replaceAll('redis://127.0.0.1:6379', redisUrl)
    .replace(/PORT=300[12]/g, 'PORT=0')
  const fleet = spawn('bash', ['-c', `${start}\nwait`], { cwd: repo, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] })
  /** Sends `signal` to the fleet's process group; false when no process of it is left. */
  const signalFleet = (signal: NodeJS.Signals | 0): boolean => {
    try {
      process.kill(-(fleet.pid as number), signal)
      return true
    } catch {
      return false
    }
  }
  process.once('exit', () => signalFleet('SIGKILL'))
  t.teardown(async () => {
    signalFleet('SIGTERM')
    for (let waited = 0; signalFleet(0); waited += 50) {
      if (waited >= 5000) signalFleet('SIGKILL')
      await sleep(50)
    }
  })
  const replicas = await listening(fleet, 2)

  /** A token request for reporting-service from `source` (the proxy's X-Forwarded-For), with its right secret or an old one. */
  const token = async (replica: string, right: boolean, source: string): Promise<number> => {
    const secret = right ? 'rep-s3cret_2026.v1~' : 'rep-s3cret_2025.v0~'
    const response = await fetch(`${replica}/token`, {
      method: 'POST',
      headers: { authorization: `Basic ${Buffer.from(`reporting-service:${secret}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': source },
      body: 'grant_type=client_credentials'
    })
    await response.arrayBuffer()
    return response.status
  }
  /** The old secret five times from `source`, on both replicas in turn: then both refuse the right one. */
  const lockOut = async (t: TapTest, source: string): Promise<void> => {
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) statuses.push(await token(replicas[i % 2], false, source))
    t.same(statuses, [401, 401, 401, 401, 401], `five failures from ${source}, over both replicas`)
    t.same(await Promise.all(replicas.map(replica => token(replica, true, source))), [429, 429], `locked out on both from ${source}`)
  }
  const bothGrant = async (t: TapTest, source: string): Promise<void> => {
    for (const replica of replicas) t.equal(await token(replica, true, source), 200, `${replica} grants reporting-service from ${source}`)
  }

  t.test('a client locked out after a bad secret rotation: the CLI inspects and resets it on both replicas', async t => {
    await lockOut(t, '203.0.113.7')
    const run = await bash(blockWith("npx exchangepace inspect --redis \"$REDIS_URL\" --pace '/token#client+source:rejected' --client reporting-service --source 203.0.113.7"))
    t.equal(run.code, 0, run.stderr)
    t.match(run.stdout, /^\/token#client\+source:rejected, client reporting-service from 203\.0\.113\.7 \(Redis key "exchangepace:[^"]+"\)\n {2}remaining {6}0 \(of 5 per 1 h/)
    t.match(run.stdout, /\nreset \/token#client\+source:rejected, client reporting-service from 203\.0\.113\.7: the bucket is full in Redis[^\n]*it was spent \(0 left\)\.\n$/)
    await bothGrant(t, '203.0.113.7')
  })

  t.test('the same through the example\'s admin route, with curl', async t => {
    await lockOut(t, '203.0.113.7')
    const run = await bash(blockWith('https://auth.internal/admin/paces/reset').replace('https://auth.internal', replicas[0]))
    t.equal(run.code, 0, run.stderr)
    t.same(JSON.parse(run.stdout), { pace: '/token#client+source:rejected', remaining: 5, retryAfterMs: 0, fullInMs: 0, blockedUntil: null })
    await bothGrant(t, '203.0.113.7')
  })

  t.test('a client locked out from two addresses: inspect and list it by the client alone, and reset every address', async t => {
    await lockOut(t, '203.0.113.7')
    await lockOut(t, '203.0.113.8')
    const run = await bash(blockWith("npx exchangepace list    --redis \"$REDIS_URL\" --pace '/token#client+source:rejected' --client reporting-service"))
    t.equal(run.code, 0, run.stderr)
    t.match(run.stdout, /^\/token#client\+source:rejected, client reporting-service from every address: 2 pairs held back; the most held back:\n/)
    t.match(run.stdout, /\n\/token#client\+source:rejected: 2 keys held back, least remaining first\n {2}client reporting-service from 203\.0\.113\.[78]: remaining 0 [^\n]+\n {2}client reporting-service from 203\.0\.113\.[78]: remaining 0 /)
    t.match(run.stdout, /\nreset \/token#client\+source:rejected, client reporting-service from every address: 2 pairs \(203\.0\.113\.[78], 203\.0\.113\.[78]\); every replica follows at once\.\n$/)
    await bothGrant(t, '203.0.113.7')
    await bothGrant(t, '203.0.113.8')
  })

  t.test('an address blocked from the CLI is refused by both replicas, until the block\'s end', async t => {
    const run = await bash(blockWith("--pace '/token#source' --source 198.51.100.23 --seconds 3600"))
    t.equal(run.code, 0, run.stderr)
    t.match(run.stdout, /^blocked \/token#source, source 198\.51\.100\.23 for 1 h, until /)
    for (const replica of replicas) {
      const response = await fetch(`${replica}/token`, { method: 'POST', headers: { 'x-forwarded-for': '198.51.100.23', 'content-type': 'application/x-www-form-urlencoded' }, body: 'grant_type=client_credentials' })
      await response.arrayBuffer()
      t.equal(response.status, 429, `${replica} refuses it`)
      t.ok(Number(response.headers.get('retry-after')) > 3590, 'with a Retry-After that reaches the block\'s end')
    }
  })

  t.test('why is this client refused: the CLI inspects its exchanges\' pace', async t => {
    const run = await bash(blockWith("--pace '/token#client' --client reporting-service"))
    t.equal(run.code, 0, run.stderr)
    t.match(run.stdout, /^\/token#client, client reporting-service \(Redis key "exchangepace:\/token#client:reporting-service"\)\n/)
  })

  t.test('the CLI reads the catalog the replicas recorded, lists who is held back and resets a client whole', async t => {
    await lockOut(t, '192.0.2.44')
    const run = await bash(blockWith('npx exchangepace paces --redis "$REDIS_URL"'))
    t.equal(run.code, 0, run.stderr)
    t.match(run.stdout, /^The paces the apps on exchangepace: recorded:\n/)
    for (const pace of ['/token#client+source:rejected  keyed by client+source, 5 per 1 h', '/token#source  keyed by source, 50/s', '/admin#source:rejected  keyed by source, 5 per 1 h']) t.match(run.stdout, `  ${pace}`)
    t.match(run.stdout, /\n\/token#client\+source:rejected: 1 key held back, least remaining first\n {2}client reporting-service from 192\.0\.2\.44: remaining 0 /)
    t.match(run.stdout, /\nreset [^\n]+ from every address: 1 pair \(192\.0\.2\.44\)/)
    await bothGrant(t, '192.0.2.44')
  })

  t.test('locked out of the admin routes by five wrong tokens: the CLI\'s reset lets the operator back in on both', async t => {
    const admin = async (replica: string, token: string): Promise<number> => {
      const response = await fetch(`${replica}/admin/paces`, { headers: { authorization: `Bearer ${token}` } })
      await response.arrayBuffer()
      return response.status
    }
    const wrong: number[] = []
    for (let i = 0; i < 5; i++) wrong.push(await admin(replicas[i % 2], `wrong-${i}`))
    t.same(wrong, [401, 401, 401, 401, 401])
    t.same(await Promise.all(replicas.map(replica => admin(replica, ADMIN_TOKEN))), [429, 429], 'the right token is refused on both')
    const run = await bash(blockWith("--pace '/admin#source:rejected' --source 127.0.0.1"))
    t.equal(run.code, 0, run.stderr)
    t.same(await Promise.all(replicas.map(replica => admin(replica, ADMIN_TOKEN))), [200, 200], 'back in, on both')
  })

  t.test('every sh block of the runbook was run', async t => {
    t.same(blocks.filter(block => !ran.has(block.code)).map(block => `${block.file}:${block.line}`), [])
  })
}

/** The addresses of the `count` replicas `fleet` started, read from what each prints once it listens. */
async function listening (fleet: ReturnType<typeof spawn>, count: number): Promise<string[]> {
  const found: string[] = []
  let output = ''
  let errors = ''
  fleet.stderr?.on('data', (chunk: Buffer) => { errors += chunk.toString() })
  return await new Promise((resolve, reject) => {
    const timer = setTimeout(() => { reject(new Error(`the replicas did not listen within 20 s:\n${errors}`)) }, 20_000)
    fleet.once('exit', code => { clearTimeout(timer); reject(new Error(`the replicas exited (${String(code)}):\n${errors}`)) })
    fleet.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString()
      for (const [, address] of output.matchAll(/paced by exchangepace on (http:\/\/[\d.]+:\d+);/g)) if (!found.includes(address)) found.push(address)
      if (found.length === count) {
        clearTimeout(timer)
        resolve(found)
      }
    })
  })
}
