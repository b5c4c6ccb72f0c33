import t from 'tap'
import { buildServer } from '../../examples/oauth2-server.js'
import { RedisStore } from '../../lib/index.js'
import { NO_ROW } from '../../lib/operator/cli-report.js'
import { runCli } from '../helpers/cli.js'
import { redisOrSkip, uniquePrefix } from '../helpers/redis.js'
import { hostname, userInfo } from 'node:os'
import { secretKey } from '../../lib/index.js'

/**
 * `exchangepace inspect|reset|block` against a real Redis, on the keys of examples/oauth2-server.js
 * run with a RedisStore: what the CLI does there, the app (every replica) follows. Skipped without
 * Redis outside CI, as test/helpers/redis.ts says.
 */

const redis = await redisOrSkip()
if (redis !== null) {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const prefix = uniquePrefix('cli')
  t.teardown(async () => {
    const keys = await redis.keys(`${prefix}*`)
    if (keys.length > 0) await redis.del(...keys)
  })
  // A timeout no answer reaches on a busy machine: a request the memory decided would leave no row to read.
  const app = buildServer({ store: new RedisStore({ client: redis, prefix, timeoutMs: 1000 }) })
  t.teardown(() => app.close())
  await app.ready()

  const REPORTING = { id: 'reporting-service', secret: 'rep-s3cret_2026.v1~' }
  const BUDGET = '/token#client+source:rejected'
  const token = (secret: string, remoteAddress = '127.0.0.1') => app.inject({
    method: 'POST',
    url: '/token',
    remoteAddress,
    headers: { authorization: `Basic ${Buffer.from(`${REPORTING.id}:${secret}`).toString('base64')}`, 'content-type': 'application/x-www-form-urlencoded' },
    payload: 'grant_type=client_credentials'
  })
  const cli = (...argv: string[]) => runCli([...argv, '--redis', url, ...(argv.includes('--prefix') ? [] : ['--prefix', prefix])])
  /**
   * Every key under the test's prefix that lives longer than a minute (a one-second pace's rows
   * expire on their own meanwhile), with its value: what "nothing changed" compares.
   */
  const snapshot = async () => {
    const keys = (await redis.keys(`${prefix}*`)).sort()
    const value = async (key: string): Promise<unknown> => {
      const type = await redis.type(key)
      if (type === 'zset') return await redis.zrange(key, 0, -1, 'WITHSCORES')
      if (type === 'stream') return await redis.xlen(key)
      return type === 'hash' ? await redis.hgetall(key) : (await redis.getBuffer(key))?.toString('hex')
    }
    const rows = await Promise.all(keys.map(async key => ({ key, value: await value(key), ttl: await redis.pttl(key) })))
    return rows.filter(row => row.ttl > 60_000 || row.ttl === -1).map(({ key, value }) => [key, value])
  }
  const pair = ['--pace', BUDGET, '--client', REPORTING.id, '--source', '127.0.0.1']

  t.test('a client locked out after a bad secret rotation: inspect shows it, reset ends it', async t => {
    for (let i = 0; i < 5; i++) t.equal((await token('rep-s3cret_2025.v0~')).statusCode, 401)
    t.equal((await token(REPORTING.secret)).statusCode, 429, 'locked out')

    const text = await cli('inspect', ...pair)
    t.equal(text.code, 0)
    t.equal(text.stderr, '')
    t.match(text.stdout, `${BUDGET}, client ${REPORTING.id} from 127.0.0.1 (Redis key ${JSON.stringify(`${prefix}/token#client+source%3Arejected:${REPORTING.id}\u001f127.0.0.1`)})\n`)
    t.match(text.stdout, /\n {2}remaining {6}0 \(of 5 per 1 h: the rate this row was written at\)\n/, 'read with the row\'s own rate')
    t.match(text.stdout, /\n {2}next unit {6}in (12 min|11 min 5\d s) \(\d{4}-\d\d-\d\dT[\d:.]+Z\)\n/, 'one unit back in 12 minutes')
    t.match(text.stdout, /\n {2}full again {5}in (1 h|59 min 5\d s) \(/)
    t.match(text.stdout, /\n {2}blocked until {2}not blocked\n$/)

    const json = await cli('inspect', ...pair, '--json')
    const inspected = JSON.parse(json.stdout)
    t.match(inspected, { action: 'inspect', pace: BUDGET, keyKind: 'client+source', key: `${REPORTING.id}\u001f127.0.0.1`, bucket: { state: 'spent', remaining: 0, blockedUntil: null, limit: 5, windowMs: 3_600_000 } })
    t.ok(inspected.bucket.retryAfterMs > 700_000 && inspected.bucket.retryAfterMs <= 720_000, 'the wait in whole ms')
    t.equal(inspected.bucket.fullInMs, inspected.bucket.retryAfterMs + 2_880_000, 'four more units after the first')

    const reset = await cli('reset', ...pair)
    t.same(reset, { stdout: `reset ${BUDGET}, client ${REPORTING.id} from 127.0.0.1: the bucket is full in Redis, and every replica follows at once (one that missed the news, at its next request for the key while Redis answers); it was spent (0 left).\n`, stderr: '', code: 0 })
    t.equal((await token(REPORTING.secret)).statusCode, 200, 'the next token is granted')
    const again = await cli('reset', ...pair, '--json')
    t.match(JSON.parse(again.stdout), { action: 'reset', pace: BUDGET, before: { state: 'full', remaining: null, note: NO_ROW } })
    t.match((await cli('reset', ...pair)).stdout, /it had no row \(already full: nothing to lift; check --pace and the parts if one was expected\)\.\n$/)
  })

  t.test('a full bucket has no row: the CLI says what it cannot know', async t => {
    const out = await cli('inspect', '--pace', '/token#client', '--client', 'webapp')
    t.equal(out.code, 0)
    t.equal(out.stderr, '', 'the app recorded its catalog: nothing to warn of')
    t.match(out.stdout, `\n  ${NO_ROW}.\n  The app's catalog declares this pace: if a row was expected, check the parts.\n`)
    const json = JSON.parse((await cli('inspect', '--pace', '/token#client', '--client', 'webapp', '--json')).stdout)
    t.same(json, {
      action: 'inspect',
      pace: '/token#client',
      keyKind: 'client',
      key: 'webapp',
      redisKey: `${prefix}/token#client:webapp`,
      bucket: { state: 'full', remaining: null, retryAfterMs: 0, fullInMs: 0, blockedUntil: null, limit: null, windowMs: null, note: NO_ROW }
    })
  })

  t.test('a spent bucket with units left, read at its own rate', async t => {
    t.equal((await token(REPORTING.secret)).statusCode, 200)
    const out = await cli('inspect', '--pace', '/token#client', '--client', REPORTING.id)
    t.match(out.stdout, /\n {2}remaining {6}[34] \(of 5 per 1 s: the rate this row was written at\)\n {2}next unit {6}now\n/)
  })

  t.test('block an address now: every request from it is refused until the end; reset lifts it', async t => {
    const out = await cli('block', '--pace', '/token#source', '--source', '2001:db8::1', '--seconds', '600')
    t.equal(out.code, 0)
    t.match(out.stdout, /^blocked \/token#source, source 2001:db8::1 for 10 min, until \d{4}-[\d-]+T[\d:.]+Z: every replica refuses it until then, also while Redis does not answer \(one started while Redis does not answer cannot know of it\); then its bucket is full\.\n/)
    t.equal(await redis.exists(`${prefix}/token#source:2001:db8:0:0::/64`), 1, 'the key of the address\'s /64, as the app makes it')
    const refused = await token(REPORTING.secret, '2001:db8::2:3')
    t.equal(refused.statusCode, 429, 'another address of the /64 is refused')
    t.equal(refused.headers['retry-after'], '600')
    const inspected = await cli('inspect', '--pace', '/token#source', '--source', '2001:db8::/64')
    t.match(inspected.stdout, /\n {2}blocked until {2}[\d-]+T[\d:.]+Z \(in (10 min|9 min 5\d s)\); every request is refused until then, and the bucket is full after it\.\n {2}reset lifts it/)
    const json = JSON.parse((await cli('block', '--pace', '/token#source', '--source', '2001:db8::1', '--seconds', '300.5', '--json')).stdout)
    t.match(json, { action: 'block', pace: '/token#source', keyKind: 'source', key: '2001:db8:0:0::/64', seconds: 300.5, blockedUntil: /Z$/ })
    t.match(JSON.parse((await cli('inspect', '--pace', '/token#source', '--source', '2001:db8::9', '--json')).stdout), { bucket: { state: 'blocked', remaining: 0, limit: null } })
    t.match((await cli('reset', '--pace', '/token#source', '--source', '2001:db8::1')).stdout, /it was blocked\.\n$/)
    t.equal((await token(REPORTING.secret, '2001:db8::2:3')).statusCode, 200, 'lifted')
  })

  t.test('bad input changes nothing in Redis', async t => {
    await token('a-wrong-secret')
    await cli('block', '--pace', '/token#client', '--client', 'webapp', '--seconds', '600')
    const before = await snapshot()
    t.same(before.map(([key]) => key), [`${prefix}/token#client+source%3Arejected:reporting-service\u001f127.0.0.1`, `${prefix}/token#client:webapp`, `${prefix}/token#source%3Arejected:127.0.0.1`, `${prefix}audit`, `${prefix}blocks`, `${prefix}catalog`], 'the failure budgets\' rows, a block, the audit trail, the index of blocks to keep and the catalog')
    const bad: string[][] = [
      ['unblock', ...pair],
      ['block', ...pair, '--seconds=-5'],
      ['block', ...pair],
      ['reset', '--client', REPORTING.id, '--source', '127.0.0.1'],
      ['reset', '--pace', BUDGET, '--source', '127.0.0'],
      ['reset', '--pace', BUDGET, '--client', REPORTING.id, '--key', 'k'],
      ['reset', ...pair, '--seconds', '60'],
      ['block', '--pace', '/token#clinet', '--client', 'x', '--seconds', '30'],
      ['block', '--pace', '/token#source', '--client', 'x', '--seconds', '30'],
      ['reset', '--pace', '/token#client', '--client', REPORTING.id, '--source', '127.0.0.1'],
      ['list', '--pace', '/token#client', '--client', REPORTING.id],
      ['block', '--pace', BUDGET, '--client', REPORTING.id, '--seconds', '30']
    ]
    for (const argv of bad) {
      const out = await cli(...argv)
      t.equal(out.code, 2, argv.join(' '))
      t.match(out.stderr, /^exchangepace: /)
    }
    t.same(await snapshot(), before, 'every key as it was')
  })

  t.test('paces prints the catalog the app recorded when it was ready', async t => {
    const text = await cli('paces')
    t.equal(text.code, 0)
    t.match(text.stdout, `The paces the apps on ${prefix} recorded:\n`)
    t.match(text.stdout, '  /token#client+source:rejected  keyed by client+source, 5 per 1 h, spend rejected (POST /token)\n')
    t.match(text.stdout, '  /token#client  keyed by client, 5/s, spend accepted (POST /token)\n')
    const json = JSON.parse((await cli('paces', '--json')).stdout)
    t.match(json.paces.find((pace: { name: string }) => pace.name === '/admin#source:rejected'), { keyKind: 'source', limit: 5, window: 3600, spend: ['rejected'], shadow: false, warnAt: null })
    t.same(json.paces.map((pace: { name: string }) => pace.name), [...json.paces.map((pace: { name: string }) => pace.name)].sort(), 'by name')
    const none = await cli('paces', '--prefix', `${prefix}nothing:`)
    t.same(none, { code: 0, stderr: '', stdout: `no app has recorded a catalog of its paces under the prefix "${prefix}nothing:" (an app with a RedisStore records it when it is ready).\n` })
    const unchecked = await cli('inspect', '--pace', 'anything', '--client', 'x', '--prefix', `${prefix}nothing:`)
    t.equal(unchecked.code, 0)
    t.equal(unchecked.stderr, `exchangepace: no app has recorded a catalog of its paces under the prefix "${prefix}nothing:" (an app with a RedisStore records it when it is ready): the pace name and the kind of key are not checked.\n`)
    t.match(unchecked.stdout, 'No app recorded a catalog of its paces under this prefix, so the pace name is not checked')
  })

  t.test('a pace or parts the catalog does not know: exit 2, the paces named, nothing written', async t => {
    const before = await snapshot()
    const misspelt = await cli('block', '--pace', '/token#clinet', '--client', 'x', '--seconds', '30')
    t.equal(misspelt.code, 2)
    t.equal(misspelt.stdout, '')
    t.match(misspelt.stderr, /^exchangepace: the app's catalog has no pace named "\/token#clinet"; its paces are .*"\/token#client" \(client\)/)
    t.match(misspelt.stderr, /\nNothing was written\.\n$/)
    const kind = await cli('block', '--pace', '/token#source', '--client', 'x', '--seconds', '30')
    t.match(kind.stderr, /pace "\/token#source" is keyed by source, not by what was given \(client\); the paces are /)
    t.same(await snapshot(), before, 'nothing written')
  })

  t.test('list prints who is held back; reset --client on a pair\'s pace gives back every address', async t => {
    for (const source of ['192.0.2.10', '192.0.2.11']) for (let i = 0; i < 5; i++) await token('rep-s3cret_2025.v0~', source)
    await token('rep-s3cret_2025.v0~', '192.0.2.12')
    const text = await cli('list', '--pace', BUDGET, '--client', REPORTING.id)
    t.equal(text.code, 0)
    t.match(text.stdout, new RegExp(`^${BUDGET.replace('+', '\\+')}: [34] keys held back, least remaining first\n  client reporting-service from 192\\.0\\.2\\.1[01]: remaining 0 of 5 per 1 h, next unit in 1[12] min`))
    t.match(text.stdout, /\n {2}client reporting-service from 192\.0\.2\.12: remaining 4 of 5 per 1 h, next unit now, full again in 1[12] min/)
    const json = JSON.parse((await cli('list', '--pace', BUDGET, '--limit', '1', '--json')).stdout)
    t.equal(json.keys.length, 1)
    t.match(json.keys[0], { who: { client: REPORTING.id, source: /^192\.0\.2\.1[01]$/ }, bucket: { state: 'spent', remaining: 0 } })
    const inspected = await cli('inspect', '--pace', BUDGET, '--client', REPORTING.id)
    t.equal(inspected.code, 0, inspected.stderr)
    t.match(inspected.stdout, /^\/token#client\+source:rejected, client reporting-service from every address: [34] pairs held back; the most held back:\n\/token#client\+source:rejected, client reporting-service from 192\.0\.2\.1[01] \(Redis key "[^"]+"\)\n {2}remaining {6}0 \(of 5 per 1 h/)
    t.match(inspected.stdout, /\n {2}exchangepace list --pace '\/token#client\+source:rejected' --client reporting-service lists them all\.\n$/)
    const everyAddress = JSON.parse((await cli('inspect', '--pace', BUDGET, '--client', REPORTING.id, '--json')).stdout)
    t.match(everyAddress, { action: 'inspect', pace: BUDGET, keyKind: 'client+source', client: REPORTING.id, pairsHeldBack: Number, source: /^192\.0\.2\.1[01]$/, bucket: { state: 'spent', remaining: 0 } })
    t.equal(everyAddress.key, `${REPORTING.id}\u001f${String(everyAddress.source)}`, 'the key of that pair')
    t.equal(everyAddress.pairsHeldBack, inspected.stdout.includes(': 4 pairs') ? 4 : 3, 'as many as the text says')
    const reset = await cli('reset', '--pace', BUDGET, '--client', REPORTING.id)
    t.equal(reset.code, 0)
    t.match(reset.stdout, /^reset \/token#client\+source:rejected, client reporting-service from every address: [34] pairs \(.*192\.0\.2\.10.*\); every replica follows at once\.\n$/)
    t.equal((await token(REPORTING.secret, '192.0.2.11')).statusCode, 200, 'lifted')
    t.match((await cli('list', '--pace', BUDGET, '--client', REPORTING.id)).stdout, /^\/token#client\+source:rejected: no key is held back/)
    t.same(JSON.parse((await cli('reset', '--pace', BUDGET, '--client', REPORTING.id, '--json')).stdout), { action: 'reset', pace: BUDGET, keyKind: 'client+source', client: REPORTING.id, sources: [] })
    t.match((await cli('reset', '--pace', BUDGET, '--client', REPORTING.id)).stdout, /no pair of it held a row \(nothing to lift\)/)
    t.equal((await cli('inspect', '--pace', BUDGET, '--client', REPORTING.id)).stdout, `${BUDGET}, client ${REPORTING.id} from every address: no pair of it is held back (none holds a row in Redis: each address's budget is full).\n`)
    t.same(JSON.parse((await cli('inspect', '--pace', BUDGET, '--client', REPORTING.id, '--json')).stdout), { action: 'inspect', pace: BUDGET, keyKind: 'client+source', client: REPORTING.id, pairsHeldBack: 0, source: null, key: null, redisKey: null, bucket: null })
    await cli('block', '--pace', '/token#source', '--source', '192.0.2.99', '--seconds', '60')
    t.match((await cli('list', '--pace', '/token#source')).stdout, /^\/token#source: \d+ keys? held back, least remaining first\n {2}source 192\.0\.2\.99: blocked until [\d-]+T/)
    const uncatalogued = await cli('list', '--pace', BUDGET, '--prefix', `${prefix}nothing:`)
    t.match(uncatalogued.stdout, /no key is held back/)
    await token('rep-s3cret_2025.v0~', '192.0.2.13')
    t.match((await cli('inspect', '--pace', BUDGET, '--client', REPORTING.id)).stdout, /^[^\n]+ from every address: 1 pair held back; the most held back:\n[^\n]+ from 192\.0\.2\.13 \(Redis key [^\n]+\n {2}remaining {6}4 \(of 5 per 1 h[^]*\n {2}blocked until {2}not blocked\n$/)
    t.match((await cli('reset', '--pace', BUDGET, '--client', REPORTING.id)).stdout, /from every address: 1 pair \(192\.0\.2\.13\)/)
    // Without a catalog, a key's parts are read from the key: a pair's by its separator, any other as { key }.
    await token('rep-s3cret_2025.v0~', '192.0.2.14')
    await cli('block', '--pace', '/token#client', '--client', 'webapp', '--seconds', '60')
    await redis.del(`${prefix}catalog`)
    t.match(JSON.parse((await cli('list', '--pace', BUDGET, '--json')).stdout).keys, [{ who: { client: REPORTING.id, source: '192.0.2.14' } }])
    t.match(JSON.parse((await cli('list', '--pace', '/token#client', '--json')).stdout).keys[0], { who: { key: 'webapp' }, bucket: { state: 'blocked' } })
    t.match((await cli('list', '--pace', '/token#client')).stdout, /\n {2}key webapp: blocked until /)
  })

  t.test('every reset and block, by the app or the CLI, is in the audit trail; audit prints the latest', async t => {
    await app.pace.block('/token#client', { client: 'webapp' }, 30, { by: 'alice@ops' })
    await cli('reset', '--pace', '/token#client', '--client', 'webapp', '--by', 'bob')
    await cli('block', '--pace', '/token#source', '--source', '192.0.2.77', '--seconds', '60')
    const json = JSON.parse((await cli('audit', '--limit', '3', '--json')).stdout)
    const hash = `sha256:${secretKey('webapp')}`
    t.match(json.entries, [
      { action: 'block', pace: '/token#source', keyKind: 'source', key: '192.0.2.77', by: userInfo().username, host: hostname(), blockedMs: 60000 },
      { action: 'reset', pace: '/token#client', keyKind: 'client', key: hash, by: 'bob', host: hostname() },
      { action: 'block', pace: '/token#client', keyKind: 'client', key: hash, by: 'alice@ops', host: hostname(), blockedMs: 30000 }
    ])
    t.ok(json.entries.every((entry: { time: string }) => !Number.isNaN(Date.parse(entry.time))), 'each with its time')
    t.notOk(JSON.stringify(json).includes('"webapp'), 'a client id only as its hash')
    const text = await cli('audit', '--limit', '1')
    t.match(text.stdout, new RegExp(`^The latest 1 action of the audit trail under ${prefix}, newest first:\\n {2}\\S+Z {2}block /token#source \\(source\\) 192\\.0\\.2\\.77 for 1 min, by \\S+ on \\S+\\n$`))
    t.equal((await cli('audit', '--prefix', `${prefix}nothing:`)).stdout, `The audit trail under ${prefix}nothing: is empty: no reset or block has been recorded.\n`)
    t.match((await cli('audit')).stdout, /^The latest \d+ actions of the audit trail/)
  })

  t.test('the audit trail is a capped stream: XADD with MAXLEN keeps about the latest 10000', async t => {
    const store = new RedisStore({ client: redis, prefix: `${prefix}capped:` })
    const entry = { time: new Date().toISOString(), action: 'reset' as const, pace: 'p', keyKind: 'source', key: '192.0.2.1', by: 'test', host: 'h' }
    for (let i = 0; i < 10_300; i += 300) await Promise.all(Array.from({ length: 300 }, () => store.audit(entry)))
    const length = await redis.xlen(`${prefix}capped:audit`)
    t.ok(length >= 10_000 && length < 10_300, `trimmed to about 10000 (${length})`)
    t.equal((await store.auditTrail(5)).length, 5)
  })
}
