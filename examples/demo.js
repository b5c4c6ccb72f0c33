// `npm run demo`: starts the example authorization server (examples/server.js) on a free port with
// the default in-memory store, plays a short script against it over real HTTP, and prints what the
// paces did. It takes about six seconds, most of it spent waiting for buckets to refill between
// phases.
//
// The columns count responses as the caller saw them, except "refunded", which is counted on the
// server: a request whose handler marked the exchange rejected while it held a unit of the
// per-client pace, which the plugin then gave back.

import { randomBytes } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'
import { buildServer } from './server.js'

/** Registered in examples/server.js: 5 token requests a second per client id, 50 per source. */
const CLIENT = { id: 'reporting', secret: 'reporting-secret', perSecond: 5 }
const CLIENT_PACE = '/token#client'

/** Longer than one second, so that every bucket the previous phase used is full again. */
const REFILL_PAUSE_MS = 1100

function basic (id, secret) {
  const encode = (text) => encodeURIComponent(text).replaceAll('%20', '+')
  return `Basic ${Buffer.from(`${encode(id)}:${encode(secret)}`).toString('base64')}`
}

/**
 * Plays the script and returns what each phase saw: `{ phases, rows }`. `log` receives the printed
 * lines (default: console.log). The server is closed before this resolves.
 */
export async function runDemo ({ log = console.log } = {}) {
  const app = buildServer()

  // Server-side bookkeeping. Every request the script sends carries a sequence number, and the
  // server reports back, once it answered that request, how many units it refunded for it: those of
  // 'accepted' paces, when the handler flagged the exchange rejected.
  const settlements = new Map()
  app.addHook('onResponse', (request, _reply, done) => {
    const ticket = request.pace
    const rejected = ticket !== null && ticket.outcome === 'rejected'
    const id = request.headers['x-demo-request']
    settlements.get(id)(rejected ? ticket.held.filter(held => held.spend === 'accepted').length : 0)
    settlements.delete(id)
    done()
  })

  await app.listen({ host: '127.0.0.1', port: 0 })
  const base = `http://127.0.0.1:${app.server.address().port}`

  let sequence = 0
  /** One request over HTTP: its status, its body, and a promise of the units the server refunded for it. */
  const send = async (path, init = {}) => {
    const id = String(++sequence)
    const refunded = new Promise(resolve => settlements.set(id, resolve))
    const response = await fetch(`${base}${path}`, { ...init, redirect: 'manual', headers: { ...init.headers, 'x-demo-request': id } })
    return { status: response.status, body: await response.text(), refunded }
  }
  const askToken = (headers, form) => send('/token', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ grant_type: 'client_credentials', ...form })
  })
  const asLegitimateClient = () => askToken({ authorization: basic(CLIENT.id, CLIENT.secret) }, {})
  const asStranger = (id) => askToken({}, { client_id: id, client_secret: randomBytes(8).toString('hex') })
  const askAuthorization = () => send('/authorize?response_type=code&client_id=webapp&state=demo')

  const phases = []
  /** Runs `play`, which returns the answers it got, and records the phase once the server settled them. */
  const phase = async (label, play) => {
    const started = performance.now()
    const answers = await play()
    const ms = performance.now() - started
    const refunds = await Promise.all(answers.map(answer => answer.refunded))
    // The plugin's own onResponse hook (settlement) runs right after the one above: let it finish.
    await new Promise(resolve => setImmediate(resolve))
    const count = (test) => answers.filter(({ status }) => test(status)).length
    const result = {
      label,
      sent: answers.length,
      granted: count(status => (status >= 200 && status < 300) || status === 302),
      rejected: count(status => status >= 400 && status !== 429),
      limited: count(status => status === 429),
      refunded: refunds.reduce((sum, units) => sum + units, 0),
      clientRows: app.pace.get(CLIENT_PACE).size,
      ms
    }
    phases.push(result)
    return result
  }

  try {
    log(`exchangepace demo: the example authorization server listens on ${base}`)
    log('its paces, as its OpenAPI document states them:')
    const spec = JSON.parse((await send('/openapi.json')).body)
    for (const [path, operations] of Object.entries(spec.paths)) {
      const paced = Object.entries(operations).filter(([, operation]) => 'x-exchangepace' in operation)
      for (const [method, { 'x-exchangepace': statement }] of paced) {
        const stated = statement.paces.map(p => `${p.perSecond}/s per ${p.key} (${p.name}, spend ${p.spend})`).join('; ')
        log(`  ${method.toUpperCase()} ${path}: ${stated}, ${statement.scope}`)
      }
    }
    log('')

    await phase(`${CLIENT.id} at its rate: 5 requests, 200 ms apart`, async () => {
      const answers = [await asLegitimateClient()]
      while (answers.length < 5) {
        await sleep(1000 / CLIENT.perSecond)
        answers.push(await asLegitimateClient())
      }
      return answers
    })
    await sleep(REFILL_PAUSE_MS)

    await phase(`a stranger names ${CLIENT.id}, wrong secret, 30 times`, async () => {
      const answers = []
      for (let i = 0; i < 30; i++) answers.push(await asStranger(CLIENT.id))
      return answers
    })
    await phase(`${CLIENT.id} right after: 5 at once`, () =>
      Promise.all(Array.from({ length: 5 }, asLegitimateClient)))
    await sleep(REFILL_PAUSE_MS)

    await phase('flood: 200 random client ids, wrong secrets, at once', () =>
      Promise.all(Array.from({ length: 200 }, () => asStranger(`app-${randomBytes(6).toString('hex')}`))))
    await sleep(REFILL_PAUSE_MS)

    await phase(`burst: ${CLIENT.id} sends 12 at once`, () =>
      Promise.all(Array.from({ length: 12 }, asLegitimateClient)))

    await phase('/authorize: 15 at once from one address', () =>
      Promise.all(Array.from({ length: 15 }, askAuthorization)))

    const rows = app.pace.names().map(name => ({ name, perSecond: app.pace.get(name).perSecond, rows: app.pace.get(name).size }))
    printReport(log, phases, rows)
    return { phases, rows }
  } finally {
    await app.close()
  }
}

