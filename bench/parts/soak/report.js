// The soak's part of the report (bench/report.js): its summary row, its section of benchmarks.md
// and soak.svg, a plot of each sample's rows held, heap, RSS and event-loop delay per replica.

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

const STORES = { memory: 'in-process', redis: 'RedisStore' }
const COLORS = { memory: ['#1f6fb2', '#7fb2e0'], redis: ['#e07b00', '#f2b766'] }
const esc = text => String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;')
const sum = values => values.reduce((a, b) => a + b, 0)
const count = value => Math.round(value).toLocaleString('en-US')
const minutes = seconds => seconds < 60 ? `${f(seconds, seconds % 1 === 0 ? 0 : 1)} s` : seconds % 60 === 0 ? `${seconds / 60} min` : `${f(seconds / 60, 1)} min`

/** What the run lost, in words: every check that failed, or that none did. */
function losses (checks) {
  const found = []
  checks.replicas.forEach((r, i) => {
    const replica = `replica ${i + 1}`
    if (r.failed > 0) found.push(`${replica}: ${r.failed} requests failed (5xx or no answer)`)
    if (r.clientPace.kept !== r.clientPace.accepted) found.push(`${replica}: the client pace kept ${r.clientPace.kept} units for ${r.clientPace.accepted} accepted exchanges`)
    if (r.budgetPace.kept !== r.budgetPace.rejected) found.push(`${replica}: the failure budget kept ${r.budgetPace.kept} units for ${r.budgetPace.rejected} rejected exchanges`)
    if (r.budgetRowsOverBound > 0) found.push(`${replica}: ${r.budgetRowsOverBound} samples held more budget rows than the sweep's bound`)
    if (r.oneSecondRowsAtEnd > 0) found.push(`${replica}: ${r.oneSecondRowsAtEnd} one-second rows left a second after the traffic stopped`)
    if (r.refundsUnanswered !== 0 || (r.refunds?.failed ?? 0) > 0) found.push(`${replica}: ${r.refundsUnanswered} refund calls unanswered, ${r.refunds.failed} failed`)
  })
  const redis = checks.redis
  if (redis) {
    if (redis.noExpiry > 0) found.push(`${redis.noExpiry} Redis keys without an expiry`)
    if (redis.beyondWindow > 0) found.push(`${redis.beyondWindow} Redis keys expiring beyond their window`)
    if (redis.oneSecondKeysAtEnd > 0) found.push(`${redis.oneSecondKeysAtEnd} one-second keys left in Redis a second after the traffic stopped`)
    if (redis.otherKeys > 0) found.push(`${redis.otherKeys} keys under the prefix belonging to no pace`)
  }
  return found
}

const flatWords = checks => checks.flat ? 'flat' : '**not flat**'

export function soakSummaryRow (soak) {
  const parts = Object.entries(soak.stores).map(([store, s]) => {
    const lost = losses(s.checks)
    return `${STORES[store]}: ${flatWords(s.checks)}, ${lost.length === 0 ? 'nothing lost' : lost.join('; ')}`
  })
  return [`Soak: ${minutes(soak.settings.seconds)} of mixed traffic through two replicas per store`, 'rows, heap and RSS flat; no refund lost, no row kept past its window', parts.join('; '), soak.target.met ? 'met' : '**missed**']
}

function sampleTable (store, s) {
  // At most about a dozen rows: every sample is in the JSON and on the plot.
  const step = Math.ceil(s.samples.length / 12)
  const shown = s.samples.filter((_, i) => (i + 1) % step === 0 || i === 0)
  const rows = shown.map(sample => {
    const redis = sample.redis ? [count(sum(Object.values(sample.redis.keys))), f(sample.redis.usedMemoryMB)] : []
    return [minutes(sample.atS),
      sample.replicas.map(r => Object.values(r.rows).map(count).join(' / ')).join(' · '),
      sample.replicas.map(r => f(r.heapMB)).join(' · '), sample.replicas.map(r => f(r.rssMB)).join(' · '),
      sample.replicas.map(r => f(r.eld.p99Ms)).join(' · '),
      sample.replicas.map(r => `${count(r.counts['/token#client'].granted)} / ${count(r.counts['/token#client'].refunded)}`).join(' · '), ...redis]
  })
  const header = ['at', 'rows: budget / client / source, replica 1 · 2', 'heap MB', 'RSS MB', 'event-loop delay p99 ms', 'client pace: granted / refunded so far', ...(store === 'redis' ? ['Redis keys', 'Redis used_memory MB'] : [])]
  return mdTable(header, rows)
}

