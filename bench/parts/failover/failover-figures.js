// The figures of one run of bench/parts/failover/failover-run.js: what failed, how far any client went beyond
// its bucket (per replica, and over both replicas where the pace stayed shared), the per-second
// admissions of a client on a healthy master and of one on the failed master, when each replica
// paced the failed master's keys in memory and when they were shared again, the guesses that
// reached the secret check, and the keys left without an expiry.

/**
 * The most units of `times` (ascending, ms) beyond what a bucket of `rate` per second allows: in
 * every window from one grant to a later one, the grants in it less rate x (1 + its length in s).
 * At most 0 when the bucket held, whatever the window (test/redis/fallback.test.ts's measure).
 */
export function excess (times, rate) {
  let worst = -Infinity
  for (let first = 0; first < times.length; first++) {
    for (let last = first; last < times.length; last++) {
      worst = Math.max(worst, last - first + 1 - rate * (1 + (times[last] - times[first]) / 1000))
    }
  }
  return times.length === 0 ? 0 : Math.round(worst * 100) / 100
}

/** Per-second counts of `times` from `from` to `to` (ms), second k starting at `origin` + k s: [k, count] pairs. */
function perSecond (times, origin, from, to) {
  const first = Math.floor((from - origin) / 1000)
  const last = Math.floor((to - origin) / 1000)
  const counts = Array.from({ length: last - first + 1 }, (_, i) => [first + i, 0])
  for (const at of times) counts[Math.floor((at - origin) / 1000) - first][1]++
  return counts
}

function tally (answers) {
  const byWho = {}
  for (const { who, status } of answers) {
    byWho[who] ??= {}
    byWho[who][status] = (byWho[who][status] ?? 0) + 1
  }
  return byWho
}

/**
 * Each client's units: [replica 0's, replica 1's] kept in the replica's memory (granted there and
 * not refunded, at the memory's own time: every admitted request holds one), and both replicas'
 * admissions, each at the time Redis granted it (Redis's clock, which no stall of this process
 * delays) or, for one the store decided without Redis, when its request reached the store.
 */
function admissions (run) {
  const byId = new Map(run.ids.map(id => [id, [[], [], []]]))
  for (const [replica, units] of run.kept.entries()) {
    for (const { key, at, redisAt, refunded } of units) {
      if (refunded || !byId.has(key)) continue
      byId.get(key)[replica].push(at)
      byId.get(key)[2].push(redisAt ?? at)
    }
  }
  for (const lists of byId.values()) for (const list of lists) list.sort((a, b) => a - b)
  return byId
}

/** The time from each warning of `lines` (in order) to the end that follows it, or to `stoppedAt`, summed, in ms. */
function paced (lines, stoppedAt) {
  let total = 0
  let since = null
  for (const line of lines) {
    if (line.level === 40 && since === null) since = line.at
    else if (line.level === 30 && since !== null) {
      total += line.at - since
      since = null
    }
  }
  return since === null ? total : total + stoppedAt - since
}

/** Each replica's outage lines about the target (or the single Redis, or the replica promoted in the target's place), relative to the promotion, in s. */
function outages (run) {
  // The failed master's keys are the promoted replica's once ioredis has read the new map.
  const about = line => run.target === null || line.master === run.target || line.master === run.successor
  const perReplica = [0, 1].map(replica => {
    const lines = run.outageLines.filter(line => line.replica === replica && about(line))
    const warned = lines.filter(line => line.level === 40).map(line => line.at)
    const ended = lines.filter(line => line.level === 30).map(line => line.at)
    const seconds = at => Math.round((at - run.promotedAt) / 10) / 100
    return {
      warnings: warned.length,
      // How long this replica paced the keys in memory, in s: from each warning to the end that
      // follows it (or the end of the run), summed over the outages (a stall may add some).
      lasted: Math.round(paced(lines, run.stoppedAt) / 10) / 100,
      firstWarningAfterTrigger: warned.length === 0 ? null : Math.round((warned[0] - run.triggeredAt) / 10) / 100,
      sharedAgainAfterPromotion: ended.length === 0 ? null : seconds(ended[ended.length - 1]),
      endedBy: lines.filter(line => line.level === 30).map(line => /no longer serves/.test(line.msg) ? 'slots moved' : 'answered')
    }
  })
  const elsewhere = run.outageLines.filter(line => line.level === 40 && !about(line))
  return {
    perReplica,
    warningsForOtherMasters: elsewhere.length,
    otherMasters: elsewhere.map(line => ({ replica: line.replica, master: line.master, afterTrigger: Math.round((line.at - run.triggeredAt) / 10) / 100, error: line.err?.message }))
  }
}

