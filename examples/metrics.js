// exchangepace's counts as Prometheus metrics, with prom-client: what each pace granted, refused,
// refunded and found malformed, of those how many were decided without the shared store's answer,
// the warnings of paces in shadow or with warnAt, and the rows it holds, on GET /metrics.
//
//   exchangepace_decisions_total{pace="/token#client",decision="refused"} 12
//   exchangepace_decided_without_store_total{pace="/token#client",decision="granted"} 40
//   exchangepace_warnings_total{pace="/token#client",warning="near_limit"} 4
//   exchangepace_rows{pace="/token#client"} 3
//   exchangepace_store_unavailable 0          (with a shared store such as RedisStore)
//
// A grant decided without the store (an outage, a timeout) held the rate per replica, not in
// total: alert on its rate, which says how long and how widely a fault multiplied the pace.
//
// The only label is the pace's name, which the routes declare: a bounded set. Never label a metric
// with a key (a declared client id, an address): anyone can declare any id, and an unbounded label
// set takes Prometheus down. To see who is refused, read the plugin's log lines (logClientIds) or
// count in an onEvent hook of your own.
//
// Run it with `node examples/metrics.js`: the example authorization server (examples/server.js)
// with /metrics beside it.

import { realpathSync } from 'node:fs'
import { pathToFileURL } from 'node:url'
import { Counter, Gauge, Registry } from 'prom-client'
import { buildServer } from './server.js'

const DECISIONS = ['granted', 'refused', 'refunded', 'invalid']

/**
 * Adds GET /metrics to `app`, whose exchangepace is registered: the pace metrics in `register`
 * (default: a registry of its own), read from `app.pace` at each scrape. `store` is the plugin's
 * shared store, if any, for its availability.
 */
export function paceMetrics (app, { register = new Registry(), store } = {}) {
  register.registerMetric(new Counter({
    name: 'exchangepace_decisions_total',
    help: 'Decisions of each pace of this replica: units granted, requests refused (429), units refunded, malformed keys (400)',
    labelNames: ['pace', 'decision'],
    registers: [],
    collect () {
      // The plugin keeps the totals; the counter reports them as they are.
      this.reset()
      for (const pace of app.pace.names()) {
        const counts = app.pace.counts(pace)
        for (const decision of DECISIONS) this.inc({ pace, decision }, counts[decision])
      }
    }
  }))
  register.registerMetric(new Counter({
    name: 'exchangepace_decided_without_store_total',
    help: 'Of each pace\'s grants and refusals on this replica, those decided without the shared store\'s answer (in memory, or by whenUnavailable): the rate held per replica for them, not in total',
    labelNames: ['pace', 'decision'],
    registers: [],
    collect () {
      this.reset()
      for (const pace of app.pace.names()) {
        const counts = app.pace.counts(pace)
        this.inc({ pace, decision: 'granted' }, counts.grantedWithoutStore)
        this.inc({ pace, decision: 'refused' }, counts.refusedWithoutStore)
      }
    }
  }))
  register.registerMetric(new Counter({
    name: 'exchangepace_warnings_total',
    help: 'Warnings of each pace of this replica: requests a pace in shadow would have refused (shadow_refusal), keys that spent a pace\'s warnAt share (near_limit, once per key until full again)',
    labelNames: ['pace', 'warning'],
    registers: [],
    collect () {
      this.reset()
      for (const pace of app.pace.names()) {
        const counts = app.pace.counts(pace)
        this.inc({ pace, warning: 'shadow_refusal' }, counts.shadowRefused)
        this.inc({ pace, warning: 'near_limit' }, counts.nearLimit)
      }
    }
  }))
  register.registerMetric(new Gauge({
    name: 'exchangepace_rows',
    help: 'Keys each pace of this replica holds a row for: those that spent within its window',
    labelNames: ['pace'],
    registers: [],
    collect () {
      for (const pace of app.pace.names()) this.set({ pace }, app.pace.get(pace).size)
    }
  }))
  if (store !== undefined) {
    register.registerMetric(new Gauge({
      name: 'exchangepace_store_unavailable',
      help: '1 while the shared store is treated as unavailable (its fallback paces), 0 while it answers',
      registers: [],
      collect () { this.set(store.unavailable ? 1 : 0) }
    }))
  }
  app.get('/metrics', { schema: { hide: true } }, async (_request, reply) =>
    reply.type(register.contentType).send(await register.metrics()))
  return register
}

/** True when this file is the program node was started with (`node examples/metrics.js`). */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

if (isMain(import.meta.url)) {
  const { PORT: port = '3000' } = process.env
  const app = buildServer({ logger: true })
  paceMetrics(app)
  await app.listen({ host: '127.0.0.1', port: Number(port) })
  console.log(`\nexample authorization server with metrics on http://127.0.0.1:${app.server.address().port}/metrics\n`)
}
