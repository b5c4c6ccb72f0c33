// Part 3, HTTP cost: server CPU per request and requests/s, as ratios to a bare server.
//
// Four servers (bench/apps.js: bare, empty hooks, exchangepace, @fastify/rate-limit), each in its
// own process pinned to core 0 (`taskset`); this process, which drives the load with autocannon,
// pins itself to core 1. Each server reads process.cpuUsage() when told (over IPC, outside the
// measured route) that a round starts and when it ends, and counts the requests it received; so a
// round gives CPU microseconds per request, requests/s, and the share of the round the server
// spent on the CPU. Every repetition starts fresh server processes and warms each one up.
//
// Two ways of running the rounds, reported side by side:
// - sequential: each configuration in turn gets the whole core for `roundSeconds` under
//   autocannon's load (10 connections, one request at a time on each), the order alternating
//   from round to round; the ratio of a round is against the baseline's figure of the same round.
// - paired: a configuration and its baseline are loaded at the same time (both on core 0, one
//   autocannon each, 8 requests pipelined per connection so that both stay busy), so that
//   whatever else runs on the machine in that second weighs on both alike; the ratio of a round is
//   between the two. Pipelining lowers the cost of a request (fewer reads and writes per request),
//   so the share of a plugin, and the ratio, is if anything larger than with one request at a time.
// Per repetition: the median of the per-round ratios. Reported: the median of those medians and
// their range across repetitions, plus the quartiles of all per-round ratios.
//
// Two groups of configurations:
// - main: POST /token with the right secret (200) on bare, empty, exchangepace, ratelimit;
// - paths: the refund path (wrong secret: 401, exchangepace refunds the unit) against bare's 401,
//   and the 429 path (POST /token-tight at 1/s: all but about one request a second refused) of
//   exchangepace and ratelimit against bare's 200 on the same route.
//
// Run alone: node bench/http.js [--quick|--smoke] [--out DIR]

import { execFileSync, spawn } from 'node:child_process'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { FORM, KINDS, tokenBody } from './apps.js'
import { BENCH_DIR, byMode, fmt, log, median, parseOptions, ratioText, summary, table, writeResult } from './common.js'

const options = parseOptions()
const settings = byMode(options, {
  // Server processes differ from one another by several percent however long they run (heap
  // layout, JIT decisions), so the full run spends its time on more repetitions of fewer rounds.
  full: {
    roundSeconds: 1,
    repetitions: 6,
    sequential: { main: { rounds: 8, repetitions: 6 }, paths: { rounds: 4, repetitions: 4 } },
    paired: { main: { rounds: 5, repetitions: 6 }, paths: { rounds: 4, repetitions: 4 } }
  },
  quick: {
    roundSeconds: 1,
    repetitions: 1,
    sequential: { main: { rounds: 6, repetitions: 1 }, paths: { rounds: 2, repetitions: 1 } },
    paired: { main: { rounds: 4, repetitions: 1 }, paths: { rounds: 2, repetitions: 1 } }
  },
  smoke: {
    roundSeconds: 0.2,
    repetitions: 1,
    sequential: { main: { rounds: 1, repetitions: 1 }, paths: { rounds: 1, repetitions: 1 } },
    paired: { main: { rounds: 1, repetitions: 1 }, paths: { rounds: 1, repetitions: 1 } }
  }
})
const LOAD = {
  sequential: { connections: 10, pipelining: 1 },
  paired: { connections: 10, pipelining: 8 }
}

const GROUPS = {
  main: [
    { name: 'bare', kind: 'bare', url: '/token', body: tokenBody(), status: 200 },
    { name: 'empty hooks', kind: 'empty', url: '/token', body: tokenBody(), status: 200 },
    { name: 'exchangepace', kind: 'exchangepace', url: '/token', body: tokenBody(), status: 200 },
    { name: '@fastify/rate-limit', kind: 'ratelimit', url: '/token', body: tokenBody(), status: 200 }
  ],
  paths: [
    { name: 'bare, wrong secret (401)', kind: 'bare', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, baselineOf: 'refund' },
    { name: 'exchangepace, wrong secret (401, refunded)', kind: 'exchangepace', url: '/token', body: tokenBody(undefined, 'wrong-secret'), status: 401, path: 'refund' },
    { name: 'bare, /token-tight (200)', kind: 'bare', url: '/token-tight', body: tokenBody(), status: 200, baselineOf: '429' },
    { name: 'exchangepace, /token-tight (429)', kind: 'exchangepace', url: '/token-tight', body: tokenBody(), status: 429, path: '429' },
    { name: '@fastify/rate-limit, /token-tight (429)', kind: 'ratelimit', url: '/token-tight', body: tokenBody(), status: 429, path: '429' }
  ]
}

