import t from 'tap'
import { runDemo, serverOf } from '../examples/demo.js'
import { needsNode } from './helpers/node.js'

/**
 * `npm run demo -- --server oidc-provider` and `--server gateway`: the demo's script played over
 * real HTTP, on the real clock, against oidc-provider mounted in Fastify and against the gateway in
 * front of oidc-provider unpaced. Each assertion is a claim the printed table makes; where a phase
 * races the refill, the bound allows the units that refilled while it ran, and no more.
 */

interface Phase { label: string, sent: number, granted: number, rejected: number, limited: number, refunded: number, clientRows: number, ms: number }

const most = (perSecond: number, ms: number) => perSecond + Math.floor(ms * perSecond / 1000)

t.test('--server names the server, one of three', async t => {
  t.equal(serverOf([]), 'example')
  t.equal(serverOf(['--server', 'gateway']), 'gateway')
  t.equal(serverOf(['--server=oidc-provider']), 'oidc-provider')
  t.throws(() => serverOf(['--server', 'keycloak']), new TypeError('demo: --server must be one of example, oidc-provider, gateway, got keycloak'))
})

for (const server of ['oidc-provider', 'gateway']) {
  t.test(`the script against ${server}: the client keeps its rate, the guesser and the flood are refunded and leave no row`, { skip: needsNode(22) }, async t => {
    const lines: string[] = []
    const { phases, rows } = await runDemo({ server, log: (line: string) => lines.push(line) }) as { phases: Phase[], rows: Array<{ name: string, rows: number }> }
    const [atRate, stranger, afterStranger, flood, burst, authorize] = phases
    t.match(atRate, { sent: 5, granted: 5, limited: 0, rejected: 0 })
    t.match(stranger, { sent: 30, granted: 0, rejected: 5, limited: 25, refunded: 5, clientRows: 0 }, 'oidc-provider\'s 401s refunded to the client named')
    t.match(afterStranger, { sent: 5, granted: 5, limited: 0 })
    t.equal(flood.refunded, flood.rejected)
    t.ok(flood.rejected >= 50 && flood.rejected <= most(50, flood.ms))
    t.equal(flood.clientRows, 0)
    t.ok(burst.granted >= 5 && burst.granted <= most(5, burst.ms))
    t.equal(burst.granted + burst.limited, 12)
    t.ok(authorize.granted >= 10 && authorize.granted <= most(10, authorize.ms), 'oidc-provider\'s redirects to sign-in, at the address\'s pace')
    t.equal(authorize.granted + authorize.limited, 15)
    t.equal(rows.find(r => r.name === 'token')!.rows, 1)
    t.ok(lines[0].startsWith(`exchangepace demo: ${server === 'gateway' ? 'the gateway in front of oidc-provider' : 'oidc-provider mounted in Fastify'} listens on http://127.0.0.1:`))
  })
}
