// The soak's route and traffic (bench/parts/soak/soak.js): the paces every replica declares, the clients and
// their secrets, the streams of requests, and the loop that sends one stream over loopback HTTP to
// a store's two replicas in turn, until its deadline.

import { Agent, request } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { TOKEN_PACES } from '../../../examples/server.js'
import { FORM } from '../../shared/apps.js'

/**
 * The README's recommended paces, the failure budget's window shortened to `budgetWindow` seconds
 * (bench/parts/soak/soak.js: 600 in the full run instead of 3600), so that the run holds several of its
 * horizons and rows held can be seen to level off (a replica's memory keeps a budget's row until
 * its latest grant is a window old). The other two paces are the README's; its per-source failure
 * budget is left out, as when the soak was first measured (its clients never fail).
 */
export function soakPaces (budgetWindow) {
  return THREE_PACES.map(pace => pace.spend === 'rejected' ? { ...pace, window: budgetWindow } : { ...pace })
}

/** The three paces the soak was measured with: the recommended ones before the per-source failure budget joined them. */
const THREE_PACES = TOKEN_PACES.filter(pace => !(pace.key === 'source' && pace.spend === 'rejected'))

/** The pace names (the plugin's defaults for a route with several paces) and their horizons in seconds. */
export function pacesOf (budgetWindow) {
  return {
    budget: { name: '/token#client+source:rejected', horizon: budgetWindow },
    client: { name: '/token#client', horizon: 1 },
    source: { name: '/token#source', horizon: 1 }
  }
}

/** The registered clients: client-00 to client-19, each with its own secret. */
export const CLIENTS = 20
const clientId = i => `client-${String(i).padStart(2, '0')}`
export function soakSecret (id) {
  return /^client-\d\d$/.test(id) && Number(id.slice(7)) < CLIENTS ? `${id}-secret` : undefined
}

const address = (net, n) => `10.${net}.${(n >> 8) & 255}.${n & 255}`

/**
 * The streams each store gets, per second in all, alternating between its two replicas; `next(i)`
 * is the i-th request of the stream: its declared id, secret and source address. `distinct`: every
 * request names a (client, source) pair of its own (or one not seen for longer than the budget's
 * window), as the bound on the budget's rows counts them.
 */
export const STREAMS = [
  { name: 'clients at their rate (10 ids at 5/s each)', perSecond: 50, next: i => ({ id: clientId(i % 10), secret: `${clientId(i % 10)}-secret`, source: address(0, i % 10) }) },
  { name: 'clients below their rate (10 ids at 2/s each)', perSecond: 20, next: i => ({ id: clientId(10 + i % 10), secret: `${clientId(10 + i % 10)}-secret`, source: address(0, 10 + i % 10) }) },
  { name: 'borrowed names: a wrong secret naming a client below its rate (refunded)', perSecond: 5, distinct: true, next: i => ({ id: clientId(10 + i % 10), secret: `stale-${i}`, source: address(2, i % 4096) }) },
  { name: 'flood of made-up client ids (refunded)', perSecond: 50, distinct: true, next: i => ({ id: `made-up-${i}`, secret: `guess-${i}`, source: address(1, i % 65536) }) },
  { name: 'a guesser: one address, client-00\'s secret', perSecond: 10, next: i => ({ id: clientId(0), secret: `guess-${i}`, source: '10.9.9.9' }) }
]

/** Requests in flight per store beyond which a stream skips a request (the driver fell behind) rather than queue it. */
const MOST_IN_FLIGHT = 256

/** Sends one request; resolves to its status code, or 'error'. Never rejects. */
function post (agent, port, { id, secret, source }) {
  const body = `grant_type=client_credentials&client_id=${encodeURIComponent(id)}&client_secret=${encodeURIComponent(secret)}`
  return new Promise(resolve => {
    const req = request({ agent, host: '127.0.0.1', port, method: 'POST', path: '/token', headers: { 'content-type': FORM, 'content-length': Buffer.byteLength(body), 'x-forwarded-for': source } }, res => {
      res.resume()
      res.on('end', () => resolve(res.statusCode))
      res.on('error', () => resolve('error'))
    })
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')))
    req.on('error', () => resolve('error'))
    req.end(body)
  })
}

/**
 * A store's traffic: one loop per stream, each request at its planned time (skipped, and counted,
 * when the store already has MOST_IN_FLIGHT requests waiting), alternating between `ports`, until
 * `untilMs` (performance.now). `tally(replica, stream, status, sentAtMs)` is told every answer.
 * Resolves once every loop has stopped and every request has been answered.
 */
export async function drive ({ ports, untilMs, tally }) {
  const agent = new Agent({ keepAlive: true, maxSockets: 32 })
  const state = { inFlight: 0, skipped: 0 }
  const pending = new Set()
  const loop = async (stream, s) => {
    const spacing = 1000 / stream.perSecond
    let at = performance.now() + spacing * (s / STREAMS.length)
    for (let i = 0; at < untilMs; i++, at += spacing) {
      const wait = at - performance.now()
      if (wait > 0) await sleep(wait)
      // Turns about, so that a client of a stream of 10 ids is not always sent to one replica.
      const replica = (i + Math.floor(i / 10)) % ports.length
      if (state.inFlight >= MOST_IN_FLIGHT) {
        state.skipped++
        continue
      }
      state.inFlight++
      const sentAt = performance.now()
      const answer = post(agent, ports[replica], stream.next(i)).then(status => {
        state.inFlight--
        pending.delete(answer)
        tally(replica, s, status, sentAt)
      })
      pending.add(answer)
    }
  }
  await Promise.all(STREAMS.map(loop))
  await Promise.all(pending)
  agent.destroy()
  return { skipped: state.skipped }
}
