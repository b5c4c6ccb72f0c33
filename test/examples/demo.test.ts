import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { runDemo, serverOf } from '../../examples/demo.js'
import { needsNode } from '../helpers/node.js'

/**
 * `npm run demo`, played once in-process over real HTTP on the real clock. Each assertion is a
 * claim the printed table makes. Where a phase races the refill (a burst at once), the bound
 * allows the units that refilled while the phase ran, and no more.
 */

interface Phase {
  label: string
  sent: number
  granted: number
  rejected: number
  limited: number
  refunded: number
  clientRows: number
  ms: number
}

/** `node examples/demo.js`, what `npm run demo` runs: its exit code and what it printed. */
function runProgram (): Promise<{ code: number | null, stdout: string }> {
  // Without tap's coverage hooks: the child loads examples/demo.js as node does, not through the tests'
  // hooks in this process, and its coverage of the file would stand in for this process's (which runs the
  // other servers' paths too) instead of adding to it.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'NODE_OPTIONS' && name !== 'NODE_V8_COVERAGE' && !name.startsWith('_TAPJS_')))
  const child = spawn(process.execPath, [fileURLToPath(new URL('../../examples/demo.js', import.meta.url))], { stdio: ['ignore', 'pipe', 'inherit'], env })
  let stdout = ''
  child.stdout.on('data', (chunk: Buffer) => { stdout += String(chunk) })
  return new Promise(resolve => child.on('close', code => resolve({ code, stdout })))
}

// The program runs beside the in-process run (its own process, so its own paces); both take the
// same few seconds.
const program = runProgram()
const lines: string[] = []
const { phases, rows } = await runDemo({ log: (line: string) => lines.push(line) }) as {
  phases: Phase[]
  rows: Array<{ name: string, limit: number, window: number, rows: number }>
}
const [atRate, stranger, afterStranger, flood, burst, authorize] = phases

/** Most units a bucket of `perSecond` can grant in a phase that lasted `ms`: full, plus the refill. */
const most = (perSecond: number, ms: number) => perSecond + Math.floor(ms * perSecond / 1000)

t.test('the legitimate client gets its rate', async t => {
  t.match(atRate, { sent: 5, granted: 5, limited: 0, rejected: 0 }, 'five requests 200 ms apart are all granted')
  t.equal(burst.sent, 12)
  t.ok(burst.granted >= 5, 'a burst from a full bucket gets at least one second of the rate')
  t.ok(burst.granted <= most(5, burst.ms), 'and no more than the rate allows')
  t.equal(burst.granted + burst.limited, 12, 'the rest is answered 429')
  t.equal(burst.refunded, 0)
})

t.test('a guesser naming the client gets five wrong secrets, and does not reduce the client\'s pace', async t => {
  t.match(stranger, { sent: 30, granted: 0, rejected: 5, limited: 25, refunded: 5 }, 'five failures, then 429 before any secret is checked; every failure refunded to the client')
  t.equal(stranger.clientRows, 0, 'and leaves no row in the client\'s pace')
  t.match(afterStranger, { sent: 5, granted: 5, limited: 0 }, 'the client, from its own address, still gets its full second right after')
})

t.test('a flood of made-up client ids leaves no rows keyed by a client id', async t => {
  t.equal(flood.sent, 200)
  t.equal(flood.granted, 0)
  t.equal(flood.refunded, 0, 'a made-up id takes nothing from the client pace: nothing to refund')
  t.equal(flood.rejected + flood.limited, 200, 'the others were stopped by the per-source ceiling or failure budget')
  t.ok(flood.rejected >= 50, 'the per-source ceiling let its one second through')
  t.ok(flood.rejected <= Math.min(100, most(50, flood.ms)), 'and no more than its rate, nor than the source\'s 100 failures a day')
  t.ok(flood.clientRows <= 1, 'no made-up id keeps a row: the client pace holds at most the real client\'s (full, not yet swept)')
})

t.test('the authorization endpoint spends per source', async t => {
  t.equal(authorize.sent, 15)
  t.ok(authorize.granted >= 10 && authorize.granted <= most(10, authorize.ms))
  t.equal(authorize.granted + authorize.limited, 15)
})

t.test('the rows left are those of the keys that spent', async t => {
  t.same(rows, [
    { name: '/token#device_code', limit: 1, window: 5, rows: 0 },
    { name: '/token#client+source:rejected', limit: 5, window: 3600, rows: 1 },
    { name: '/token#source:rejected', limit: 100, window: 86400, rows: 2 },
    { name: '/token#client', limit: 5, window: 1, rows: 1 },
    { name: '/token#source', limit: 50, window: 1, rows: 1 },
    { name: '/authorize', limit: 10, window: 1, rows: 1 },
    ...['/par', '/introspect', '/revoke'].flatMap(route => [`${route}#client+source:rejected`, `${route}#source:rejected`, `${route}#client`, `${route}#source`]).map(name => ({ name, rows: 0 })),
    { name: '/device_authorization#client+source:rejected', rows: 0 },
    { name: '/device_authorization#source', rows: 0 },
    { name: '/device', rows: 0 }
  ].map(row => ({ ...rows.find(r => r.name === row.name), ...row })), 'the pair budget keeps the guesser\'s row only; the source budget one row per failing address, the guesser\'s and the flood\'s')
})

