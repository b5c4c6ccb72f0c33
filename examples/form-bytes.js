// A request body as exchangepace reads it (parsed) and as it came (its bytes), for servers that hand
// the request on to an app or an upstream that reads the body itself: oidc-provider mounted in
// Fastify (oidc-provider.js), a gateway in front of any authorization server (gateway.js).

import { parse } from 'node:querystring'

const kBytes = Symbol('body bytes')

/** The bytes of the request's body as the client sent them, or undefined without a body. */
export function bodyBytes (request) {
  return request[kBytes]
}

/**
 * Parses form and JSON bodies for the key readers (a repeated form parameter as an array, which
 * exchangepace answers 400) and keeps their bytes to hand on unchanged.
 */
export function keepBodyBytes (app, bodyLimit = 56 * 1024) {
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'buffer', bodyLimit }, (request, body, done) => {
    request[kBytes] = body
    done(null, { ...parse(body.toString('utf8')) })
  })
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, (request, body, done) => {
    request[kBytes] = body
    try {
      done(null, JSON.parse(body.toString('utf8')))
    } catch (err) {
      err.statusCode = 400
      done(err)
    }
  })
}
