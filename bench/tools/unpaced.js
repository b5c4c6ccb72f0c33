// What exchangepace costs a route it does not pace, in instructions per request counted by part 7's
// method (bench/shared/callgrind.js): the token route with no plugin (bare), with exchangepace registered
// and the route unpaced (unpaced: the request's ticket slot is initialised, nothing else), and the
// same with the handler reading `request.pace` on every request (unpaced-read: an inert ticket made
// on the first read). Each is counted `--rounds` times (default 2) in fresh servers, the order
// alternating; the medians are compared with bare's.
//
// Run: node bench/tools/unpaced.js [--rounds N] [--requests N] (needs valgrind). It prints a table and
// writes nothing. The figures of 2026-12-06 are in docs/reference.md (`request.pace`).

import { parseArgs } from 'node:util'
import { tokenBody } from '../shared/apps.js'
import { countInRounds, valgrindVersion } from '../shared/callgrind.js'
import { fmt, log, median, table } from '../shared/common.js'

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '2' }, requests: { type: 'string', default: '10000' } } })
if (valgrindVersion() === null) {
  log('usage: node bench/tools/unpaced.js [--rounds N] [--requests N] (needs valgrind)')
  process.exit(1)
}

const CONFIGS = ['bare', 'unpaced', 'unpaced-read'].map(kind => ({ kind, name: kind, url: '/token', body: tokenBody() }))
const run = { warmup: 5000, requests: Number(values.requests) }
const counts = await countInRounds(CONFIGS, Number(values.rounds), run)
const bare = median(counts[0])
log(`\ninstructions per request, ${run.requests} counted per server, median of ${values.rounds} servers each`)
log(table(['server', 'instructions/req', 'each server', 'over bare', 'ratio to bare'], CONFIGS.map((c, i) => [
  c.name, fmt(median(counts[i]), 0), counts[i].map(n => fmt(n, 0)).join(', '), fmt(median(counts[i]) - bare, 0), `${fmt(median(counts[i]) / bare, 3)}x`
])))