t.test('the printed table shows every phase with its counts', async t => {
  const header = lines.find(line => line.startsWith('phase'))
  t.ok(header, 'a header line')
  t.match(header, /sent\s+granted\s+rejected\s+limited\s+refunded\s+client rows/)
  for (const [index, phase] of phases.entries()) {
    const line = lines.find(line => line.startsWith(`${index + 1}. ${phase.label}`))
    t.ok(line, `a line for phase ${index + 1}`)
    const counts = [phase.sent, phase.granted, phase.rejected, phase.limited, phase.refunded, phase.clientRows]
    t.match(line, new RegExp(`${counts.join('\\s+')}$`), `phase ${index + 1} prints its counts`)
  }
  t.ok(lines.some(line => /^ {2}\/token#client\s+5\/s\s+1$/.test(line)), 'the live rows of each pace')
})

t.test('npm run demo prints the same table and exits 0', async t => {
  const { code, stdout } = await program
  t.equal(code, 0)
  const printed = stdout.split('\n')
  t.ok(printed.some(line => /^phase\s+sent\s+granted\s+rejected\s+limited\s+refunded\s+client rows$/.test(line)), 'the header')
  for (const [index, phase] of phases.entries()) {
    t.ok(printed.some(line => line.startsWith(`${index + 1}. ${phase.label}`)), `phase ${index + 1}`)
  }
  t.ok(printed.some(line => line === 'live rows left in each pace:'))
})

// `npm run demo -- --server oidc-provider` and `--server gateway`: the same script, in this process
// (so that its coverage is this file's), against oidc-provider mounted in Fastify and against the
// gateway in front of oidc-provider unpaced. They run after the example's, one at a time.

t.test('--server names one of three servers; another is refused with the choices', async t => {
  t.equal(serverOf([]), 'example')
  t.equal(serverOf(['--server', 'gateway']), 'gateway')
  t.equal(serverOf(['--server=oidc-provider']), 'oidc-provider')
  t.throws(() => serverOf(['--server', 'keycloak']), new TypeError('demo: --server must be one of example, oidc-provider, gateway, got keycloak'))
})

for (const server of ['oidc-provider', 'gateway']) {
  t.test(`the script against ${server}: the client keeps its rate, the guesser is refunded, the flood takes nothing keyed by a client id`, { skip: needsNode(22) }, async t => {
    await program
    const printed: string[] = []
    const { phases, rows } = await runDemo({ server, log: (line: string) => printed.push(line) }) as { phases: Phase[], rows: Array<{ name: string, rows: number }> }
    const [atRate, stranger, afterStranger, flood, burst, authorize] = phases
    t.match(atRate, { sent: 5, granted: 5, limited: 0, rejected: 0 })
    t.match(stranger, { sent: 30, granted: 0, rejected: 5, limited: 25, refunded: 5, clientRows: 0 }, 'oidc-provider\'s 401s refunded to the client named')
    t.match(afterStranger, { sent: 5, granted: 5, limited: 0 })
    t.equal(flood.refunded, 0, 'a made-up id takes nothing from the client pace (isClient): nothing to refund')
    t.ok(flood.rejected >= 50 && flood.rejected <= most(50, flood.ms))
    t.ok(flood.clientRows <= 1, 'no made-up id keeps a row: the client pace holds at most the real client\'s (full, not yet swept)')
    t.same(['failures', 'source-failures'].map(name => rows.find(r => r.name === name)!.rows), [1, 2], 'the pair budget keeps the guesser\'s row only; the source budget one row per failing address, the guesser\'s and the flood\'s')
    t.ok(printed.some(line => line.endsWith('their failures are one row for their address in source-failures.')))
    t.ok(burst.granted >= 5 && burst.granted <= most(5, burst.ms))
    t.equal(burst.granted + burst.limited, 12)
    t.ok(authorize.granted >= 10 && authorize.granted <= most(10, authorize.ms), 'oidc-provider\'s redirects to sign-in, at the address\'s pace')
    t.equal(authorize.granted + authorize.limited, 15)
    t.equal(rows.find(r => r.name === 'token')!.rows, 1)
    t.ok(printed[0].startsWith(`exchangepace demo: ${server === 'gateway' ? 'the gateway in front of oidc-provider' : 'oidc-provider mounted in Fastify'} listens on http://127.0.0.1:`))
  })
}
