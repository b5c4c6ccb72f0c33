// `npm run demo`: starts the example authorization server (examples/server.js) on a free port with
// the default in-memory store, plays a short script against it over real HTTP, and prints what the
// paces did. `npm run demo -- --server oidc-provider` plays it against oidc-provider mounted in
// Fastify (examples/oidc-provider.js), `--server gateway` against the gateway in front of
// oidc-provider started unpaced (examples/gateway.js); both need Node 22 or later. It takes about
// six seconds, most of it spent waiting for buckets to refill between phases. The legitimate
// client calls from 127.0.0.1, the guesser from 127.0.0.2 and the flood of made-up client ids from
// 127.0.0.3 (Linux and macOS route the whole 127.0.0.0/8 to the loopback interface).
//
// The columns count responses as the caller saw them, except "refunded", which is counted on the
// server: a request whose handler marked the exchange rejected while it held a unit of the
// per-client pace, which the plugin then gave back.

import { randomBytes } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { pathToFileURL } from 'node:url'

/** Registered in examples/client-auth.js: 5 token requests a second per client id, 50 per source. */
const CLIENT = { id: 'reporting', secret: 'reporting-secret', perSecond: 5 }

/**
 * The servers the script plays against, by name: the module and the export that builds one (the
 * paced app, how to start it on a free port, its paths, the names of its per-client token pace and
 * of its per-source failure budget, and how to close it). The two on oidc-provider need Node 22 or later, and are loaded only when asked.
 */
export const SERVERS = {
  example: ['./demo-example.js', 'example'],
  'oidc-provider': ['./demo-oidc.js', 'oidcProvider'],
  gateway: ['./demo-oidc.js', 'gateway']
}

/** Where the legitimate client calls from, where the guesser does, and the flood of made-up ids. */
const CLIENT_ADDRESS = '127.0.0.1'
const GUESSER_ADDRESS = '127.0.0.2'
const FLOOD_ADDRESS = '127.0.0.3'

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
export async function runDemo ({ log = console.log, server = 'example' } = {}) {
  const [module, builder] = SERVERS[server]
  const { app, start, token, authorize, query, clientPace: CLIENT_PACE, sourceFailures, close } = await (await import(module))[builder]()

  // Server-side bookkeeping. Every request the script sends carries a sequence number, and the
  // server reports back, once it answered that request, how many units it refunded for it: those of
  // 'accepted' paces, when the handler flagged the exchange rejected.
  const settlements = new Map()
  app.addHook('onResponse', (request, _reply, done) => {
    const ticket = request.pace
    const rejected = ticket.outcome === 'rejected'
    const id = request.headers['x-demo-request']
    settlements.get(id)(rejected ? ticket.held.filter(held => held.spend === 'accepted').length : 0)
    settlements.delete(id)
    done()
  })
  const base = await start()

  let sequence = 0
  /** One request over HTTP: its status, its body, and a promise of the units the server refunded for it. */
  const send = async (path, init = {}) => {
    const id = String(++sequence)
    const refunded = new Promise(resolve => settlements.set(id, resolve))
    const response = await exchange(`${base}${path}`, { ...init, headers: { ...init.headers, 'x-demo-request': id } })
    return { ...response, refunded }
  }
  const askToken = (from, headers, form) => send(token, {
    method: 'POST',
    from,
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
    body: new URLSearchParams({ grant_type: 'client_credentials', ...form }).toString()
  })
  const asLegitimateClient = () => askToken(CLIENT_ADDRESS, { authorization: basic(CLIENT.id, CLIENT.secret) }, {})
  const asStranger = (id, from = CLIENT_ADDRESS) => askToken(from, {}, { client_id: id, client_secret: randomBytes(8).toString('hex') })
  const askAuthorization = () => send(`${authorize}?${query}`)

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
      granted: count(status => status >= 200 && status < 400),
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
    log(`exchangepace demo: ${DESCRIPTIONS[server]} listens on ${base}`)
    if (server === 'example') await printPaces(log, send)
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

    await phase(`a guesser at ${GUESSER_ADDRESS} tries 30 secrets of ${CLIENT.id}`, async () => {
      const answers = []
      for (let i = 0; i < 30; i++) answers.push(await asStranger(CLIENT.id, GUESSER_ADDRESS))
      return answers
    })
    await phase(`${CLIENT.id}, from ${CLIENT_ADDRESS}, right after: 5 at once`, () =>
      Promise.all(Array.from({ length: 5 }, asLegitimateClient)))
    await sleep(REFILL_PAUSE_MS)

    await phase(`flood: 200 made-up client ids from ${FLOOD_ADDRESS}, at once`, () =>
      Promise.all(Array.from({ length: 200 }, () => asStranger(`app-${randomBytes(6).toString('hex')}`, FLOOD_ADDRESS))))
    await sleep(REFILL_PAUSE_MS)

    await phase(`burst: ${CLIENT.id} sends 12 at once`, () =>
      Promise.all(Array.from({ length: 12 }, asLegitimateClient)))

    await phase(`${authorize}: 15 at once from one address`, () =>
      Promise.all(Array.from({ length: 15 }, askAuthorization)))

    const rows = app.pace.names().map(name => ({ name, limit: app.pace.get(name).limit, window: app.pace.get(name).window, rows: app.pace.get(name).size }))
    printReport(log, phases, rows, CLIENT_PACE, sourceFailures)
    return { phases, rows }
  } finally {
    await close()
  }
}

