// The figures of one run of bench/failover-run.js: what failed, how far any client went beyond
// its bucket (per replica, and over both replicas where the pace stayed shared), the per-second
// admissions of a client on a healthy master and of one on the failed master, when each replica
// paced the failed master's keys in memory and when they were shared again, the guesses that
// reached the secret check, and the keys left without an expiry.

/**
 * The most units of `times` (ascending, ms) beyond what a bucket of `rate` per second allows: in
 * every window from one grant to a later one, the grants in it less rate x (1 + its length in s).
 * At most 0 when the bucket held, whatever the window (test/redis-fallback.test.ts's measure).
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
 * not refunded, at the memory's own time: every admitted request holds one), both replicas'
 * admissions by when the handler ran (Redis granted before, or the unit came from memory), and
 * both replicas' kept units together. The memory grants as the store sends the reservation to
 * Redis (the fallback is always warm), and a route's paces are sent at once, so those times are
 * when Redis was asked, a one-way trip before it decided; the handler runs once every pace of the
 * route has answered, up to `timeoutMs` later when another pace's key is on the failed master.
 */
function admissions (run) {
  const byId = new Map(run.ids.map(id => [id, [[], [], [], []]]))
  for (const [replica, units] of run.kept.entries()) {
    for (const { key, at, refunded } of units) {
      if (refunded || !byId.has(key)) continue
      byId.get(key)[replica].push(at)
      byId.get(key)[3].push(at)
    }
  }
  for (const { who, id, at, status } of run.answers) if (who === 'client' && status === 200) byId.get(id)[2].push(at)
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
  return {
    how: run.how,
    target: run.target,
    seconds: Math.round(seconds * 10) / 10,
    promotionAfterTrigger: Math.round((run.promotedAt - run.triggeredAt) / 10) / 100,
    statuses: tally(run.answers),
    failed: run.answers.filter(a => a.status === 'error' || a.status >= 500).length,
    clientErrors: run.clientErrors.length,
    loopDelayMs: run.answers.loopDelayMs,
    clients: { healthy: healthy.length, failing: failing.length },
    // The bucket's bound, rate x (1 + w) in every window of w seconds: per replica at every moment,
    // and over both replicas, by when Redis was asked for each unit kept: held (0 or less) for the
    // keys whose master stayed up, within boundFailing for those on the failed master.
    excessPerReplica: Math.max(worst(run.ids, 0), worst(run.ids, 1)),
    excessSharedHealthy: healthy.length === 0 ? null : worst(healthy, 3),
    excessSharedFailing: failing.length === 0 ? null : worst(failing, 3),
    boundFailing: boundFailing(rate, 2, Math.max(...outageFigures.perReplica.map(outage => outage.lasted))),
    // What a client got over the whole run, against rate x (1 + seconds) shared.
    sharedBound: Math.floor(rate * (1 + seconds)),
    mostAdmittedHealthy: Math.max(0, ...admittedTotals(healthy)),
    mostAdmittedFailing: Math.max(0, ...admittedTotals(failing)),
    watched,
    perSecond: { healthy: bins(watched.healthy), failing: bins(watched.failing) },
    outages: outageFigures,
    guesses: guesses(run),
    keysLeft: run.left
  }
}