/**
 * The spans (ms, in order) in which either replica said it paced the failed master's keys (or
 * those of the master its slots moved to) in memory: from `timeoutMs` before each warning (a
 * request that timed out reached the store up to that long before its outage began) to the end
 * line that follows it on that replica, or to the end of the run.
 */
function pacedSpans (run) {
  const about = line => run.target === null || line.master === run.target || line.master === run.successor
  const spans = []
  for (const replica of [0, 1]) {
    let since = null
    for (const line of run.outageLines.filter(line => line.replica === replica && about(line))) {
      if (line.level === 40 && since === null) since = line.at - (run.timeoutMs ?? 0)
      else if (line.level === 30 && since !== null) {
        spans.push([since, line.at])
        since = null
      }
    }
    if (since !== null) spans.push([since, run.stoppedAt, 'unended'])
  }
  spans.sort((a, b) => a[0] - b[0])
  return spans
}

/** `spans` merged where they overlap, in order. */
function merge (spans) {
  const merged = []
  for (const span of spans) {
    const last = merged[merged.length - 1]
    if (last !== undefined && span[0] <= last[1]) last[1] = Math.max(last[1], span[1])
    else merged.push([...span])
  }
  return merged
}

/** The parts of [from, to] outside `spans` (merged, in order). */
function outside (spans, from, to) {
  const parts = []
  let at = from
  for (const [start, end] of spans) {
    if (end <= at) continue
    if (start >= to) break
    if (start > at) parts.push([at, start])
    at = Math.max(at, end)
  }
  if (at < to) parts.push([at, to])
  return parts
}

function guesses (run) {
  const checked = run.answers.filter(a => a.who === 'guesser' && a.status === 401).map(a => a.at)
  const ends = run.outageLines.filter(line => line.level === 30).map(line => line.at)
  const switchEnd = Math.max(run.promotedAt, ...ends)
  return {
    sent: run.answers.filter(a => a.who === 'guesser').length,
    checked: checked.length,
    checkedDuringSwitch: checked.filter(at => at >= run.triggeredAt && at <= switchEnd).length
  }
}

/**
 * The most a key on the failed master (or the restarted Redis) may get beyond its bucket over both
 * replicas (`replicas`), by the design: one bucket, when its row was lost (a restart empty, or a
 * write the replica had not received), and while the replicas paced it in memory (for up to
 * `lasted` s) each replica's own bucket, N buckets and (N - 1) x rate x lasted beyond the shared one.
 */
export function boundFailing (rate, replicas, lasted) {
  return lasted === 0 ? rate : rate + replicas * rate + (replicas - 1) * rate * lasted
}

/** The most any of `ids` was admitted in each second from `from` to `to`, second k starting at `origin` + k s: [k, count] pairs. */
function mostPerSecond (byId, ids, origin, from, to) {
  const each = ids.map(id => perSecond(byId.get(id)[2], origin, from, to))
  return each.length === 0 ? null : each[0].map(([k], i) => [k, Math.max(...each.map(counts => counts[i][1]))])
}

