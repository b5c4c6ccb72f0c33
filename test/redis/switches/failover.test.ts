import t from 'tap'
import { exchangePace, RedisStore } from '../../../lib/index.js'
import { installedOrSkip } from '../../helpers/cluster.js'
import type { TapTest } from '../../helpers/shared-behaviour.js'
// The bench's own (plain JavaScript): part 9 runs the same scenarios, longer.
import { GUESS_LIMIT, runRestart, runSentinel } from '../../../bench/parts/failover/failover-run.js'
import { startSentinels } from '../../../bench/shared/redis-servers.js'
import { failoverFigures } from '../../../bench/parts/failover/failover-figures.js'

// Failover under load: two app replicas on a RedisStore, clients at three times their rate,
// strangers and a guesser, while a single Redis restarts empty, and while a master watched by
// three sentinels is killed. Short forms of bench/parts/failover/failover.js (part 9, docs/benchmarks.md has the
// long ones); a Cluster's failovers and rebalance are test/redis/switches/failover-cluster.test.ts's, on
// both ioredis majors.

const RATE = 5
const SETTINGS = { rate: RATE, clients: 9, sendPerSecond: 3 * RATE, strangersPerSecond: 10, guessesPerSecond: 20, beforeMs: 1200, afterMs: 1500, timeoutMs: 1000, retryMs: 250 }
const lib = { exchangePace, RedisStore }

type Figures = ReturnType<typeof failoverFigures>

/** The per-second admissions of the watched clients, as a TAP comment (second 0 begins at the trigger). */
function show (t: TapTest, figures: Figures): void {
  const row = (counts: Array<[number, number]> | null): string => counts === null ? '-' : counts.map(([k, n]) => `${k}:${n}`).join(' ')
  t.comment(`${figures.how}: promoted ${figures.promotionAfterTrigger} s after the trigger; outages ${JSON.stringify(figures.outages.perReplica)}`)
  t.comment(`admitted per second, healthy master's client ${figures.watched.healthy}: ${row(figures.perSecond.healthy)}`)
  t.comment(`admitted per second, failed master's client ${figures.watched.failing}: ${row(figures.perSecond.failing)}`)
  t.comment(`guesses: ${JSON.stringify(figures.guesses)}; keys left: ${JSON.stringify(figures.keysLeft)}`)
}

/** What holds through every switch: nothing fails, each replica keeps its bucket, no key lives forever, guesses stay few. */
function common (t: TapTest, figures: Figures): void {
  t.equal(figures.failed, 0, 'no request failed (no 5xx, no error)')
  t.same(Object.keys(figures.statuses.stranger).filter(status => status !== '401' && status !== '429'), [], 'strangers: 401 or 429 only')
  // Per replica, the units its memory kept, on its own clock: exact. Over both replicas, admissions
  // by when the handler ran (Redis granted up to a round trip before): one unit of slack there.
  t.ok(figures.excessPerReplica <= 0, `no client beyond its bucket on either replica (excess ${figures.excessPerReplica})`)
  if (figures.excessSharedFailing !== null) t.ok(figures.excessSharedFailing <= figures.boundFailing + 1, `the failed master's clients: ${figures.excessSharedFailing} beyond the shared bucket, at most ${figures.boundFailing} (one bucket for a lost row, and each replica's own while paced in memory)`)
  t.ok(figures.keysLeft.keys > 0, `keys in Redis after the run: ${figures.keysLeft.keys}`)
  t.equal(figures.keysLeft.withoutExpiry, 0, 'no key without an expiry')
  // A budget per outage of each replica, while its memory paces the guesser alone, and one per life
  // of the guesser's row in Redis: two, as Redis may lose it (a restart, or a promoted replica
  // behind its master). A replica's memory follows Redis's grant of a key it had locked out, so a
  // later outage finds room there again (docs/stores.md, "What a failed master costs a key on it").
  const outages = figures.outages.perReplica.reduce((sum, outage) => sum + outage.warnings, 0) + figures.outages.warningsForOtherMasters
  t.ok(figures.guesses.checked <= (outages + 2) * GUESS_LIMIT, `guesses checked: ${figures.guesses.checked} of ${figures.guesses.sent} (${figures.guesses.checkedDuringSwitch} during the switch), at most a budget per outage (${outages}) and two for the row's lives`)
}

if (installedOrSkip('redis-server', 'the failover tests start a cluster with replicas of their own')) {
  t.test('a single Redis restarts empty under traffic', async t => {
    const figures = failoverFigures(await runRestart(lib, SETTINGS), RATE)
    show(t, figures)
    common(t, figures)
  })

  t.test('a master watched by three sentinels is killed under traffic', async t => {
    const sentinels = await startSentinels({ downAfterMs: 1000 })
    t.teardown(sentinels.stop)
    const figures = failoverFigures(await runSentinel(lib, sentinels, 'kill', SETTINGS), RATE)
    show(t, figures)
    common(t, figures)
    t.ok(figures.outages.perReplica.some(outage => outage.warnings > 0), 'the store paced per replica for a while')
    for (const [replica, outage] of figures.outages.perReplica.entries()) {
      if (outage.warnings === 0) continue
      t.ok(outage.sharedAgainAfterPromotion !== null && outage.sharedAgainAfterPromotion <= 3, `replica ${replica}: shared again ${outage.sharedAgainAfterPromotion} s after the promotion, once the client asked the sentinels`)
    }
  })
}