const DESCRIPTIONS = {
  example: 'the example authorization server',
  'oidc-provider': 'oidc-provider mounted in Fastify',
  gateway: 'the gateway in front of oidc-provider'
}

/** The example server's paces, as its OpenAPI document states them. */
async function printPaces (log, send) {
  log('its paces, as its OpenAPI document states them:')
  const spec = JSON.parse((await send('/openapi.json')).body)
  for (const [path, operations] of Object.entries(spec.paths)) {
    const paced = Object.entries(operations).filter(([, operation]) => 'x-exchangepace' in operation)
    for (const [method, { 'x-exchangepace': statement }] of paced) {
      log(`  ${method.toUpperCase()} ${path}, ${statement.scope}:`)
      for (const p of statement.paces) log(`    ${rate(p)} per ${p.key} (${p.name}, spend ${p.spend})`)
    }
  }
}

function printReport (log, phases, rows, CLIENT_PACE, sourceFailures) {
  const columns = ['sent', 'granted', 'rejected', 'limited', 'refunded', 'client rows']
  const keys = ['sent', 'granted', 'rejected', 'limited', 'refunded', 'clientRows']
  const width = Math.max(...phases.map(p => p.label.length)) + 4
  log(`${'phase'.padEnd(width)}${columns.map(c => c.padStart(12)).join('')}`)
  phases.forEach((p, i) => {
    log(`${`${i + 1}. ${p.label}`.padEnd(width)}${keys.map(k => String(p[k]).padStart(12)).join('')}`)
  })
  log('')
  log('granted:  answered 2xx (or the authorization endpoint\'s redirect)')
  log('rejected: answered 4xx other than 429 (here: 401 invalid_client, the wrong secret)')
  log('limited:  answered 429 by a pace, with Retry-After; the handler did not run. The guesser\'s come from')
  log('          the failure budget: 5 failures an hour for one client id from one address;')
  log('          the flood\'s from the per-source ceiling: one address gets 50 token requests a second, whatever ids it names,')
  log('          and the per-source failure budget: 100 failures a day per address')
  log(`refunded: units of ${CLIENT_PACE} given back because the handler flagged the exchange rejected`)
  log(`client rows: live rows in ${CLIENT_PACE} after the phase (a row exists only for a key that spent)`)
  log('')
  log('live rows left in each pace:')
  const nameWidth = Math.max(...rows.map(r => r.name.length)) + 2
  for (const r of rows) log(`  ${r.name.padEnd(nameWidth)}${rate(r).padStart(12)}${String(r.rows).padStart(6)}`)
  const named = phases.reduce((sum, p) => sum + p.refunded, 0)
  log(`Only ${CLIENT.id} spent from ${CLIENT_PACE} in the last second; the ${named} refunded requests, which named`)
  log(`${CLIENT.id} without its secret, left no row there. The guesser's failures are kept, one row for its id and`)
  log('address, for as long as the budget takes to refill. The made-up ids name no client (isClient): they')
  log(`took nothing keyed by a client id, and their failures are one row for their address in ${sourceFailures}.`)
}

/** `5/s`, or `10/600s` for a pace of a limit per window. */
function rate ({ limit, window }) {
  return window === 1 ? `${limit}/s` : `${limit}/${window}s`
}

/**
 * One HTTP request from the loopback address `from` (node:http: fetch cannot choose its source
 * address): the status and the body. Redirects are not followed.
 */
function exchange (url, { method = 'GET', from, headers = {}, body }) {
  return new Promise((resolve, reject) => {
    const request = httpRequest(url, { method, headers, localAddress: from }, response => {
      let text = ''
      response.setEncoding('utf8')
      response.on('data', chunk => { text += chunk })
      response.on('end', () => resolve({ status: response.statusCode, body: text }))
    })
    request.on('error', reject)
    request.end(body)
  })
}

/** True when this file is the program node was started with (`node examples/demo.js`). */
function isMain (url) {
  return process.argv[1] !== undefined && pathToFileURL(realpathSync(process.argv[1])).href === url
}

/** The server `--server NAME` names in `argv` (default: the example), or an error naming the choices. */
export function serverOf (argv) {
  const at = argv.findIndex(arg => arg === '--server' || arg.startsWith('--server='))
  if (at === -1) return 'example'
  const name = argv[at].startsWith('--server=') ? argv[at].slice(9) : argv[at + 1]
  if (!Object.hasOwn(SERVERS, name)) throw new TypeError(`demo: --server must be one of ${Object.keys(SERVERS).join(', ')}, got ${name}`)
  return name
}

if (isMain(import.meta.url)) await runDemo({ server: serverOf(process.argv.slice(2)) })