function printReport (log, phases, rows) {
  const columns = ['sent', 'granted', 'rejected', 'limited', 'refunded', 'client rows']
  const keys = ['sent', 'granted', 'rejected', 'limited', 'refunded', 'clientRows']
  const width = Math.max(...phases.map(p => p.label.length)) + 4
  log(`${'phase'.padEnd(width)}${columns.map(c => c.padStart(12)).join('')}`)
  phases.forEach((p, i) => {
    log(`${`${i + 1}. ${p.label}`.padEnd(width)}${keys.map(k => String(p[k]).padStart(12)).join('')}`)
  })
  log('')
  log('granted:  answered 2xx (or /authorize\'s 302 with a code)')
  log('rejected: answered 4xx other than 429 (here: 401 invalid_client, the wrong secret)')
  log('limited:  answered 429 by a pace, with Retry-After; the handler did not run. In the flood they')
  log('          come from /token#source: one address gets 50 token requests a second, whatever ids it names')
  log(`refunded: units of ${CLIENT_PACE} given back because the handler flagged the exchange rejected`)
  log(`client rows: live rows in ${CLIENT_PACE} after the phase (a row exists only for a key that spent)`)
  log('')
  log('live rows left in each pace:')
  const nameWidth = Math.max(...rows.map(r => r.name.length)) + 2
  for (const r of rows) log(`  ${r.name.padEnd(nameWidth)}${`${r.perSecond}/s`.padStart(6)}${String(r.rows).padStart(6)}`)
  const named = phases.reduce((sum, p) => sum + p.refunded, 0)
  log(`Only ${CLIENT.id} spent from ${CLIENT_PACE} in the last second; the ${named} refunded requests, which named`)
  log('client ids without their secrets, left no row behind.')
}

/** True when this file is the program node was started with (`node examples/demo.js`). */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

if (isMain(import.meta.url)) await runDemo()