/** The index of the configuration `config` is compared with, in its group. */
function baselineIndex (configs, config) {
  if (config.baselineOf !== undefined) return configs.indexOf(config)
  if (config.path === undefined) return 0
  return configs.findIndex(c => c.baselineOf === config.path)
}

/** Pins this process (every thread) to core 1, or says why not. */
function pinSelf () {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })
    return true
  } catch (err) {
    log(`http: taskset unavailable (${err.code ?? err.message}): running unpinned`)
    return false
  }
}

/**
 * Starts a server of `kind` and resolves with a handle once it listens. It starts unpinned (so that
 * several servers start in parallel) and is then pinned, every thread, to core 0.
 */
function startServer (kind, pinned) {
  const child = spawn(process.execPath, [join(BENCH_DIR, 'http-server.js'), kind], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const waiting = []
  let exited = null
  child.on('message', message => waiting.shift()?.resolve(message))
  child.on('exit', code => {
    exited = new Error(`http: server ${kind} exited (${code})`)
    for (const next of waiting.splice(0)) next.reject(exited)
  })
  const receive = () => new Promise((resolve, reject) => {
    if (exited) reject(exited)
    else waiting.push({ resolve, reject })
  })
  const request = async cmd => {
    const answer = receive()
    child.send({ cmd })
    return answer
  }
  return receive().then(ready => {
    if (pinned) execFileSync('taskset', ['-a', '-p', '-c', '0', String(ready.pid)], { stdio: 'ignore' })
    return {
      kind,
      port: ready.port,
      start: () => request('start'),
      stop: () => request('stop'),
      close: () => new Promise(resolve => {
        if (exited) return resolve()
        child.once('exit', () => resolve())
        child.send({ cmd: 'exit' })
      })
    }
  })
}

function load (server, config, how, seconds = settings.roundSeconds) {
  return autocannon({
    url: `http://127.0.0.1:${server.port}${config.url}`,
    method: 'POST',
    headers: { 'content-type': FORM },
    body: config.body,
    ...LOAD[how],
    duration: seconds,
    // autocannon notices the end of the duration on its sampling tick (1 s by default).
    sampleInt: 50
  })
}

function sample (stopped, result) {
  const statuses = {}
  for (const [code, { count }] of Object.entries(result.statusCodeStats ?? {})) statuses[code] = count
  return {
    cpuPerRequest: stopped.cpuMicros / stopped.requests,
    requestsPerSecond: stopped.requests / (stopped.wallMs / 1000),
    // The share of the round the server spent on the CPU: near 1 when it alone saturates the core.
    utilization: stopped.cpuMicros / (stopped.wallMs * 1000),
    statuses,
    errors: result.errors + result.timeouts
  }
}

/** One sequential round of one configuration: the server has the core to itself. */
async function measureAlone (server, config) {
  await server.start()
  const result = await load(server, config, 'sequential')
  return sample(await server.stop(), result)
}

/** One paired round: `a` and `b` loaded at the same time, each by its own autocannon. */
async function measurePair (serverA, configA, serverB, configB) {
  await Promise.all([serverA.start(), serverB.start()])
  const [resultA, resultB] = await Promise.all([load(serverA, configA, 'paired'), load(serverB, configB, 'paired')])
  const [stoppedA, stoppedB] = await Promise.all([serverA.stop(), serverB.stop()])
  return [sample(stoppedA, resultA), sample(stoppedB, resultB)]
}

/** Sequential rounds of a group: samples[config][round]. */
async function sequentialRounds (group, servers, label) {
  const configs = GROUPS[group]
  const { rounds } = settings.sequential[group]
  const samples = configs.map(() => [])
  for (let round = 0; round < rounds; round++) {
    const order = configs.map((_, i) => i)
    if (round % 2 === 1) order.reverse()
    for (const i of order) samples[i].push(await measureAlone(servers[configs[i].kind], configs[i]))
    log(`  ${label} round ${round + 1}/${rounds}  ` + configs.map((c, i) => `${c.name.split(',')[0]} ${fmt(samples[i][round].cpuPerRequest)}µs`).join(' | '))
  }
  return samples
}

/**
 * Paired rounds of a group: each configuration with its baseline, the order of the pairs
 * alternating. Returns pairs[k] = { config, baseline, samples: [[config, baseline] per round] }.
 */
async function pairedRounds (group, servers, label) {
  const configs = GROUPS[group]
  const { rounds } = settings.paired[group]
  const pairs = configs
    .map((config, i) => ({ config: i, baseline: baselineIndex(configs, config), samples: [] }))
    .filter(pair => pair.config !== pair.baseline)
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 1 ? [...pairs].reverse() : pairs
    for (const pair of order) {
      const config = configs[pair.config]
      const baseline = configs[pair.baseline]
      pair.samples.push(await measurePair(servers[config.kind], config, servers[baseline.kind], baseline))
    }
    log(`  ${label} round ${round + 1}/${rounds}  ` + pairs.map(pair => {
      const [x, base] = pair.samples[round]
      return `${configs[pair.config].name.split(',')[0]} ${fmt(x.cpuPerRequest / base.cpuPerRequest, 3)}x`
    }).join(' | '))
  }
  return pairs
}

