import t from 'tap'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createServer, type AddressInfo, type Socket } from 'node:net'
import { fileURLToPath } from 'node:url'
import { USAGE } from '../../lib/operator/cli.js'
import { duration, listText } from '../../lib/operator/cli-report.js'
import { runCli as cli } from '../helpers/cli.js'

/**
 * `exchangepace` without a Redis server: help, every command line it refuses (exit 2, nothing
 * sent), ioredis missing, and a Redis that refuses or does not answer (exit 1, promptly). The
 * commands against a real Redis are test/operator/cli-redis.test.ts's.
 */

/** A command that would act, were Redis there: the options each bad case changes one of. */
const GOOD = ['--redis', 'redis://127.0.0.1:1', '--pace', '/token#client']

t.test('--help and -h print the usage and exit 0', async t => {
  for (const flag of ['--help', '-h']) {
    t.same(await cli([flag]), { stdout: USAGE, stderr: '', code: 0 }, flag)
  }
  t.match(USAGE, /paces\|list\|inspect\|reset\|block\|audit --redis URL \[--pace NAME\]/)
})

t.test('a command line it cannot run is a clear error, exit 2, and nothing is sent', async t => {
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['no command', [...GOOD, '--client', 'c'], {}, /give a command: paces, list, inspect, reset, block, audit/],
    ['an unknown command', ['unblock', ...GOOD, '--client', 'c'], {}, /unknown command "unblock"; the commands are paces, list, inspect, reset, block, audit/],
    ['an argument after the command', ['reset', 'c', ...GOOD, '--client', 'c'], {}, /unexpected argument "c"; options start with --/],
    ['an unknown option', ['reset', ...GOOD, '--client', 'c', '--force'], {}, /Unknown option '--force'/],
    ['an option without its value', ['reset', ...GOOD, '--client'], {}, /Option '--client <value>' argument missing/],
    ['a negative block, as a separate argument', ['block', ...GOOD, '--client', 'c', '--seconds', '-5'], {}, /Option '--seconds' argument is ambiguous/],
    ['a negative block', ['block', ...GOOD, '--client', 'c', '--seconds=-5'], {}, /--seconds must be a number > 0 and <= 31536000, got "-5"/],
    ['a block of no time', ['block', ...GOOD, '--client', 'c', '--seconds', '0'], {}, /--seconds must be a number > 0/],
    ['a block in another notation', ['block', ...GOOD, '--client', 'c', '--seconds', '1e3'], {}, /--seconds must be a number > 0 and <= 31536000, got "1e3"/],
    ['a block over a year', ['block', ...GOOD, '--client', 'c', '--seconds', '31536001'], {}, /--seconds must be a number > 0 and <= 31536000/],
    ['a block without its length', ['block', ...GOOD, '--client', 'c'], {}, /block needs --seconds N/],
    ['a length for another command', ['reset', ...GOOD, '--client', 'c', '--seconds', '60'], {}, /--seconds is for block only; reset takes none/],
    ['no --pace', ['inspect', '--redis', 'redis://127.0.0.1:1', '--client', 'c'], {}, /give --pace NAME/],
    ['an empty --pace', ['inspect', '--redis', 'redis://127.0.0.1:1', '--pace', '', '--client', 'c'], {}, /give --pace NAME/],
    ['no key', ['inspect', ...GOOD], {}, /give the key by --client ID, --source ADDR, both \(a pair's failure budget\), or --key KEY alone \(a key function's pace\); got none/],
    ['parts that fit no kind', ['inspect', ...GOOD, '--client', 'c', '--key', 'k'], {}, /got --client and --key/],
    ['three parts', ['inspect', ...GOOD, '--client', 'c', '--source', '192.0.2.1', '--key', 'k'], {}, /got --client and --source and --key/],
    ['a malformed address', ['block', ...GOOD, '--source', '10.0.0', '--seconds', '60'], {}, /pace "\/token#client": source must be an IP address, or an IPv6 prefix \/64 as the logs show it; got "10.0.0"/],
    ['an IPv6 prefix of another length', ['reset', ...GOOD, '--source', '2001:db8::/48'], {}, /an IPv6 prefix \/64/],
    ['an empty client id', ['reset', ...GOOD, '--client', ''], {}, /client must not be empty/],
    ['a client id with a control character', ['reset', ...GOOD, '--client', 'a\u0007b'], {}, /client contains non-printable characters/],
    ['a client id longer than --max-key-length', ['reset', ...GOOD, '--client', 'abcd', '--max-key-length', '3'], {}, /client is longer than 3 characters/],
    ['a --max-key-length of 0', ['reset', ...GOOD, '--client', 'c', '--max-key-length', '0'], {}, /--max-key-length must be a whole number from 1/],
    ['an --ipv6-subnet of 129', ['reset', ...GOOD, '--source', '2001:db8::1', '--ipv6-subnet', '129'], {}, /--ipv6-subnet must be a whole number from 1 to 128, got "129"/],
    ['a fractional --ipv6-subnet', ['reset', ...GOOD, '--source', '2001:db8::1', '--ipv6-subnet', '64.5'], {}, /--ipv6-subnet must be a whole number/],
    ['a repeated part', ['reset', ...GOOD, '--client', 'a', '--client', 'b'], {}, /--client is given twice; give it once/],
    ['no Redis URL', ['reset', '--pace', 'p', '--client', 'c'], {}, /give --redis URL \(or set REDIS_URL\)/],
    ['an empty REDIS_URL', ['reset', '--pace', 'p', '--client', 'c'], { REDIS_URL: '' }, /give --redis URL/],
    ['a URL of another scheme', ['reset', '--pace', 'p', '--client', 'c', '--redis', 'http://127.0.0.1:6379'], {}, /--redis must be a redis:\/\/ or rediss:\/\/ URL with a host, got "http:\/\/127.0.0.1:6379"/],
    ['no URL', ['reset', '--pace', 'p', '--client', 'c', '--redis', '127.0.0.1:6379'], {}, /--redis must be a redis:\/\/ or rediss:\/\/ URL/],
    ['a URL without a host', ['reset', '--pace', 'p', '--client', 'c', '--redis', 'redis://'], {}, /--redis must be a redis:\/\/ or rediss:\/\/ URL with a host/],
    ['a timeout of 0', ['reset', ...GOOD, '--client', 'c', '--timeout', '0'], {}, /--timeout must be a number > 0 and <= 600/],
    ['a CA for a URL without TLS', ['reset', ...GOOD, '--client', 'c', '--tls-ca', 'ca.pem'], {}, /--tls-ca is for a rediss:\/\/ URL \(TLS\); got redis:\/\//],
    ['paces with a pace', ['paces', ...GOOD], {}, /paces lists every pace; it takes no --pace/],
    ['audit with a pace', ['audit', ...GOOD], {}, /audit prints the latest actions; it takes no --pace/],
    ['paces with a limit', ['paces', '--redis', 'redis://127.0.0.1:1', '--limit', '3'], {}, /paces lists every pace; it takes no --limit/],
    ['an audit limit of 0', ['audit', '--redis', 'redis://127.0.0.1:1', '--limit', '0'], {}, /--limit must be a whole number from 1 to 10000/],
    ['an empty --by', ['reset', ...GOOD, '--client', 'c', '--by', ''], {}, /--by must name the operator in 1 to 200 printable characters, got ""/],
    ['list without a pace', ['list', '--redis', 'redis://127.0.0.1:1'], {}, /give --pace NAME/],
    ['list with a source', ['list', ...GOOD, '--source', '192.0.2.1'], {}, /list takes --pace, and --client for a pair's pace; not --source/],
    ['list with a bad client', ['list', ...GOOD, '--client', 'a\u0007b'], {}, /client contains non-printable characters/],
    ['a list limit of 0', ['list', ...GOOD, '--limit', '0'], {}, /--limit must be a whole number from 1 to 10000, got "0"/],
    ['a limit for another command', ['inspect', ...GOOD, '--client', 'c', '--limit', '5'], {}, /--limit is for list only; inspect takes none/],
    ['a CA file that cannot be read', ['reset', '--pace', 'p', '--client', 'c', '--redis', 'rediss://127.0.0.1:1', '--tls-ca', '/nonexistent/ca.pem'], {}, /--tls-ca: cannot read "\/nonexistent\/ca\.pem" \(ENOENT: no such file or directory/]
  ]
  for (const [what, argv, env, message] of cases) {
    let loaded = false
    const out = await cli(argv, env, async () => { loaded = true; return await import('ioredis') })
    t.equal(out.code, 2, what)
    t.equal(out.stdout, '', what)
    t.match(out.stderr, message, what)
    t.match(out.stderr, /^exchangepace: .*\nRun exchangepace --help for usage\.\n$/s, `${what}: one error, and where help is`)
    t.notOk(loaded, `${what}: ioredis was not even loaded`)
  }
})

t.test('without ioredis it says what to install, exit 1', async t => {
  const missing = 'ioredis-is-not-installed-here'
  const out = await cli(['inspect', ...GOOD, '--client', 'c'], {}, () => import(missing))
  t.same(out, { stdout: '', stderr: 'exchangepace: the CLI talks to Redis through ioredis, which is not installed here: npm install ioredis\n', code: 1 })
  const uncoded = await cli(['inspect', ...GOOD, '--client', 'c'], {}, async () => { throw new Error("Cannot find package 'ioredis' imported from /app/cli.js") })
  t.same(uncoded, { stdout: '', stderr: 'exchangepace: the CLI talks to Redis through ioredis, which is not installed here: npm install ioredis\n', code: 1 }, 'also when a loader hook rethrows the message without its code')
  const broken = await cli(['inspect', ...GOOD, '--client', 'c'], {}, async () => { throw new Error('ioredis failed to load') })
  t.same(broken, { stdout: '', stderr: 'exchangepace: ioredis failed to load\n', code: 1 }, 'another failure to load is told as it is')
})

t.test('a Redis that refuses the connection: exit 1, its address without the password', async t => {
  const single = await cli(['block', '--redis', 'redis://operator:pa55word@127.0.0.1:1', '--pace', 'p', '--client', 'c', '--seconds', '60'])
  t.same(single, { stdout: '', stderr: 'exchangepace: Redis at redis://127.0.0.1:1 does not answer (connect ECONNREFUSED 127.0.0.1:1); nothing was changed\n', code: 1 })
  const fromEnv = await cli(['reset', '--pace', 'p', '--client', 'c'], { REDIS_URL: 'redis://127.0.0.1:1' })
  t.match(fromEnv, { code: 1, stderr: /Redis at redis:\/\/127\.0\.0\.1:1 does not answer/ }, 'REDIS_URL when --redis is not given')
  const cluster = await cli(['inspect', '--cluster', '--redis', 'rediss://operator:pa55word@127.0.0.1:1', '--pace', 'p', '--client', 'c'])
  t.match(cluster, { code: 1, stdout: '', stderr: /^exchangepace: Redis at rediss:\/\/127\.0\.0\.1:1 does not answer \(.+\); nothing was changed\n$/ })
  t.notMatch(cluster.stderr, /pa55word/)
  const clusterDefaultPort = await cli(['inspect', '--cluster', '--redis', 'redis://localhost', '--pace', 'p', '--client', 'c', '--timeout', '0.5'])
  t.match(clusterDefaultPort, { code: 1, stderr: /Redis at redis:\/\/localhost does not answer/ })
})

t.test('a Redis that does not answer: exit 1 once --timeout has passed, and no connection is left open', async t => {
  const sockets: Socket[] = []
  // It reads what it is sent (and answers nothing), so that it sees the CLI's end of the connection.
  const silent = createServer(socket => { sockets.push(socket); socket.resume() })
  silent.listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => { for (const socket of sockets) socket.destroy(); silent.close() })
  const { port } = silent.address() as AddressInfo
  const out = await cli(['inspect', '--redis', `redis://127.0.0.1:${port}`, '--pace', 'p', '--client', 'c', '--timeout', '0.2'])
  t.same(out, { stdout: '', stderr: `exchangepace: Redis at redis://127.0.0.1:${port} does not answer (Command timed out); nothing was changed\n`, code: 1 })
  t.equal(sockets.length, 1, 'one connection')
  if (!sockets[0].readableEnded) await once(sockets[0], 'end')
  t.pass('the CLI closed its side of it')
})

/**
 * ioredis as the CLI loads it, with a client that answers the store's scripts from `rows` (key ->
 * the inspect script's five doubles: spent ms, a block's end, Redis's now, the row's limit and
 * window in ms), for the CLI's output on a machine without Redis; test/operator/cli-redis.test.ts
 * runs the same commands on a real server.
 */
function scriptedIoredis (rows: Map<string, number[]>, calls: string[], failAudit = false) {
  class Scripted {
    constructor (readonly target: unknown) {}
    defineCommand (): void {}
    async connect (): Promise<void> {}
    disconnect (): void { calls.push('disconnect') }
    on (): void {}
    async hgetall (): Promise<Record<string, string>> { return {} }
    async xadd (): Promise<string> {
      if (failAudit) throw new Error('NOPERM this user has no permissions to run the \'xadd\' command')
      return '1-0'
    }

    async exchangepaceInspectBuffer (key: string): Promise<Buffer> {
      calls.push(`inspect ${key}`)
      const bytes = Buffer.alloc(40)
      for (const [i, value] of (rows.get(key) ?? [0, 0, NOW, 0, 0]).entries()) bytes.writeDoubleLE(value, 8 * i)
      return bytes
    }

    async exchangepaceReset (key: string): Promise<number> {
      calls.push(`reset ${key}`)
      return rows.delete(key) ? 1 : 0
    }

    async exchangepaceBlockBuffer (key: string, ms: number): Promise<Buffer> {
      calls.push(`block ${key} ${ms}`)
      const bytes = Buffer.alloc(8)
      bytes.writeDoubleLE(NOW + ms, 0)
      return bytes
    }

    async exchangepaceAnnounce (index: string, channel: string, member: string, ms: number): Promise<number> {
      calls.push(`announce ${index} ${channel} ${member} ${ms}`)
      return 1
    }
  }
  return async () => ({ Redis: Scripted, Cluster: Scripted })
}

/** Redis's clock in the scripted rows: 2026-12-06T03:00:00Z. */
const NOW = Date.UTC(2026, 11, 6, 3)

t.test('inspect, reset and block as a person and a script read them (a scripted Redis)', async t => {
  const budget = 'exchangepace:/token#client+source%3Arejected:reporting-service\u001f203.0.113.7'
  const rows = new Map([
    [budget, [3_540_000, 0, NOW, 5, 3_600_000]],
    ['exchangepace:/token#client:reporting-service', [400, 0, NOW, 5, 1000]],
    ['exchangepace:/token#source:198.51.100.23', [0, NOW + 3_600_000, NOW, 0, 0]]
  ])
  const calls: string[] = []
  const ioredis = scriptedIoredis(rows, calls)
  const run = (...argv: string[]) => cli([...argv, '--redis', 'redis://10.0.0.5:6379'], {}, ioredis)
  const pair = ['--pace', '/token#client+source:rejected', '--client', 'reporting-service', '--source', '203.0.113.7']

  const locked = await run('inspect', ...pair)
  t.equal(locked.code, 0)
  t.match(locked.stdout, /^\/token#client\+source:rejected, client reporting-service from 203\.0\.113\.7 \(Redis key "exchangepace:\/token#client\+source%3Arejected:reporting-service\\u001f203\.0\.113\.7"\)\n/)
  t.match(locked.stdout, /\n {2}remaining {6}0 \(of 5 per 1 h: the rate this row was written at\)\n {2}next unit {6}in 11 min \([\d-]+T[\d:.]+Z\)\n {2}full again {5}in 59 min \(/)
  t.same(JSON.parse((await run('inspect', ...pair, '--json')).stdout), {
    action: 'inspect',
    pace: '/token#client+source:rejected',
    keyKind: 'client+source',
    key: 'reporting-service\u001f203.0.113.7',
    redisKey: budget,
    bucket: { state: 'spent', remaining: 0, retryAfterMs: 660_000, fullInMs: 3_540_000, blockedUntil: null, limit: 5, windowMs: 3_600_000 }
  })
  t.match((await run('inspect', '--pace', '/token#client', '--client', 'reporting-service')).stdout, /remaining {6}3 \(of 5 per 1 s: the rate this row was written at\)\n {2}next unit {6}now\n {2}full again {5}in 400 ms/)
  t.match((await run('inspect', '--pace', '/token#source', '--source', '198.51.100.23')).stdout, /\n {2}blocked until {2}2026-12-06T04:00:00\.000Z \(in 1 h\); every request is refused until then/)
  t.match(JSON.parse((await run('inspect', '--pace', '/token#source', '--source', '198.51.100.23', '--json')).stdout).bucket, { state: 'blocked', remaining: 0, retryAfterMs: 3_600_000, blockedUntil: '2026-12-06T04:00:00.000Z' })
  const full = await run('inspect', '--pace', '/token#client', '--client', 'webapp')
  t.match(full.stdout, /\n {2}full \(no row in Redis\); the pace's declared rate is not stored there, so how many units it holds is not known from here\.\n/)

  t.equal((await run('reset', ...pair)).stdout, 'reset /token#client+source:rejected, client reporting-service from 203.0.113.7: the bucket is full in Redis, and every replica follows at once (one that missed the news, at its next request for the key while Redis answers); it was spent (0 left).\n')
  t.match((await run('reset', '--pace', '/token#source', '--source', '198.51.100.23')).stdout, /; it was blocked\.\n$/)
  t.match((await run('reset', '--pace', '/token#client', '--client', 'webapp')).stdout, /; it had no row \(already full: nothing to lift; check --pace and the parts if one was expected\)\.\n$/)
  t.match(JSON.parse((await run('reset', '--pace', '/token#custom', '--key', 'tenant-7', '--json')).stdout), { action: 'reset', keyKind: 'function', key: 'tenant-7', before: { state: 'full' } })

  const blocked = await run('block', '--pace', '/token#source', '--source', '198.51.100.23', '--seconds', '3600')
  t.equal(blocked.stdout, 'blocked /token#source, source 198.51.100.23 for 1 h, until 2026-12-06T04:00:00.000Z: every replica refuses it until then, also while Redis does not answer (one started while Redis does not answer cannot know of it); then its bucket is full.\n' +
    '  exchangepace reset with the same options lifts it. No catalog was found, so whether an app declares a pace named "/token#source" is not known: check it against fastify.pace.names().\n')
  t.same(JSON.parse((await run('block', '--pace', '/token#source', '--source', '198.51.100.23', '--seconds', '90', '--json', '--cluster')).stdout), {
    action: 'block', pace: '/token#source', keyKind: 'source', key: '198.51.100.23', redisKey: 'exchangepace:/token#source:198.51.100.23', seconds: 90, blockedUntil: '2026-12-06T03:01:30.000Z'
  })
  t.equal(calls.filter(call => call === 'disconnect').length, 12, 'every run closed its connection')
  t.ok(calls.includes(`reset ${budget}`) && calls.includes('block exchangepace:/token#source:198.51.100.23 3600000'))
})

t.test('durations read as a person reads them', async t => {
  const cases: Array<[number, string]> = [
    [0.3, '1 ms'], [750, '750 ms'], [1000, '1 s'], [12_340, '12.4 s'], [60_000, '1 min'], [659_200, '11 min'],
    [660_000, '11 min'], [719_001, '12 min'], [3_540_000, '59 min'], [3_900_000, '1 h 5 min'], [90_061_000, '1 d 1 h'], [86_400_000, '1 d']
  ]
  for (const [ms, text] of cases) t.equal(duration(ms), text, `${ms} ms`)
})

t.test('bin.ts runs the CLI with the process\'s arguments, and sets the exit code', async t => {
  const bin = fileURLToPath(new URL('../../lib/operator/bin.ts', import.meta.url))
  const run = async (argv: string[]) => {
    // TypeScript loaded as the test files are (see the tap config in package.json).
    const child = spawn(process.execPath, [`--import=${new URL('../helpers/typescript.mjs', import.meta.url).href}`, bin, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', chunk => { stdout += String(chunk) })
    child.stderr.on('data', chunk => { stderr += String(chunk) })
    const [code] = await once(child, 'exit')
    return { stdout, stderr, code }
  }
  t.same(await run(['--help']), { stdout: USAGE, stderr: '', code: 0 })
  t.match(await run(['unblock']), { stdout: '', stderr: /unknown command "unblock"/, code: 2 })
})

t.test('an action the audit trail cannot record is done, and says so on stderr', async t => {
  const calls: string[] = []
  const out = await cli(['block', '--redis', 'redis://10.0.0.5:6379', '--pace', '/token#source', '--source', '198.51.100.23', '--seconds', '60'], {}, scriptedIoredis(new Map(), calls, true))
  t.equal(out.code, 0)
  t.match(out.stdout, /^blocked \/token#source/)
  t.match(out.stderr, /exchangepace: done, but the audit trail did not record it \(NOPERM this user has no permissions to run the 'xadd' command\)\.\n$/)
})

t.test('a list of one key says "1 key"', async t => {
  const row = { state: 'spent', remaining: 0, retryAfterMs: 200, fullInMs: 1000, blockedUntil: null, limit: 5, windowMs: 1000 } as const
  const now = Date.parse('2026-12-07T12:00:00Z')
  t.equal(listText('/token#client', [{ who: { client: 'webapp' }, key: 'webapp', row }], now),
    '/token#client: 1 key held back, least remaining first\n  client webapp: remaining 0 of 5 per 1 s, next unit in 200 ms (2026-12-07T12:00:00.200Z), full again in 1 s (2026-12-07T12:00:01.000Z)\n')
})
