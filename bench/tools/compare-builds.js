// Instructions per request of two builds of exchangepace, counted in the same run by part 7's
// method (bench/shared/callgrind.js): this checkout's and another's (a `git worktree` of an older commit,
// `npm ci` and `npm run build` done in it). Both servers are this checkout's bench/shared/apps.js and
// bench/shared/http-server.js; the other build's copy of them is written to `<DIR>/.bench-head/`, where
// `exchangepace` resolves to that build's dist/ and its own node_modules.
//
// The floor server (a no-op preHandler and the two quota headers in onSend) is counted beside
// them, and the three are counted in turn, the order alternating, `--rounds` times (default 2).
//
// Run: node bench/tools/compare-builds.js DIR [--rounds N] [--requests N] [--kind KIND]. KIND is the
// server of bench/shared/apps.js both builds are counted as (default exchangepace; `unpaced` counts a
// route the plugin does not pace). It prints a table; it writes nothing but the copy in DIR.

import { copyFileSync, mkdirSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { parseArgs } from 'node:util'
import { tokenBody } from '../shared/apps.js'
import { countInRounds, valgrindVersion } from '../shared/callgrind.js'
import { BENCH_DIR, fmt, log, median, table } from '../shared/common.js'

const { values, positionals } = parseArgs({ allowPositionals: true, options: { rounds: { type: 'string', default: '2' }, requests: { type: 'string', default: '10000' }, kind: { type: 'string', default: 'exchangepace' } } })
if (positionals.length !== 1 || valgrindVersion() === null) {
  log('usage: node bench/tools/compare-builds.js DIR [--rounds N] [--requests N] [--kind KIND] (needs valgrind)')
  process.exit(1)
}
const other = resolve(positionals[0])
const copy = join(other, '.bench-head')
mkdirSync(copy, { recursive: true })
for (const file of ['apps.js', 'http-server.js']) copyFileSync(join(BENCH_DIR, 'shared', file), join(copy, file))

const token = { url: '/token', body: tokenBody() }
const CONFIGS = [
  { ...token, kind: 'floor', name: 'floor (this checkout)', server: join(BENCH_DIR, 'shared', 'http-server.js') },
  { ...token, kind: values.kind, name: `${values.kind}, ${other}`, server: join(copy, 'http-server.js') },
  { ...token, kind: values.kind, name: `${values.kind}, this checkout`, server: join(BENCH_DIR, 'shared', 'http-server.js') }
]
const run = { warmup: 5000, requests: Number(values.requests) }
const counts = await countInRounds(CONFIGS, Number(values.rounds), run)
const floor = median(counts[0])
log(`\ninstructions per request, ${run.requests} counted per server, median of ${values.rounds} servers each`)
log(table(['build', 'instructions/req', 'each server', 'ratio to the floor'], CONFIGS.map((c, i) => [
  c.name, fmt(median(counts[i]), 0), counts[i].map(n => fmt(n, 0)).join(', '), `${fmt(median(counts[i]) / floor, 3)}x`
])))