/**
 * Every repetition starts fresh server processes (so that one process's luck with the JIT or the
 * heap does not carry over), warms every configuration up, then runs the rounds each group and
 * way still has repetitions for.
 */
async function repetitions (pinned) {
  const runs = { sequential: { main: [], paths: [] }, paired: { main: [], paths: [] } }
  for (let rep = 0; rep < settings.repetitions; rep++) {
    const servers = Object.fromEntries(await Promise.all(KINDS.map(async kind => [kind, await startServer(kind, pinned)])))
    try {
      if (options.mode !== 'smoke') {
        for (const config of [...GROUPS.main, ...GROUPS.paths]) await load(servers[config.kind], config, 'sequential', 0.5)
      }
      for (const how of ['sequential', 'paired']) {
        for (const group of ['main', 'paths']) {
          if (rep >= settings[how][group].repetitions) continue
          const label = `http ${how} ${group} ${rep + 1}/${settings[how][group].repetitions}:`
          runs[how][group].push(how === 'sequential'
            ? await sequentialRounds(group, servers, label)
            : await pairedRounds(group, servers, label))
        }
      }
    } finally {
      await Promise.all(Object.values(servers).map(server => server.close()))
    }
  }
  return runs
}

function totals (list) {
  const statuses = {}
  for (const s of list) for (const [code, count] of Object.entries(s.statuses)) statuses[code] = (statuses[code] ?? 0) + count
  return { statuses, errors: list.reduce((n, s) => n + s.errors, 0) }
}

/** Figures of the sequential rounds of a group: reps[rep][config][round]. */
function sequentialFigures (group, reps) {
  const configs = GROUPS[group]
  const ratioOf = (samples, c, base, metric) => samples[c].map((s, round) => s[metric] / samples[base][round][metric])
  return {
    ...settings.sequential[group],
    load: LOAD.sequential,
    configs: configs.map((config, c) => {
      const base = baselineIndex(configs, config)
      const all = reps.flatMap(samples => samples[c])
      const cpuByRep = reps.map(samples => median(ratioOf(samples, c, base, 'cpuPerRequest')))
      const rpsByRep = reps.map(samples => median(ratioOf(samples, c, base, 'requestsPerSecond')))
      // In the main group, also against the empty hooks: the cost beyond the shape of the design.
      const empty = configs.findIndex(x => x.kind === 'empty')
      const toEmpty = group === 'main' && c !== empty && c !== base
        ? { cpuRatioToEmptyHooks: summary(reps.map(samples => median(ratioOf(samples, c, empty, 'cpuPerRequest')))) }
        : {}
      return {
        ...toEmpty,
        name: config.name,
        kind: config.kind,
        url: config.url,
        expectedStatus: config.status,
        baseline: configs[base].name,
        cpuPerRequestMicros: summary(all.map(s => s.cpuPerRequest)),
        requestsPerSecond: summary(all.map(s => s.requestsPerSecond)),
        utilization: summary(all.map(s => s.utilization)),
        cpuRatio: { ...summary(cpuByRep), byRepetition: cpuByRep, rounds: summary(reps.flatMap(samples => ratioOf(samples, c, base, 'cpuPerRequest'))) },
        rpsRatio: { ...summary(rpsByRep), byRepetition: rpsByRep },
        ...totals(all),
        raw: reps.map(samples => samples[c].map(s => ({ cpuPerRequest: s.cpuPerRequest, requestsPerSecond: s.requestsPerSecond, utilization: s.utilization })))
      }
    })
  }
}

