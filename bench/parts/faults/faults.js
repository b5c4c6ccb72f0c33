// Part 16, faults: random fault schedules between two app replicas and Redis (issue 37, item 6).
// Each seed is one schedule of the fault proxy's kinds (latency, a stall, a reset, a half-open
// connection, a slow close), run under traffic by bench/parts/faults/fault-schedule.js, which says the shape and
// checks the invariants after it: no 5xx or unhandled error, no key without expiry, no client above
// the bound docs/stores.md gives for the time it was degraded, every degradation over within
// `retryMs` + 1 s of its fault's end, every block held, every "shared again" line true. The store
// runs with its defaults (`timeoutMs`, and `retryMs` 1000; 300 in the smoke, to be quick);
// test/redis/faults.test.ts runs a few seeds with `retryMs` 500. Reported: the seeds whose
// invariants broke (with what broke: replay one with FAULT_SEEDS=<seed> on the test), and the worst
// of every seed: the latest end of a degradation after its fault's end, and the highest admissions
// against the bound.
//
// Run alone: node bench/parts/faults/faults.js [--quick|--smoke] [--out DIR]. Needs redis-server; without it
// the part records that it was skipped, and why.

import Redis from 'ioredis'
import exchangePace, { RedisStore } from 'exchangepace'
import { runFaultSchedule } from './fault-schedule.js'
import { byMode, fmt, log, parseOptions, writeResult } from '../../shared/common.js'
import { redisServerVersion, startAlone } from '../../shared/redis-servers.js'

const options = parseOptions()
const settings = byMode(options, {
  full: { seeds: 60, faults: 4, retryMs: 1000 },
  quick: { seeds: 10, faults: 4, retryMs: 1000 },
  smoke: { seeds: 1, faults: 2, retryMs: 300 }
})
const SHAPE = { retryMs: settings.retryMs, faults: settings.faults }
/** Seeds from here on, so that the part's schedules are not the test's (1, 2, 3). */
const FIRST_SEED = 1000

async function main () {
  const redisServer = redisServerVersion()
  if (redisServer === null) {
    log('faults: redis-server is not installed: skipped')
    writeResult(options, 'faults', { skipped: 'redis-server is not installed', target: { met: false } })
    return
  }
  const server = await startAlone()
  const { port } = server
  const check = new Redis({ host: '127.0.0.1', port })
  const runs = []
  try {
    for (let seed = FIRST_SEED; seed < FIRST_SEED + settings.seeds; seed++) {
      const run = await runFaultSchedule({ seed, exchangePace, RedisStore, redis: { host: '127.0.0.1', port }, check, shape: SHAPE })
      runs.push(run)
      const f = run.figures
      log(`  seed ${seed} (${run.schedule.map(s => s.fault.kind).join(', ')}): ${run.violations.length === 0 ? 'every invariant held' : `BROKEN: ${run.violations.join('; ')}`}; ${f.degradations} degradations, ${fmt(f.degradedMs / 1000, 2)} s degraded, the latest ended ${f.worstEndAfterFaultMs ?? '-'} ms after its fault's end; admissions at most ${fmt(f.worstToBound * 100, 0)}% of the bound`)
    }
  } finally {
    check.disconnect()
    await server.kill()
  }
  const worstBy = key => runs.reduce((worst, run) => (run.figures[key] ?? -Infinity) > (worst?.figures[key] ?? -Infinity) ? run : worst, null)
  const latest = worstBy('worstEndAfterFaultMs')
  const closest = worstBy('worstToBound')
  const broken = runs.filter(run => run.violations.length > 0)
  const kinds = {}
  for (const run of runs) for (const { fault } of run.schedule) kinds[fault.kind] = (kinds[fault.kind] ?? 0) + 1
  const worst = {
    endAfterFaultMs: latest?.figures.worstEndAfterFaultMs ?? null,
    endAfterFaultSeed: latest?.figures.worstEndAfterFaultMs == null ? null : latest.seed,
    toBound: closest?.figures.worstToBound ?? 0,
    toBoundSeed: closest?.seed ?? null
  }
  log(`faults: ${runs.length} seeds, ${broken.length} broke an invariant; the latest end of a degradation ${worst.endAfterFaultMs ?? '-'} ms after its fault's end (seed ${worst.endAfterFaultSeed ?? '-'}; the bound is retryMs + 1 s, ${SHAPE.retryMs + 1000} ms); admissions at most ${fmt(worst.toBound * 100, 0)}% of the bound (seed ${worst.toBoundSeed})`)
  const file = writeResult(options, 'faults', {
    description: 'random fault schedules (the fault proxy\'s kinds) between two app replicas and Redis, each seed\'s invariants checked',
    settings: { ...settings, firstSeed: FIRST_SEED, shape: SHAPE },
    redisServer,
    kinds,
    worst,
    broken: broken.map(run => ({ seed: run.seed, violations: run.violations })),
    runs: runs.map(run => ({ seed: run.seed, kinds: run.schedule.map(s => s.fault.kind), violations: run.violations.length, ...run.figures })),
    target: { what: 'every invariant held on every seed', met: broken.length === 0 }
  })
  log(`faults: wrote ${file}`)
}

await main()
