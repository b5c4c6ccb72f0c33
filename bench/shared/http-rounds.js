// The machinery of the HTTP-level parts (http, redis): servers in child processes on loopback,
// load from autocannon, CPU per request read inside each server, in interleaved rounds.
//
// Each server (bench/shared/http-server.js <kind>) runs in its own process pinned to core 0 (`taskset`);
// the calling process, which drives the load with autocannon, pins itself to core 1. Each server
// reads process.cpuUsage() when told (over IPC, outside the measured route) that a round starts and
// when it ends, and counts the requests it received; so a round gives CPU microseconds per request,
// requests/s, and the share of the round the server spent on the CPU. Every repetition starts fresh
// server processes and warms each one up.
//
// Two ways of running the rounds, reported side by side:
// - sequential: each configuration in turn gets the whole core for `roundSeconds` under
//   autocannon's load (10 connections, one request at a time on each), the order alternating
//   from round to round; the ratio of a round is against the baseline's figure of the same round.
// - paired: a configuration and its baseline are loaded at the same time (both on core 0, one
//   autocannon each, 8 requests pipelined per connection so that both stay busy), so that
//   whatever else runs on the machine in that second weighs on both alike; the ratio of a round is
//   between the two.
// Per repetition: the median of the per-round ratios. Reported: the median of those medians and
// their range across repetitions, plus the quartiles of all per-round ratios.
//
// A group is a list of configurations { name, kind, url, body, status }; the first is the baseline
// of the others, except that a configuration with `path` is compared with the one whose
// `baselineOf` names that path.

import { execFileSync, spawn } from 'node:child_process'
import { cpus } from 'node:os'
import { join } from 'node:path'
import autocannon from 'autocannon'
import { FORM } from './apps.js'
import { BENCH_DIR, fmt, log, median, ratioText, summary, table } from './common.js'

const LOAD = {
  sequential: { connections: 10, pipelining: 1 },
  paired: { connections: 10, pipelining: 8 }
}

/**
 * Lets every thread of process `pid` run on every core of the machine (without taskset nothing was
 * pinned). The machine's, not this process's: `availableParallelism` counts only the cores this
 * process may use, one once it has pinned itself.
 */
function unpin (pid) {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', `0-${cpus().length - 1}`, String(pid)], { stdio: 'ignore' })
  } catch {
    // No taskset: nothing was pinned either.
  }
}

/**
 * Starts a server of `kind` (bench/shared/http-server.js) and resolves with a handle once it listens. It
 * starts with this process's affinity (so that several servers start in parallel) and is then
 * pinned, every thread, to core 0 when `pinned`, and otherwise given every core: a child inherits
 * the affinity of its parent, which may have pinned itself to core 1 to generate load. `label`
 * names the part in errors.
 */
