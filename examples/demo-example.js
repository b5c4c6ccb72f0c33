// The demo's own server (examples/demo.js): the example authorization server, examples/server.js,
// with the default in-memory store.

import { buildServer } from './server.js'

/**
 * The paced app, how to start it on a free port (its base URL), its token and authorization paths
 * and an authorization request's query, the names of its per-client token pace and of its per-source
 * failure budget, and how to close it.
 */
export async function example () {
  const app = buildServer()
  const start = async () => {
    await app.listen({ host: '127.0.0.1', port: 0 })
    return `http://127.0.0.1:${app.server.address().port}`
  }
  return { app, start, token: '/token', authorize: '/authorize', query: 'response_type=code&client_id=webapp&state=demo', clientPace: '/token#client', sourceFailures: '/token#source:rejected', close: () => app.close() }
}