/** Figures of the paired rounds of a group: reps[rep][pair]. */
function pairedFigures (group, reps) {
  const configs = GROUPS[group]
  return {
    ...settings.paired[group],
    load: LOAD.paired,
    pairs: reps[0].map((first, k) => {
      const config = configs[first.config]
      const rounds = reps.map(pairs => pairs[k].samples)
      const ratios = rounds.map(list => list.map(([x, base]) => x.cpuPerRequest / base.cpuPerRequest))
      const rpsRatios = rounds.map(list => list.map(([x, base]) => x.requestsPerSecond / base.requestsPerSecond))
      const cpuByRep = ratios.map(median)
      const rpsByRep = rpsRatios.map(median)
      return {
        name: config.name,
        kind: config.kind,
        url: config.url,
        expectedStatus: config.status,
        baseline: configs[first.baseline].name,
        cpuPerRequestMicros: summary(rounds.flat().map(([x]) => x.cpuPerRequest)),
        baselineCpuPerRequestMicros: summary(rounds.flat().map(([, base]) => base.cpuPerRequest)),
        requestsPerSecond: summary(rounds.flat().map(([x]) => x.requestsPerSecond)),
        utilization: summary(rounds.flat().map(([x, base]) => x.utilization + base.utilization)),
        cpuRatio: { ...summary(cpuByRep), byRepetition: cpuByRep, rounds: summary(ratios.flat()) },
        rpsRatio: { ...summary(rpsByRep), byRepetition: rpsByRep },
        ...totals(rounds.flat().map(([x]) => x)),
        raw: rounds.map(list => list.map(([x, base]) => ({ cpuPerRequest: x.cpuPerRequest, baselineCpuPerRequest: base.cpuPerRequest })))
      }
    })
  }
}

const statusText = statuses => Object.entries(statuses).map(([code, n]) => `${code}:${n}`).join(' ')

function printSequential (group, figures) {
  log(`\nhttp sequential, ${group}: ${figures.repetitions} repetition(s) x ${figures.rounds} rounds of ${settings.roundSeconds} s; ratio: median over repetitions (range)`)
  log(table(['configuration', 'CPU µs/req', 'CPU ratio', 'req/s', 'req/s ratio', 'server CPU use', 'statuses'], figures.configs.map(c => {
    const isBase = c.name === c.baseline
    return [c.name, fmt(c.cpuPerRequestMicros.median), isBase ? '1' : ratioText(c.cpuRatio, 3), fmt(c.requestsPerSecond.median, 0),
      isBase ? '1' : ratioText(c.rpsRatio, 3), `${fmt(100 * c.utilization.median, 0)}%`, statusText(c.statuses)]
  })))
}

function printPaired (group, figures) {
  log(`\nhttp paired, ${group}: ${figures.repetitions} repetition(s) x ${figures.rounds} rounds of ${settings.roundSeconds} s; ratio: median over repetitions (range)`)
  log(table(['configuration', 'baseline', 'CPU µs/req', 'CPU ratio', 'round quartiles', 'statuses'], figures.pairs.map(p => [
    p.name, p.baseline, fmt(p.cpuPerRequestMicros.median), ratioText(p.cpuRatio, 3), `${fmt(p.cpuRatio.rounds.p25, 3)}-${fmt(p.cpuRatio.rounds.p75, 3)}`, statusText(p.statuses)
  ])))
}

const pinned = pinSelf()
log(`http: servers ${pinned ? 'on core 0, load on core 1' : 'unpinned'}; kinds ${KINDS.join(', ')}`)
const runs = await repetitions(pinned)
const sequential = { main: sequentialFigures('main', runs.sequential.main), paths: sequentialFigures('paths', runs.sequential.paths) }
const paired = { main: pairedFigures('main', runs.paired.main), paths: pairedFigures('paths', runs.paired.paths) }
printSequential('main', sequential.main)
printSequential('paths', sequential.paths)
printPaired('main', paired.main)
printPaired('paths', paired.paths)

const paceSequential = sequential.main.configs.find(c => c.kind === 'exchangepace')
const pacePaired = paired.main.pairs.find(p => p.kind === 'exchangepace')
const file = writeResult(options, 'http', {
  description: 'server CPU µs per request and requests/s, ratios to bare, sequential and paired rounds',
  pinned,
  roundSeconds: settings.roundSeconds,
  target: {
    what: "exchangepace's CPU per request <= 1.05x bare",
    sequential: paceSequential.cpuRatio,
    paired: pacePaired.cpuRatio,
    met: paceSequential.cpuRatio.median <= 1.05 && pacePaired.cpuRatio.median <= 1.05
  },
  sequential,
  paired
})
log(`\nhttp: wrote ${file}`)
