import t, { type Test } from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { nodeMajor } from '../helpers/node.js'
import { underCI } from '../helpers/redis.js'

/**
 * Runs every benchmark part once in its shortest form (`--smoke`), so that the benchmark cannot rot.
 * It asserts the shape of what each part writes and figures that do not depend on timing (rows,
 * statuses, the simulated fidelity and flood counts); it never asserts a duration or a ratio of
 * durations. Everything goes to a test directory: docs/ and bench/results/ are not touched.
 *
 * The Redis part needs a Redis server at REDIS_URL and the redis-server binary (for the server it
 * stops and continues), the failover part redis-server, the instructions part valgrind. A part
 * that finds them missing says so in its results; its assertions are then skipped with that
 * reason, except under CI, where .ci/run installs and starts everything and a missing piece fails
 * the run.
 */

const repo = fileURLToPath(new URL('../..', import.meta.url))

type Json = Record<string, any>

const read = (dir: string, part: string): Json => JSON.parse(readFileSync(join(dir, `${part}.json`), 'utf8'))
const mtime = (file: string): number | null => existsSync(file) ? statSync(file).mtimeMs : null

/**
 * Whether `what` ran, from `skipped`: the reason the part recorded when it did not. When it did
 * not, `t` records a skip with that reason, or under CI a failure.
 */
function ran (t: Test, what: string, skipped: string | undefined): boolean {
  if (skipped === undefined) return true
  if (underCI()) t.fail(`under CI ${what} must run (.ci/run provides what it needs), but: ${skipped}`)
  else t.skip(`${what} did not run: ${skipped}`)
  return false
}

// One to two minutes beside the other test files on two cores; more on a machine others load.
t.setTimeout(300_000)

/**
 * The environment of the benchmark's processes: this one's without tap's coverage hooks. bench/ is
 * not the package (test/coverage-map.js), and every node process of the run, those under valgrind
 * included, would otherwise load the hooks and record coverage that is thrown away.
 */
function benchEnv (): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'NODE_OPTIONS' && name !== 'NODE_V8_COVERAGE' && !name.startsWith('_TAPJS_')))
}