function checksTable (s) {
  const redis = s.checks.redis !== null
  return mdTable(['replica', 'responses', 'client pace: units kept / 200s', 'budget: units kept / 401s', 'budget rows over the bound (samples)', 'one-second rows at the end',
    ...(redis ? ['refund calls to Redis: sent / gave back / nothing owed / unanswered', 'outages logged'] : []), 'heap MB, middle → last third', 'RSS MB', 'rows'],
  s.checks.replicas.map((r, i) => [String(i + 1), Object.entries(r.statuses).map(([code, n]) => `${code}: ${count(n)}`).join(', '),
    `${count(r.clientPace.kept)} / ${count(r.clientPace.accepted)}`, `${count(r.budgetPace.kept)} / ${count(r.budgetPace.rejected)}`, String(r.budgetRowsOverBound), String(r.oneSecondRowsAtEnd),
    ...(redis ? [`${count(r.refunds.sent)} / ${count(r.refunds.gave)} / ${count(r.refunds.nothing)} / ${r.refundsUnanswered}`, count(r.outagesLogged)] : []),
    `${f(r.flat.heapMB.middle)} → ${f(r.flat.heapMB.last)}`, `${f(r.flat.rssMB.middle)} → ${f(r.flat.rssMB.last)}`, `${count(r.flat.rows.middle)} → ${count(r.flat.rows.last)}`]))
}

export function soakSection (soak, svgName) {
  const { settings } = soak
  const out = ['## 10. Soak', '',
    `${minutes(settings.seconds)} of mixed traffic over loopback HTTP through two replicas on the in-process store and two on a RedisStore, all four at once, each replica its own process serving the README's recommended token route (three paces), the failure budget's window shortened to ${settings.budgetWindow} s so that the run holds several of its horizons (a replica keeps a budget's row until its latest grant is a window old). Each store's two replicas share its traffic, request by request: ${settings.streams.map(s => `${s.name}, ${s.perSecond}/s`).join('; ')}. Sources are X-Forwarded-For addresses (trustProxy: 127.0.0.1). The Redis replicas share a redis-server of the part's own, stopped (SIGSTOP) for ${settings.outageSeconds} s every ${minutes(settings.outageEverySeconds)} (${soak.stalls.length} times), half a sample away from the samples; the in-process store has no outage to suffer. A sample every ${minutes(settings.sampleSeconds)}: per replica the rows each pace holds, heap after a full collection, RSS, the event loop's delay since the last sample (\`monitorEventLoopDelay\`, p99) and each pace's counts; on Redis the keys of each pace and their expiries. The machine was shared with other work throughout, which the event-loop delay shows more than anything else.`, '',
    `![Rows held, heap, RSS and event-loop delay per replica, each sample](${svgName})`, '']
  for (const [store, s] of Object.entries(soak.stores)) {
    const lost = losses(s.checks)
    out.push(`**${STORES[store]}**: ${flatWords(s.checks)}; ${lost.length === 0 ? 'nothing lost: each pace kept exactly one unit per exchange its spend counts (the client pace one per 200, the failure budget one per 401), so no refund went missing; no budget row above the sweep\'s bound, no one-second row left a second after the traffic stopped' + (s.checks.redis ? ', every refund call to Redis answered, no key without an expiry or expiring beyond its window' : '') : lost.join('; ')}. ${s.skipped > 0 ? `The driver fell behind and skipped ${count(s.skipped)} requests.` : 'The driver sent every planned request.'}`, '')
    out.push(checksTable(s), '')
    out.push(sampleTable(store, s), '')
  }
  const redis = soak.stores.redis
  if (redis) {
    const logged = redis.checks.replicas.map(r => r.outagesLogged)
    out.push(`The Redis replicas logged ${logged.map(count).join(' and ')} outages (a warning each) for the ${soak.stalls.length} times the server was stopped: any answer later than \`timeoutMs\` (${soak.settings.timeoutMs ?? 50} ms, the default of the build that ran) starts one, and on this machine, loaded by other work as the event-loop delay shows, many came later than that; each is paced in the replica's memory until a retry is answered (\`retryMs\`, 1 s). "Nothing owed" counts the refund calls Redis answered 0: the grant's key had expired (its bucket full again) or its run had ended before the refund arrived, which the refund rule gives nothing for; the units each pace kept match the exchanges all the same.`, '')
  }
  out.push('A failure budget\'s rows in a replica\'s memory go up and down between one window\'s and two windows\' worth of failing (client, source) pairs: the sweep, once a window, deletes the rows whose latest grant is a window old, and heap follows them. A RedisStore replica holds the same rows as an in-process one, since its memory paces every request first (docs/stores.md, "The fallback is always warm"); Redis itself holds a failure budget\'s key only until its bucket is full again, one unit (120 s) after a single failure.', '')
  out.push(`Flat means the median of the last third of the samples within 10% (plus 2 MB of heap, 10 MB of RSS, 100 rows) of the middle third's, per replica; the first third is the warm-up (a failure budget's rows fill for one window). The bound on a budget's rows is twice the (client, source) pairs the replica was sent within the last window, plus the registered clients and the guesser: the sweep runs when the table doubled or a horizon passed. Command: \`${soak.command}\`.`, '')
  return out.join('\n')
}