export function startServer (kind, pinned, label) {
  const child = spawn(process.execPath, [join(BENCH_DIR, 'shared', 'http-server.js'), kind], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  const waiting = []
  let exited = null
  child.on('message', message => waiting.shift()?.resolve(message))
  child.on('exit', code => {
    exited = new Error(`${label}: server ${kind} exited (${code})`)
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
    else unpin(ready.pid)
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

/** The index of the configuration `config` is compared with, in its group. */
function baselineIndex (configs, config) {
  if (config.baselineOf !== undefined) return configs.indexOf(config)
  if (config.path === undefined) return 0
  return configs.findIndex(c => c.baselineOf === config.path)
}

/** Pins this process (every thread) to core 1, or says why not. */
function pinSelf (label) {
  try {
    execFileSync('taskset', ['-a', '-p', '-c', '1', String(process.pid)], { stdio: 'ignore' })
    return true
  } catch (err) {
    log(`${label}: taskset unavailable (${err.code ?? err.message}): running unpinned`)
    return false
  }
}

/** autocannon's load on `server` for `seconds`, sequential or paired (LOAD). */
function load (server, config, how, seconds) {
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

/**
 * One request of `config` to `server`, awaited however long it takes. A smoke run's rounds are too
 * short to warm anything up, and a server that is still connecting to Redis (or compiling) when one
 * starts answers nothing within it on a loaded machine; after this, it has answered once.
 */
async function firstAnswer (server, config) {
  const response = await fetch(`http://127.0.0.1:${server.port}${config.url}`, { method: 'POST', headers: { 'content-type': FORM }, body: config.body })
  await response.arrayBuffer()
}

/** A round's figures from the server's reading (`stopped`) and autocannon's result. */
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
async function measureAlone (server, config, seconds) {
  await server.start()
  const result = await load(server, config, 'sequential', seconds)
  return sample(await server.stop(), result)
}

/** One paired round: `a` and `b` loaded at the same time, each by its own autocannon. */
async function measurePair (serverA, configA, serverB, configB, seconds) {
  await Promise.all([serverA.start(), serverB.start()])
  const [resultA, resultB] = await Promise.all([load(serverA, configA, 'paired', seconds), load(serverB, configB, 'paired', seconds)])
  const [stoppedA, stoppedB] = await Promise.all([serverA.stop(), serverB.stop()])
  return [sample(stoppedA, resultA), sample(stoppedB, resultB)]
}

/** Sequential rounds of a group: samples[config][round]. */
async function sequentialRounds (run, group, servers, progress) {
  const configs = run.groups[group]
  const { rounds } = run.settings.sequential[group]
  const samples = configs.map(() => [])
  for (let round = 0; round < rounds; round++) {
    const order = configs.map((_, i) => i)
    if (round % 2 === 1) order.reverse()
    for (const i of order) samples[i].push(await measureAlone(servers[configs[i].kind], configs[i], run.settings.roundSeconds))
    log(`  ${progress} round ${round + 1}/${rounds}  ` + configs.map((c, i) => `${c.name.split(',')[0]} ${fmt(samples[i][round].cpuPerRequest)}µs`).join(' | '))
  }
  return samples
}

/**
 * Paired rounds of a group: each configuration with its baseline, the order of the pairs
 * alternating. Returns pairs[k] = { config, baseline, samples: [[config, baseline] per round] }.
 */
async function pairedRounds (run, group, servers, progress) {
  const configs = run.groups[group]
  const { rounds } = run.settings.paired[group]
  const pairs = configs
    .map((config, i) => ({ config: i, baseline: baselineIndex(configs, config), samples: [] }))
    .filter(pair => pair.config !== pair.baseline)
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 1 ? [...pairs].reverse() : pairs
    for (const pair of order) {
      const config = configs[pair.config]
      const baseline = configs[pair.baseline]
      pair.samples.push(await measurePair(servers[config.kind], config, servers[baseline.kind], baseline, run.settings.roundSeconds))
    }
    log(`  ${progress} round ${round + 1}/${rounds}  ` + pairs.map(pair => {
      const [x, base] = pair.samples[round]
      return `${configs[pair.config].name.split(',')[0]} ${fmt(x.cpuPerRequest / base.cpuPerRequest, 3)}x`
    }).join(' | '))
  }
  return pairs
}

/**
 * Starts a server of every kind into `servers` (by kind). Every start is awaited, so that when one
 * fails the caller can close all the others.
 */
async function startServers (kinds, pinned, label, servers) {
  const started = await Promise.allSettled(kinds.map(kind => startServer(kind, pinned, label)))
  started.forEach((result, i) => { if (result.status === 'fulfilled') servers[kinds[i]] = result.value })
  const failed = started.find(result => result.status === 'rejected')
  if (failed !== undefined) throw failed.reason
}

/** One repetition's rounds, in fresh servers: adds each group's and way's rounds to `runs`. */
async function repetition (run, rep, pinned, runs) {
  const { groups, settings, label } = run
  const servers = {}
  try {
    await startServers([...new Set(Object.values(groups).flat().map(config => config.kind))], pinned, label, servers)
    for (const config of Object.values(groups).flat()) {
      if (run.smoke) await firstAnswer(servers[config.kind], config)
      else await load(servers[config.kind], config, 'sequential', 0.5)
    }
    for (const how of ['sequential', 'paired']) {
      for (const group of Object.keys(groups)) {
        if (rep >= settings[how][group].repetitions) continue
        const progress = `${label} ${how} ${group} ${rep + 1}/${settings[how][group].repetitions}:`
        runs[how][group].push(how === 'sequential'
          ? await sequentialRounds(run, group, servers, progress)
          : await pairedRounds(run, group, servers, progress))
      }
    }
  } finally {
    await Promise.all(Object.values(servers).map(server => server.close()))
  }
}

/**
 * Every repetition starts fresh server processes (so that one process's luck with the JIT or the
 * heap does not carry over), warms every configuration up, then runs the rounds each group and
 * way still has repetitions for. Returns runs[how][group][rep].
 */
async function repetitions (run, pinned) {
  const runs = { sequential: {}, paired: {} }
  for (const group of Object.keys(run.groups)) {
    runs.sequential[group] = []
    runs.paired[group] = []
  }
  for (let rep = 0; rep < run.settings.repetitions; rep++) await repetition(run, rep, pinned, runs)
  return runs
}

/** The statuses and errors of a list of samples, summed. */
function totals (list) {
  const statuses = {}
  for (const s of list) for (const [code, count] of Object.entries(s.statuses)) statuses[code] = (statuses[code] ?? 0) + count
  return { statuses, errors: list.reduce((n, s) => n + s.errors, 0) }
}

/** Per-round ratios of configuration `c` to configuration `base` in one repetition's samples. */
const ratioOf = (samples, c, base, metric) => samples[c].map((s, round) => s[metric] / samples[base][round][metric])

/** Figures of one configuration of a group's sequential rounds: reps[rep][config][round]. */
function sequentialConfigFigures (configs, c, reps) {
  const config = configs[c]
  const base = baselineIndex(configs, config)
  const all = reps.flatMap(samples => samples[c])
  const cpuByRep = reps.map(samples => median(ratioOf(samples, c, base, 'cpuPerRequest')))
  const rpsByRep = reps.map(samples => median(ratioOf(samples, c, base, 'requestsPerSecond')))
  // Where the group has the empty hooks, also against them: the cost beyond the shape of the design.
  const empty = configs.findIndex(x => x.kind === 'empty')
  const toEmpty = empty !== -1 && c !== empty && c !== base
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
}

/** Figures of the sequential rounds of a group: reps[rep][config][round]. */
function sequentialFigures (run, group, reps) {
  const configs = run.groups[group]
  return {
    ...run.settings.sequential[group],
    load: LOAD.sequential,
    configs: configs.map((_, c) => sequentialConfigFigures(configs, c, reps))
  }
}

/** Figures of the k-th pair of a group's paired rounds: reps[rep][pair]. */
function pairFigures (configs, k, reps) {
  const first = reps[0][k]
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
}

/** Figures of the paired rounds of a group: reps[rep][pair]. */
function pairedFigures (run, group, reps) {
  return {
    ...run.settings.paired[group],
    load: LOAD.paired,
    pairs: reps[0].map((_, k) => pairFigures(run.groups[group], k, reps))
  }
}

const statusText = statuses => Object.entries(statuses).map(([code, n]) => `${code}:${n}`).join(' ')

function printSequential (run, group, figures) {
  log(`\n${run.label} sequential, ${group}: ${figures.repetitions} repetition(s) x ${figures.rounds} rounds of ${run.settings.roundSeconds} s; ratio: median over repetitions (range)`)
  log(table(['configuration', 'CPU µs/req', 'CPU ratio', 'req/s', 'req/s ratio', 'server CPU use', 'statuses'], figures.configs.map(c => {
    const isBase = c.name === c.baseline
    return [c.name, fmt(c.cpuPerRequestMicros.median), isBase ? '1' : ratioText(c.cpuRatio, 3), fmt(c.requestsPerSecond.median, 0),
      isBase ? '1' : ratioText(c.rpsRatio, 3), `${fmt(100 * c.utilization.median, 0)}%`, statusText(c.statuses)]
  })))
}

function printPaired (run, group, figures) {
  log(`\n${run.label} paired, ${group}: ${figures.repetitions} repetition(s) x ${figures.rounds} rounds of ${run.settings.roundSeconds} s; ratio: median over repetitions (range)`)
  log(table(['configuration', 'baseline', 'CPU µs/req', 'CPU ratio', 'all rounds: median (quartiles)', 'statuses'], figures.pairs.map(p => [
    p.name, p.baseline, fmt(p.cpuPerRequestMicros.median), ratioText(p.cpuRatio, 3), ratioText(p.cpuRatio.rounds, 3, 'iqr'), statusText(p.statuses)
  ])))
}

/**
 * Runs the rounds of `groups` ({ name: configurations }) as `settings` says (roundSeconds,
 * repetitions, and rounds and repetitions per way and group), prints the tables, and returns
 * { pinned, roundSeconds, sequential, paired } with the figures of every group. `label` prefixes
 * the progress; `smoke` skips the warm-up.
 */
export async function measureHttp (run) {
  const { label, groups, settings } = run
  const pinned = pinSelf(label)
  const kinds = [...new Set(Object.values(groups).flat().map(config => config.kind))]
  log(`${label}: servers ${pinned ? 'on core 0, load on core 1' : 'unpinned'}; kinds ${kinds.join(', ')}`)
  const runs = await repetitions(run, pinned)
  const sequential = {}
  const paired = {}
  for (const group of Object.keys(groups)) {
    sequential[group] = sequentialFigures(run, group, runs.sequential[group])
    paired[group] = pairedFigures(run, group, runs.paired[group])
  }
  for (const group of Object.keys(groups)) printSequential(run, group, sequential[group])
  for (const group of Object.keys(groups)) printPaired(run, group, paired[group])
  return { pinned, roundSeconds: settings.roundSeconds, sequential, paired }
}
