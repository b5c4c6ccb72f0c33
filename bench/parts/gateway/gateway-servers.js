// The servers of the gateway part (bench/parts/gateway/gateway.js), in a process of their own so that the client
// that times them does not share their event loop: an upstream token endpoint that answers at once
// (a stand-in for the authorization server, whose own time is not the gateway's), the proxy alone
// (Fastify, @fastify/reply-from, the body kept as bytes, no limiter) and examples/gateway.js (the
// same, paced by exchangepace). It sends their ports to its parent and runs until killed.

import http from 'node:http'
import Fastify from 'fastify'
import replyFrom from '@fastify/reply-from'
import { buildGateway } from '../../../examples/gateway.js'
import { bodyBytes, keepBodyBytes } from '../../../examples/form-bytes.js'

const TOKEN = JSON.stringify({ access_token: 'x'.repeat(32), token_type: 'Bearer', expires_in: 3600 })

const upstream = http.createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(TOKEN) })
    res.end(TOKEN)
  })
})
await new Promise(resolve => upstream.listen(0, '127.0.0.1', resolve))
const base = `http://127.0.0.1:${upstream.address().port}`

/** The proxy alone: the gateway's forwarding, without a pace. */
const proxy = Fastify()
await proxy.register(replyFrom, { base })
keepBodyBytes(proxy)
proxy.post('/token', (request, reply) => reply.from(request.url, { body: bodyBytes(request), contentType: request.headers['content-type'] }))

// The bench's requests come from many forwarded addresses and client ids, as a gateway's do: no
// key reaches its rate, so every request is forwarded.
const gateway = await buildGateway({ upstream: base, paths: { token: '/token' }, trustProxy: '127.0.0.1' })

const ports = {}
for (const [name, app] of [['proxy', proxy], ['gateway', gateway]]) {
  await app.listen({ port: 0, host: '127.0.0.1' })
  ports[name] = app.server.address().port
}
ports.upstream = upstream.address().port
process.send(ports)