t.test('npm run bench -- --smoke runs every part and writes its results and report', async t => {
  const out = t.testdir({})
  const kept = ['docs/benchmarks.md', 'docs/fidelity.svg', 'docs/soak.svg', 'bench/results/bucket.json', 'bench/results/http.json']
    .map(file => [file, mtime(join(repo, file))] as const)

  const run = spawnSync(process.execPath, [join(repo, 'bench/run.js'), '--smoke', '--out', out], { cwd: repo, encoding: 'utf8', timeout: 290_000, env: benchEnv() })
  t.equal(run.status, 0, 'bench/run.js exits 0', { stdout: run.stdout, stderr: run.stderr })
  t.equal(run.stderr, '', 'nothing on stderr: no warning, no unhandled error event')

  for (const [file, before] of kept) t.equal(mtime(join(repo, file)), before, `${file} is left alone`)

  t.test('bucket: every workload at every size in both visit orders, rows as each workload leaves them', async t => {
    const bucket = read(out, 'bucket')
    t.equal(bucket.mode, 'smoke')
    t.ok(bucket.machine.node && bucket.machine.cpu && bucket.date && bucket.command, 'machine, date and command')
    const workloads = ['below rate', 'below rate, refunds', 'at the limit', 'live keys']
    const expected = [1, 1000].flatMap(keys => ['round-robin', 'shuffled'].flatMap(order => workloads.map(workload => `${workload}, ${keys}, ${order}`)))
    const strangers = ['round-robin', 'shuffled'].map(order => `strangers, 5000, ${order}`)
    t.same(bucket.results.map((r: Json) => `${r.workload}, ${r.keys}, ${r.order}`), [...expected, ...strangers])
    for (const r of bucket.results) {
      for (const name of ['exchangepace', 'LocalStore', 'RLF memory']) {
        t.ok(Number.isFinite(r.nsPerOp[name].median) && r.nsPerOp[name].median > 0, `${r.workload} ${r.keys} ${r.order}: ${name} ns/op`)
        t.equal(r.samples[name].length, r.rounds)
      }
      t.equal(r.refused, 0, 'no call refused')
      if (r.workload === 'strangers') t.equal(r.rowsAfter, 0, 'refunded strangers leave no row')
      else t.equal(r.rowsAfter, r.keys, `${r.workload}: every key keeps its row (a refunded restart included)`)
      if (r.workload === 'live keys') {
        for (const name of ['clock + lookup', 'clock + lookup + object', 'clock + lookup + slot + object']) {
          t.ok(r.nsPerOp[name].median > 0 && r.ratioToLocalStore[name].median > 0, `${r.keys} ${r.order}: the floor ${name}`)
        }
      }
      if (r.workload === 'below rate') t.ok(r.ratioToAtLimit.median > 0, 'below rate is compared with at the limit')
      else t.notOk('ratioToAtLimit' in r)
    }
    // The smoke's largest size is 1000 keys: nothing to judge, so no target.
    t.equal(bucket.target, null)
  })

  t.test('memory: bytes per key measured, refunded and expired ids leave no row', async t => {
    const memory = read(out, 'memory')
    for (const r of memory.live) {
      for (const name of ['exchangepace', 'LocalStore', 'RLF memory']) {
        t.ok(r[name].perKey > 0, `${name} bytes per key`)
        t.equal(r[name].rows, r.keys, `${name} holds every key`)
      }
    }
    t.equal(memory.flood.exchangepace.rows, 0)
    t.equal(memory.flood.LocalStore.rows, 5000, 'LocalStore keeps its LRU full')
    t.equal(memory.spenders.rowsAfterSpending, memory.spenders.ids)
    t.equal(memory.spenders.rowsAfterHorizon, 0)
  })

  t.test('http: every configuration answered with the status it was built for, in both ways of running', async t => {
    const http = read(out, 'http')
    t.same(http.sequential.main.configs.map((c: Json) => c.kind), ['bare', 'empty', 'floor', 'exchangepace', 'exchangepace-hook', 'ratelimit'])
    t.same(http.paired.main.pairs.map((p: Json) => p.kind), ['empty', 'floor', 'exchangepace', 'exchangepace-hook', 'ratelimit'], 'each paired with bare')
    t.same(http.sequential.paths.configs.map((c: Json) => [c.kind, c.expectedStatus]), [
      ['bare', 401], ['exchangepace', 401], ['exchangepace-hook', 401], ['bare', 200], ['exchangepace', 429], ['exchangepace-hook', 429], ['ratelimit', 429]
    ], 'the refund and refusal paths, with and without the onEvent hook')
    const sequential = [...http.sequential.main.configs, ...http.sequential.paths.configs]
    const paired = [...http.paired.main.pairs, ...http.paired.paths.pairs]
    for (const c of [...sequential, ...paired]) {
      t.ok(c.statuses[c.expectedStatus] > 0, `${c.name}: ${c.expectedStatus} responses`)
      t.ok(c.cpuPerRequestMicros.median > 0, `${c.name}: CPU per request`)
      t.ok(Number.isFinite(c.cpuRatio.median), `${c.name}: a ratio to ${c.baseline}`)
    }
    for (const c of [...sequential, ...paired].filter((c: Json) => c.expectedStatus === 429)) {
      t.ok(c.statuses[429] > (c.statuses[200] ?? 0), `${c.name}: mostly refused`)
    }
    t.ok(Number.isFinite(http.target.sequential.median) && Number.isFinite(http.target.paired.median), 'the target is reported both ways')
    t.ok(Number.isFinite(http.target.rateLimit.sequential.median) && Number.isFinite(http.target.rateLimit.paired.median), '@fastify/rate-limit beside it')
    t.type(http.target.met, 'boolean')
  })

  t.test('fidelity: exchangepace within rate x (1 + w), the fixed window about twice the rate at its edge', async t => {
    const fidelity = read(out, 'fidelity')
    for (const byLibrary of Object.values(fidelity.schedules) as Json[]) {
      for (const w of fidelity.widths) t.ok(byLibrary.exchangepace.maxInWindow[w] <= fidelity.rate * (1 + w), `w = ${w}`)
      t.equal(byLibrary.exchangepace.per100ms.length, fidelity.seconds * 10)
    }
    const edge = fidelity.schedules['window edge']
    t.ok(edge['@fastify/rate-limit'].maxInWindow[0.01] >= 1.8 * fidelity.rate, 'nearly 2x the rate within 10 ms')
    t.ok(fidelity.target.met)
  })

  t.test('flood: the victim keeps its pace under exchangepace, not under an evicting LRU', async t => {
    const flood = read(out, 'flood')
    const { exchangepace, '@fastify/rate-limit': ratelimit } = flood.results
    t.same([exchangepace.span, exchangepace.victimAllowed], [0.1, 11], 'two ticks 0.1 s apart: at 10/s, 10 x (1 + 0.1) at most')
    t.equal(exchangepace.victimAdmitted, exchangepace.victimAllowed, 'the bucket, then one unit a tick: the bound exactly')
    t.equal(exchangepace.admittedOverRate, 0)
    t.equal(exchangepace.rows, 1, 'only the victim, a spender, holds a row')
    t.ok(ratelimit.admittedOverRate > 0)
    t.equal(ratelimit.rows, 5000, 'counted in its store: its LRU, full')
  })

  t.test('flood: made-up ids from many sources leave rows per source under exchangepace as recommended, per id without isClient', async t => {
    const madeUp = read(out, 'flood').madeUp
    t.same([madeUp.settings.sources, madeUp.settings.idsPerSource], [5, 4])
    const by = (name: string, family: string): Json => madeUp.recommended.find((r: Json) => r.name === name && r.family === family)
    for (const family of ['IPv4', 'IPv6 /48']) {
      const recommended = by('exchangepace, recommended', family)
      t.same(recommended.attackerStatuses, { 401: 20 }, `${family}: every made-up id reached the check, within its source's budget`)
      t.ok(recommended.rows <= 2 * 5 + 2, `${family}: rows per source (budget and ceiling) and the real client's: ${recommended.rows}`)
      t.ok(by('exchangepace, recommended without isClient', family).rows >= 20, `${family}: without isClient, a pair row per made-up id`)
      t.ok(by('rate-limiter-flexible, login recipe', family).rows >= 20, `${family}: the recipe keeps a record per made-up id and address`)
      for (const r of madeUp.recommended.filter((r: Json) => r.family === family)) t.equal(r.client.ok, r.client.calls, `${r.name}, ${family}: the real client served`)
    }
    for (const c of madeUp.ceilings) {
      t.equal(c.rows, 201, `${c.sources} sources under maxKeys ${c.maxKeys}: a row each, and the locked-out guesser's`)
      t.equal(c.lockedOutStillRefused, true)
    }
    if (!ran(t, 'the made-up ids on Redis', madeUp.redis.skipped)) return
    const [run] = madeUp.redis.runs
    t.same(run.statuses, { 401: 100 })
    t.ok(run.keys >= 100 && run.keys <= 2 * 100 + 10, `keys per source in Redis, not per id: ${run.keys}`)
  })

  t.test('flood: through a gateway before oidc-provider the victim keeps its rate; made-up ids leave rows per address, none per id', async t => {
    const through = read(out, 'flood').throughGateway
    // oidc-provider 9 needs Node 22, as for the guessing through a gateway below.
    if (nodeMajor < 22) {
      t.skip(`the flood through a gateway needs Node 22 or later (oidc-provider 9), this is ${process.version}: run npm test on Node 22 to check it`)
      return
    }
    if (!ran(t, 'the flood through a gateway', through.skipped ?? undefined)) return
    const [exchangepace, ratelimit] = through.keyFlood
    t.same([exchangepace.name, ratelimit.name], ['exchangepace, the gateway', '@fastify/rate-limit, the gateway'])
    t.same([exchangepace.span, exchangepace.victimAllowed, ratelimit.victimAllowed.toFixed(3)], [0.1, 5.5, '5.008'], 'two ticks 0.1 s apart: 5 x (1 + 0.1 / 1), and 5 x (1 + 0.1 / 60)')
    for (const r of [exchangepace, ratelimit]) {
      t.same(r.strangerStatuses, { 401: 40 }, `${r.name}: every stranger answered by oidc-provider`)
      t.same([r.victimAdmitted, r.admittedOverRate], [5, 0], `${r.name}: the victim's 5, then nothing over its rate`)
    }
    t.same([exchangepace.rowsByPace.failures, exchangepace.rowsByPace['source-failures']], [0, 40], 'with isClient: no pair row for a made-up id, a failure-budget row per address')
    t.ok(exchangepace.rows >= 2 * 40 && exchangepace.rows <= 2 * 40 + 2, `a failure-budget row and a ceiling row per address, and the victim's: ${exchangepace.rows}`)
    t.equal(ratelimit.rows, 41, 'an entry per address, the victim\'s among them')
    t.equal(through.madeUp.length, 4)
    for (const r of through.madeUp) {
      t.same(r.attackerStatuses, { 401: 10 }, `${r.name}, ${r.family}: every made-up id reached oidc-provider`)
      t.equal(r.client.ok, r.client.calls, `${r.name}, ${r.family}: the real client served`)
      if (r.name !== 'exchangepace, the gateway') continue
      t.same([r.rowsByPace.failures, r.rowsByPace['source-failures']], [0, 5], `${r.family}: with isClient, no pair row for a made-up id, a failure-budget row per source`)
      t.ok(r.rows >= 2 * 5 && r.rows <= 2 * 5 + 2, `${r.family}: a failure-budget row and a ceiling row per source, and the real client's: ${r.rows}`)
    }
  })

  t.test('flood: strangers naming the victim under check do not crowd it out at 100/s; they do under a fixed window', async t => {
    const [row] = read(out, 'flood').borrowedName.cases
    t.same([row.clientPerSecond, row.strangersPerSecond], [8, 100])
    const { exchangepace, reference } = row.results
    const rateLimit = row.results['@fastify/rate-limit']
    t.same([exchangepace.victim, exchangepace.victimRefused], [8, 0], 'every one of the victim\'s 8 requests admitted')
    t.same([reference.victim, reference.victimRefused], [8, 0])
    t.ok(exchangepace.strangersChecked > 50, `strangers reached the check: ${exchangepace.strangersChecked}`)
    t.ok(rateLimit.victimRefused > 4, `@fastify/rate-limit refused ${rateLimit.victimRefused} of 8`)
  })

  t.test('guessing: the failure budget bounds one address, no budget keyed by source locks the client out', async t => {
    const guessing = read(out, 'guessing')
    t.same([guessing.seconds, guessing.attackMs, guessing.clientPerSecond], [2, 10, 5], '2 simulated seconds, a guess every 10 ms, the client at 5/s')
    const checked = Object.fromEntries(guessing.configurations.map((c: Json) => [c.name, [c.scenarios['1 address'].checked, c.scenarios['100 addresses'].checked]]))
    const refused = Object.fromEntries(guessing.configurations.map((c: Json) => [c.name, [c.scenarios['1 address'].client.refused, c.scenarios['100 addresses'].client.refused]]))
    // The pair budget admits at most limit x (1 + t / window) = 5 x (1 + 2 / 3600) in 2 s, so 5 from
    // one address; from 100, each address sends 2 guesses, all within its own pair's budget.
    t.same(checked, {
      'exchangepace, recommended three': [5, 200],
      'exchangepace, three + per-source budget': [5, 200],
      '@fastify/rate-limit, README login example': [6, 200],
      '@fastify/rate-limit, the same keyed by client id': [6, 6],
      'rate-limiter-flexible, login recipe': [11, 200]
    }, 'guesses checked, from 1 and from 100 addresses')
    t.same(refused, {
      'exchangepace, recommended three': [0, 0],
      'exchangepace, three + per-source budget': [0, 0],
      '@fastify/rate-limit, README login example': [0, 0],
      '@fastify/rate-limit, the same keyed by client id': [9, 9],
      'rate-limiter-flexible, login recipe': [0, 0]
    }, 'the real client refused: only by the limit keyed by client id, from its second call on')
    for (const c of guessing.configurations) {
      for (const s of Object.values(c.scenarios) as Json[]) {
        t.same([s.attempts, s.client.calls], [200, 10], `${c.name}, ${s.addresses} address(es): every guess and call answered`)
        t.equal(s.checkedInFirst60s, s.checked, 'the whole run is within the first 60 s')
      }
    }
    t.equal(guessing.target.met, guessing.target.fewest && guessing.target.neverRefused)
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), "## 8. Guessing a client's secret")
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '### Through a gateway in front of oidc-provider')
    // oidc-provider 9 needs Node 22; CI runs this file on the machine's Node only (.ci/run), so on
    // an older one the gateway's guessing is not checked here, under CI either.
    if (nodeMajor < 22) {
      t.skip(`the guessing through a gateway needs Node 22 or later (oidc-provider 9), this is ${process.version}: run npm test on Node 22 to check it`)
      return
    }
    if (!ran(t, 'the guessing through a gateway', guessing.throughGateway.skipped ?? undefined)) return
    const gateway = Object.fromEntries(guessing.throughGateway.configurations.map((c: Json) => [c.name, [c.scenarios['1 address'].checked, c.scenarios['100 addresses'].checked, c.scenarios['1 address'].client.refused]]))
    t.same(gateway, {
      'exchangepace, the gateway': [5, 200, 0],
      '@fastify/rate-limit, the gateway': [5, 200, 5]
    }, 'through a gateway before oidc-provider: guesses it checked, and the real client refused (by a per-address limit on every request, from its sixth call)')
  })

  t.test('redis: both Redis stores answered, the refund path too', async t => {
    const redis = read(out, 'redis')
    if (!ran(t, 'the Redis part', redis.skipped)) return
    t.same(redis.sequential.main.configs.map((c: Json) => c.kind), ['ratelimit-redis', 'exchangepace-redis', 'exchangepace-redis'])
    for (const c of [...redis.sequential.main.configs, ...redis.paired.main.pairs]) {
      t.ok(c.statuses[c.expectedStatus] > 0, `${c.name}: ${c.expectedStatus} responses`)
      t.equal(c.errors, 0, `${c.name}: no errors`)
      t.ok(Number.isFinite(c.cpuRatio.median), `${c.name}: a ratio to ${c.baseline}`)
    }
    t.type(redis.target.met, 'boolean')
    for (const kind of ['ratelimit-redis', 'exchangepace-redis']) t.ok(redis.redisCpuPerRequestMicros[kind].median > 0, `${kind}: Redis CPU per request`)
    if (!ran(t, 'the Redis part\'s flapping run', redis.flapping.skipped)) return
    const [flapping] = redis.flapping.schedules
    t.ok(flapping.stalls >= 1, 'Redis was stopped at least once')
    t.ok(flapping.admitted > 0, 'requests were admitted')
    t.same(Object.keys(flapping.statuses).filter(code => code !== '200' && code !== '429'), [], 'every answer a 200 or a 429: no request failed because Redis stalled')
  })

  t.test('failover: a restart of Redis under two replicas\' traffic, nothing failed, no key left without expiry', async t => {
    const failover = read(out, 'failover')
    if (!ran(t, 'the failover part', failover.skipped)) return
    t.same(failover.runs.map((r: Json) => r.how), ['restart'], 'the shortest form: the restart only (test/redis/switches/failover.test.ts runs the cluster\'s)')
    for (const r of failover.runs) {
      t.equal(r.failed, 0, `${r.how}: no request failed`)
      t.ok(r.statuses.client['200'] > 0 && r.statuses.guesser['401'] > 0, `${r.how}: clients admitted, guesses checked`)
      t.ok(r.excessPerReplica <= 0, `${r.how}: each replica kept every client's bucket`)
      t.equal(r.keysLeft.withoutExpiry, 0, `${r.how}: no key without an expiry`)
      t.ok(r.perSecond.failing.length > 0, `${r.how}: per-second admissions`)
    }
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 9. Failover')
  })

  t.test('instructions: a server counted under callgrind, and Redis\'s script calls', async t => {
    const instructions = read(out, 'instructions')
    if (!ran(t, 'the instructions part', instructions.skipped)) return
    t.same(instructions.results.map((r: Json) => r.kind), ['bare'], 'the shortest form counts one server')
    for (const r of instructions.results) {
      t.equal(r.statuses[200], instructions.results[0].requests, `${r.name}: every counted request answered 200`)
      t.ok(r.instructionsPerRequest > 10_000, `${r.name}: instructions per request`)
      t.equal(r.majorGcs, 0, `${r.name}: no major GC in the window kept`)
      t.same(r.servers.map((c: Json) => c.instructionsPerRequest), [r.instructionsPerRequest], `${r.name}: one server's count, kept`)
      t.ok(r.attempts >= 1 && r.attempts <= 3, `${r.name}: servers counted`)
      t.ok(r.attempts === 1
        ? r.alignedAfter === null && r.majorGcBeforeWindow === null
        : r.alignedAfter > 0 && typeof r.majorGcBeforeWindow === 'boolean', `${r.name}: only a retry waits for a major GC`)
    }
    t.equal(instructions.results[0].ratioToBare, 1)
    t.same(instructions.paths, [], 'the shortest form counts no refund or refusal path')
    t.equal(instructions.target, null, 'nor the floor and @fastify/rate-limit that the target needs')
    if (ran(t, 'Redis\'s side of the instructions part', instructions.redisServer === null ? 'redis-server is not installed' : undefined)) {
      t.same(instructions.redisScripts.map((r: Json) => r.operations), [100, 100, 100, 100], 'the empty script, the fixed window, reserve, reserve + refund')
      for (const r of instructions.redisScripts) t.ok(r.instructionsPerOperation > 1000, `${r.name}: instructions per operation`)
    }
  })

  t.test('soak: two replicas per store sampled every second, nothing lost, the plot written', async t => {
    const soak = read(out, 'soak')
    t.same([soak.settings.seconds, soak.settings.sampleSeconds], [4, 1], 'the shortest form: 4 s, a sample each second')
    const stores = soak.redisSkipped === undefined ? ['memory', 'redis'] : ['memory']
    if (ran(t, 'the soak on Redis', soak.redisSkipped)) t.ok(soak.stalls.length >= 1, 'its redis-server was stopped at least once')
    t.same(Object.keys(soak.stores), stores)
    for (const store of stores) {
      const { samples, end, checks } = soak.stores[store]
      t.same(samples.map((s: Json) => s.atS), [1, 2, 3, 4], `${store}: a sample each second`)
      for (const sample of samples) {
        t.equal(sample.replicas.length, 2, `${store}: both replicas sampled`)
        for (const r of sample.replicas) {
          t.ok(r.heapMB > 0 && r.rssMB > r.heapMB && r.eld.p99Ms >= 0, `${store} at ${sample.atS} s: heap, RSS and event-loop delay`)
          t.ok(r.rows['/token#client+source:rejected'] > 0, `${store} at ${sample.atS} s: the failure budget holds rows`)
          t.ok(r.counts['/token#client'].granted > 0, `${store} at ${sample.atS} s: counts`)
        }
        if (store === 'redis') t.ok(sample.redis.keys.budget > 0, `redis at ${sample.atS} s: keys counted`)
      }
      for (const r of checks.replicas) {
        t.ok(r.statuses[200] > 0 && r.statuses[401] > 0 && r.statuses[429] > 0, `${store}: accepted, rejected and refused exchanges`)
        t.equal(r.failed, 0, `${store}: no request failed`)
        t.equal(r.clientPace.kept, r.clientPace.accepted, `${store}: the client pace kept one unit per accepted exchange`)
        t.equal(r.budgetPace.kept, r.budgetPace.rejected, `${store}: the failure budget kept one unit per rejected exchange`)
        t.equal(r.oneSecondRowsAtEnd, 0, `${store}: no one-second row once the traffic stopped`)
      }
      t.same(end.replicas[0].rows['/token#client'], 0)
      t.equal(checks.lost, false, `${store}: nothing lost`)
    }
    if (soak.stores.redis) {
      const { redis } = soak.stores.redis.checks
      t.same([redis.noExpiry, redis.beyondWindow, redis.oneSecondKeysAtEnd], [0, 0, 0], 'every key expires within its window')
      for (const r of soak.stores.redis.checks.replicas) t.ok(r.refunds.sent > 0 && r.refundsUnanswered === 0, 'every refund call answered')
    }
    const svg = readFileSync(join(out, 'soak.svg'), 'utf8')
    t.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/)
    t.match(svg, 'in-process, replica 2')
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 10. Soak')
  })

  t.test('capacity: each line on a Redis of its own; the three paces four calls a request, batched', async t => {
    const capacity = read(out, 'capacity')
    if (!ran(t, 'the capacity part', capacity.skipped)) return
    t.equal(capacity.results.length, 14, 'eight script lines and six routes')
    for (const r of capacity.results) {
      t.ok(r.scriptMicros > 0 && r.redisCpuMicros > 0 && r.nodeCpuMicros > 0, `${r.name}: Redis's and Node's CPU per request`)
      t.ok(r.bytesIn > 0 && r.bytesOut > 0 && r.redisReads > 0, `${r.name}: bytes and reads per request`)
      t.ok(r.capacity.perCoreWithIo > 0, `${r.name}: requests per Redis core`)
    }
    const calls = Object.fromEntries(capacity.results.map((r: Json) => [r.name, Math.round(r.scriptCalls)]))
    t.same([
      calls['exchangepace, one pace (200)'], calls['exchangepace, one pace, wrong secret (401, refunded)'],
      calls['exchangepace, the recommended three paces (200)'], calls['exchangepace, the recommended three paces, wrong secret (401)'],
      calls['three paces, a call each, then the budget\'s refund'], calls['three paces in one call (one slot), then the budget\'s refund']
    ], [1, 2, 4, 4, 4, 2], 'script calls per request: a refund on a 401 with one pace, on every request with three')
    const writes = (name: string) => capacity.results.find((r: Json) => r.name === name).clientWrites
    t.equal(Math.round(writes('exchangepace, three paces, no auto-pipelining (200)')), 4, 'without auto-pipelining, a write per script call')
    t.ok(writes('exchangepace, the recommended three paces (200)') < 4, 'with it, fewer')
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 11. Capacity')
  })

  t.test('latency: the five servers timed at each round trip through the delaying proxy, every request granted', async t => {
    const latency = read(out, 'latency')
    if (!ran(t, 'the latency part', latency.skipped)) return
    t.same(latency.roundTrips.map((r: Json) => r.roundTripMs), [1], 'the smoke\'s one round trip')
    for (const roundTrip of latency.roundTrips) {
      t.same(roundTrip.configs.map((c: Json) => c.kind), ['bare', 'ratelimit-redis', 'exchangepace-redis', 'exchangepace-redis-three', 'ratelimit-redis-three'])
      for (const c of roundTrip.configs) {
        t.ok(c.medianMs.median > 0 && c.p99Ms.median >= c.medianMs.median, `${c.name}: a median and a p99`)
        if (c.kind === 'bare') t.equal(c.toRateLimit, null)
        else t.ok(Number.isFinite(c.toRateLimit.median) && Number.isFinite(c.toRateLimitP99.median), `${c.name}: against @fastify/rate-limit's`)
      }
      t.ok(Number.isFinite(roundTrip.toFloor.median), 'the three paces against the floor of three keys')
      t.type(roundTrip.met, 'boolean')
    }
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 14. Latency on a shared store')
  })

  t.test('timeouts: every reserve call timed, alone and at load, and the false outages counted at 50 to 1000 ms', async t => {
    const timeouts = read(out, 'timeouts')
    if (!ran(t, 'the timeouts part', timeouts.skipped)) return
    t.equal(timeouts.phases.length, 2, 'alone, and beside the processes spinning')
    for (const phase of timeouts.phases) {
      t.ok(phase.calls > 0, `${phase.name}: reserve calls timed`)
      t.ok(phase.answerMs.p50 <= phase.answerMs.p99 && phase.answerMs.p99 <= phase.answerMs.p999 && phase.answerMs.p999 <= phase.answerMs.max, `${phase.name}: p50, p99, p99.9 and max in order`)
      t.same(phase.byTimeout.map((b: Json) => b.timeoutMs), [50, 100, 250, 500, 1000])
      const slower = phase.byTimeout.map((b: Json) => b.slower)
      t.ok(slower.every((n: number, i: number) => i === 0 || n <= slower[i - 1]), `${phase.name}: no more calls slower than a longer timeout`)
      t.ok(phase.byTimeout.every((b: Json) => b.outages <= b.slower), 'an outage begins on a slow answer')
      t.equal(phase.outagesLogged, 0, 'the replicas\' own timeout (10 s) cut no answer off')
    }
    t.equal(timeouts.target.met, true, 'no request failed')
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 15. How long Redis takes to answer')
  })

  t.test('faults: a seeded fault schedule between two replicas and Redis, its invariants checked', async t => {
    const faults = read(out, 'faults')
    if (!ran(t, 'the faults part', faults.skipped)) return
    t.equal(faults.runs.length, 1, 'the smoke\'s one seed')
    t.same(faults.runs[0].kinds.length, 2, 'of two faults')
    t.same(faults.broken, [], 'no invariant broken')
    t.ok(faults.runs[0].statuses[200] > 0, 'clients admitted')
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 16. Random faults between the replicas and Redis')
  })

  t.test('gateway: the upstream, the proxy alone and the gateway timed, every request forwarded', async t => {
    const gateway = read(out, 'gateway')
    t.same(gateway.configs.map((c: Json) => c.kind), ['upstream', 'proxy', 'gateway'])
    for (const c of gateway.configs) t.ok(c.medianMs.median > 0 && c.p99Ms.median >= c.medianMs.median, `${c.name}: a median and a p99`)
    t.ok(Number.isFinite(gateway.added.medianMs.median) && Number.isFinite(gateway.added.p99Ms.median), 'what the pace adds over the proxy alone')
    t.match(readFileSync(join(out, 'benchmarks.md'), 'utf8'), '## 17. A gateway in front of any server')
  })

  t.test('the report and the chart are written next to the results', async t => {
    const md = readFileSync(join(out, 'benchmarks.md'), 'utf8')
    for (const heading of ['## Summary', '## Machine and commands', '## 1. Bucket cost', '## 2. Memory', '## 3. HTTP cost', '## 4. Fidelity', '## 5. Key flood', '### The borrowed name', '## 6. Redis', '## 7. Instructions per request']) {
      t.match(md, heading)
    }
    t.match(md, 'npm run bench -- --smoke')
    const svg = readFileSync(join(out, 'fidelity.svg'), 'utf8')
    t.match(svg, /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/)
    t.match(svg, '@fastify/rate-limit')
  })
})
