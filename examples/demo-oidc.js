// The demo's servers on oidc-provider (examples/demo.js, --server oidc-provider and --server
// gateway): oidc-provider mounted in Fastify and paced (examples/oidc-provider.js), and the gateway
// in front of it unpaced (examples/gateway.js). oidc-provider needs Node 22 or later, so this file
// is loaded only when one of them is asked for.

import { createServer } from 'node:http'
import { CLIENTS } from './client-auth.js'
import { buildGateway } from './gateway.js'
import { buildServer as buildOidcServer, provider } from './oidc-provider.js'

/** The query of an authorization request oidc-provider answers with a redirect to sign-in. */
const AUTHORIZE = 'response_type=code&client_id=webapp&state=demo&redirect_uri=https%3A%2F%2Fwebapp.example%2Fcallback&scope=openid'

/** oidc-provider mounted in Fastify, its endpoints paced: as examples/demo-example.js's `example` gives it. */
export async function oidcProvider () {
  const port = await freePort()
  const issuer = `http://127.0.0.1:${port}/oidc`
  const app = await buildOidcServer({ issuer })
  const start = async () => {
    await app.listen({ host: '127.0.0.1', port })
    return issuer
  }
  return { app, start, token: '/token', authorize: '/auth', query: AUTHORIZE, clientPace: 'token', sourceFailures: 'source-failures', close: () => app.close() }
}

/**
 * The gateway in front of oidc-provider started unpaced, given the upstream's client ids
 * (`isClient`): as examples/demo-example.js's `example` gives it.
 */
export async function gateway () {
  const port = await freePort()
  const upstream = createServer(provider(`http://127.0.0.1:${port}`).callback())
  await new Promise(resolve => upstream.listen(port, '127.0.0.1', resolve))
  const app = await buildGateway({ upstream: `http://127.0.0.1:${port}`, isClient: id => CLIENTS.has(id) })
  const start = async () => {
    await app.listen({ host: '127.0.0.1', port: 0 })
    return `http://127.0.0.1:${app.server.address().port}`
  }
  const close = async () => {
    await app.close()
    await new Promise(resolve => upstream.close(resolve))
  }
  return { app, start, token: '/token', authorize: '/auth', query: AUTHORIZE, clientPace: 'token', sourceFailures: 'source-failures', close }
}

/** A free port on 127.0.0.1, for a server whose issuer URL is known before it is built. */
async function freePort () {
  const probe = createServer()
  await new Promise(resolve => probe.listen(0, '127.0.0.1', resolve))
  const { port } = probe.address()
  await new Promise(resolve => probe.close(resolve))
  return port
}
