// Part 5's key flood and made-up ids through a gateway (bench/parts/flood/flood-gateway.js): their
// part of part 5's section of docs/benchmarks.md (bench/report.js).

import { fmt as f } from '../../shared/common.js'
import { mdTable } from '../../shared/md-table.js'

const count = value => value.toLocaleString('en-US')

/** What the key flood did to @fastify/rate-limit's gateway, when its LRU let the victim over its rate. */
function evictedText (keyFlood) {
  const evicted = keyFlood.find(r => r.library === '@fastify/rate-limit')
  return evicted.admittedOverRate > 0 ? ` Strangers from more addresses than that push the victim's address out of its LRU, and the victim starts a fresh window each tick: ${evicted.victimPerTick.join(', ')} admitted.` : ''
}

/** What exchangepace's gateway, given the upstream's client ids, held by pace after the key flood and the made-up ids. */
function isClientText (through) {
  const flood = through.keyFlood.find(r => r.library === 'exchangepace').rowsByPace
  const madeUp = through.madeUp.filter(r => r.name === 'exchangepace, the gateway').map(r => r.rowsByPace)
  const most = name => count(Math.max(...madeUp.map(rows => rows[name])))
  return `Given the upstream's client ids, the gateway keeps no row for a made-up id in a pace keyed by the client id: at the end of the key flood the pair's failure budget holds ${count(flood.failures)} rows and the client pace ${count(flood.token)} (the victim's); each address that failed holds a row in the per-source failure budget (${count(flood['source-failures'])}) and each that sent one in the source ceiling (${count(flood.ceiling)}, the victim's among them): the key flood's strangers each come from a /64 of their own. After the made-up ids from ${through.settings.sources} sources, at most ${most('failures')} rows in the pair's budget, ${most('source-failures')} in the per-source failure budget and ${most('ceiling')} in the ceiling. Without \`isClient\` each made-up id that failed would also keep a row in the pair's budget for its refill (12 minutes at 5 an hour; test/examples/gateway.test.ts).`
}

/** Part 5's key flood and made-up ids through a gateway in front of oidc-provider (bench/parts/flood/flood-gateway.js). */
export function floodGatewaySection (through) {
  const out = ['### Through a gateway in front of oidc-provider', '']
  if (through.skipped !== null) return [...out, `Skipped in the latest run: ${through.skipped}.`, ''].join('\n')
  const { ticks, strangersPerTick, sources, idsPerSource } = through.settings
  const [first] = through.keyFlood
  out.push(`The key flood and the made-up ids above, sent to a Fastify gateway with @fastify/reply-from in front of oidc-provider started unpaced, over real HTTP from the gateway to it, the clocks simulated; the victim and real client is \`billing\` (\`client_secret_post\`), and oidc-provider answers every made-up id 401 \`invalid_client\`. Part 8's two gateways: **exchangepace, the gateway** is examples/gateway.js, the README's four token paces (5/s per client id; 100 failures a day per address), given the upstream's client ids (\`isClient\`, the clients oidc-provider serves) as the recommended set-up is, the outcome read from oidc-provider's answer; **@fastify/rate-limit, the gateway** limits the token route as its README shows a route's limit, \`config: { rateLimit: { max: 5, timeWindow: '1 minute' } }\`, keyed by \`request.ip\`, its store the default LRU of 5000. Every ${through.tickMs} ms, ${count(strangersPerTick)} strangers name fresh random client ids with wrong secrets, each from a /64 of its own in one /48 (what one attacker holds: an address-keyed limiter sees as many addresses), then the victim's requests fire from its own address until one is refused; ${ticks} ticks, the victim's requests spanning ${first.span} s. A limiter that keeps the victim's rate, \`limit\` a \`window\`, admits at most limit x (1 + span / window). Rows: what the limiter holds at the end (exchangepace: over all its paces). The heap's growth is the process's, which holds the gateway and oidc-provider both, after a full GC, from a second after the previous gateway closed to the end of the flood, the gateway still open.`, '',
    mdTable(['gateway', "victim's rate", 'victim admitted', 'allowed', 'admitted over rate', 'per tick', 'rows at the end', 'heap growth'], through.keyFlood.map(r => [
      r.name, `${r.rate.limit} per ${r.rate.window} s per ${r.rate.per}`, r.victimAdmitted, f(r.victimAllowed, 2), f(r.admittedOverRate, 2), r.victimPerTick.join(', '), count(r.rows), `${f(r.heapGrowthMB, 2)} MB`
    ])), '',
    `Made-up ids from many sources, as above, the heap measured the same way: ${sources} sources (IPv4 addresses; then IPv6 /64s of one /48) send ${idsPerSource} made-up ids each, in turn, one request a millisecond, while the real client calls every 200 ms from its own address.`, '',
    mdTable(['gateway', 'sources', 'records', 'heap growth', 'RSS', "real client's 200s"], through.madeUp.map(r => [
      r.name, r.family, count(r.rows), `${f(r.heapGrowthMB, 2)} MB`, `${f(r.rssMB, 0)} MB`, `${r.client.ok} of ${r.client.calls}`
    ])), '',
    isClientText(through) + ' @fastify/rate-limit keys by address alone and holds 5,000 addresses at most.' + evictedText(through.keyFlood), '')
  return out.join('\n')
}