/** The figures of `run`, a result of runFailover or runRestart, with clients paced at `rate` per second. */
export function failoverFigures (run, rate) {
  const seconds = (run.stoppedAt - run.started) / 1000
  const byId = admissions(run)
  const onTarget = new Set(run.onTarget)
  const healthy = run.ids.filter(id => !onTarget.has(id))
  const failing = run.ids.filter(id => onTarget.has(id))
  const worst = (ids, which) => Math.max(0, ...ids.map(id => excess(byId.get(id)[which], rate)))
  const watched = { healthy: healthy[0] ?? null, failing: failing[0] ?? null }
  const bins = id => id === null ? null : perSecond(byId.get(id)[2], run.triggeredAt, run.started, run.stoppedAt)
  const admittedTotals = ids => ids.map(id => byId.get(id)[2].length)
  const outageFigures = outages(run)
  // From 1 s after the promotion (the rebalance's end) on: the shared bucket must hold again.
  const settled = run.promotedAt + 1000
  const worstAfter = ids => Math.max(0, ...ids.map(id => excess(byId.get(id)[2].filter(at => at >= settled), rate)))
  // The same, in the parts of that time in which no replica said it paced those keys in memory
  // (an outage a stall of this machine may begin, after a switch too): the logs said shared there.
  const spans = pacedSpans(run)
  const shared = outside(merge(spans), settled, run.stoppedAt)
  const worstShared = ids => Math.max(0, ...ids.flatMap(id => shared.map(([from, to]) => excess(byId.get(id)[2].filter(at => at >= from && at < to), rate))))
  return {
    how: run.how,
    label: run.label ?? null,
    target: run.target,
    seconds: Math.round(seconds * 10) / 10,
    promotionAfterTrigger: Math.round((run.promotedAt - run.triggeredAt) / 10) / 100,
    statuses: tally(run.answers),
    failed: run.answers.filter(a => a.status === 'error' || a.status >= 500).length,
    clientErrors: run.clientErrors.length,
    loopDelayMs: run.answers.loopDelayMs,
    // Client requests not sent because that client had a second's worth unanswered (an overloaded machine).
    skipped: run.answers.skipped,
    clients: { healthy: healthy.length, failing: failing.length },
    // The bucket's bound, rate x (1 + w) in every window of w seconds: per replica at every moment,
    // and over both replicas for the keys whose master stayed up (0 or less: held).
    excessPerReplica: Math.max(worst(run.ids, 0), worst(run.ids, 1)),
    excessSharedHealthy: healthy.length === 0 ? null : worst(healthy, 2),
    excessSharedFailing: failing.length === 0 ? null : worst(failing, 2),
    // Over both replicas, from 1 s after the promotion to the end (`settledSeconds` long): 0 or
    // less when every such client stayed within rate x (1 + w) in every window of w seconds.
    excessSettledFailing: failing.length === 0 ? null : worstAfter(failing),
    excessSettledHealthy: healthy.length === 0 ? null : worstAfter(healthy),
    settledSeconds: Math.round((run.stoppedAt - settled) / 100) / 10,
    excessSharedAfterFailing: failing.length === 0 ? null : worstShared(failing),
    // Of the settled time, how long a replica said it paced the failed master's keys in memory.
    // Outages of those keys begun before then and never said to end: a switch the store never
    // recovered from (one begun later, by a stall, may still be on when the run stops).
    unendedFromSwitch: spans.filter(([from, , unended]) => unended === 'unended' && from < settled).length,
    pacedAfterSeconds: Math.round((run.stoppedAt - settled - shared.reduce((sum, [from, to]) => sum + to - from, 0)) / 100) / 10,
    boundFailing: boundFailing(rate, 2, Math.max(...outageFigures.perReplica.map(outage => outage.lasted))),
    // What a client got over the whole run, against rate x (1 + seconds) shared.
    sharedBound: Math.floor(rate * (1 + seconds)),
    mostAdmittedHealthy: Math.max(0, ...admittedTotals(healthy)),
    mostAdmittedFailing: Math.max(0, ...admittedTotals(failing)),
    watched,
    perSecond: { healthy: bins(watched.healthy), failing: bins(watched.failing) },
    // The most any client of each group was admitted in each second, both replicas.
    mostPerSecond: { healthy: mostPerSecond(byId, healthy, run.triggeredAt, run.started, run.stoppedAt), failing: mostPerSecond(byId, failing, run.triggeredAt, run.started, run.stoppedAt) },
    // What each replica decided without Redis's answer (fastify.pace.counts of the client pace).
    unanswered: run.unanswered,
    clientErrorSamples: [...new Set(run.clientErrors)].slice(0, 5),
    outages: outageFigures,
    guesses: guesses(run),
    keysLeft: run.left
  }
}