const PANELS = [
  { title: 'rows held in each replica\'s memory (all three paces); dashed: keys in Redis', value: r => sum(Object.values(r.rows)), redis: sample => sum(Object.values(sample.redis.keys)) },
  { title: 'heap after a full collection, MB', value: r => r.heapMB },
  { title: 'RSS, MB', value: r => r.rssMB },
  { title: 'event-loop delay p99 since the previous sample, ms', value: r => r.eld.p99Ms }
]

/** A step of 1, 2 or 5 times a power of ten, at least `raw`. */
function niceStep (raw) {
  const power = 10 ** Math.floor(Math.log10(raw))
  return [1, 2, 5, 10].map(k => k * power).find(step => step >= raw)
}

/** A panel's lines: one per replica of each store (and Redis's keys when the panel has them), each sample a point. */
function panelSeries (soak, spec) {
  const series = Object.entries(soak.stores).flatMap(([store, s]) => [0, 1].map(r => ({
    color: COLORS[store][r], label: `${STORES[store]}, replica ${r + 1}`, points: s.samples.map(sample => [sample.atS, spec.value(sample.replicas[r])])
  })))
  const redis = soak.stores.redis
  if (spec.redis && redis) series.push({ color: COLORS.redis[0], dashed: true, label: 'keys in Redis', points: redis.samples.map(sample => [sample.atS, spec.redis(sample)]) })
  return series
}

/** A panel: its lines, the outages as grey bands, on a shared time axis. */
function panel (soak, spec, top, geometry) {
  const { left, width, height, seconds } = geometry
  const series = panelSeries(soak, spec)
  const step = niceStep(Math.max(1e-9, ...series.flatMap(s => s.points.map(p => p[1]))) / 4)
  const yMax = step * Math.max(1, Math.ceil(Math.max(0, ...series.flatMap(s => s.points.map(p => p[1]))) / step))
  const x = t => left + (t / seconds) * width
  const y = v => top + height - (v / yMax) * height
  const parts = [`<text x="${left}" y="${top - 8}" font-weight="bold">${esc(spec.title)}</text>`]
  for (const stall of soak.stalls) parts.push(`<rect x="${x(stall.atS).toFixed(1)}" y="${top}" width="${Math.max(1, x(stall.atS + stall.seconds) - x(stall.atS)).toFixed(1)}" height="${height}" fill="#dddddd"><title>Redis stopped ${stall.seconds} s</title></rect>`)
  for (let v = 0; v <= yMax + step / 2; v += step) {
    parts.push(`<line x1="${left}" y1="${y(v).toFixed(1)}" x2="${left + width}" y2="${y(v).toFixed(1)}" stroke="#e4e4e4"/>`, `<text x="${left - 8}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${Number(v.toPrecision(6)).toLocaleString('en-US')}</text>`)
  }
  for (const s of series) {
    const d = s.points.map(([t, v], i) => `${i === 0 ? 'M' : 'L'}${x(t).toFixed(1)} ${y(v).toFixed(1)}`).join(' ')
    parts.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.6"${s.dashed ? ' stroke-dasharray="5 3"' : ''}><title>${esc(s.label)}</title></path>`)
  }
  parts.push(`<line x1="${left}" y1="${top + height}" x2="${left + width}" y2="${top + height}" stroke="#444"/>`)
  const tick = seconds >= 1800 ? 600 : seconds >= 240 ? 60 : Math.max(1, Math.round(seconds / 4))
  for (let t = 0; t <= seconds; t += tick) parts.push(`<text x="${x(t).toFixed(1)}" y="${top + height + 16}" text-anchor="middle">${t === 0 ? 0 : minutes(t)}</text>`)
  return parts
}

export function soakSvg (soak) {
  const width = 860
  const height = 150
  const gap = 58
  const geometry = { left: 56, width: width - 56 - 20, height, seconds: soak.settings.seconds }
  const total = 70 + PANELS.length * (height + gap)
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${total}" viewBox="0 0 ${width} ${total}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${total}" fill="#ffffff"/>`,
    `<text x="56" y="22" font-size="15" font-weight="bold">Soak: ${esc(minutes(soak.settings.seconds))} of mixed traffic, two replicas per store, a sample every ${esc(minutes(soak.settings.sampleSeconds))}</text>`
  ]
  let legendX = 56
  for (const [store, colors] of Object.entries(COLORS)) {
    if (!soak.stores[store]) continue
    colors.forEach((color, r) => {
      const label = `${STORES[store]}, replica ${r + 1}`
      parts.push(`<rect x="${legendX}" y="33" width="12" height="12" fill="${color}"/>`, `<text x="${legendX + 17}" y="43">${esc(label)}</text>`)
      legendX += 30 + label.length * 6.2
    })
  }
  parts.push(`<rect x="${legendX}" y="33" width="12" height="12" fill="#dddddd"/>`, `<text x="${legendX + 17}" y="43">Redis stopped</text>`)
  PANELS.forEach((spec, i) => parts.push(...panel(soak, spec, 80 + i * (height + gap), geometry)))
  parts.push('</svg>')
  return parts.join('\n') + '\n'
}
