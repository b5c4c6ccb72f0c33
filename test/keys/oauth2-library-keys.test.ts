import t from 'tap'
import OAuth2Server from '@node-oauth/oauth2-server'
import { declaredClientId } from '../../lib/keys/parse.js'

/**
 * Which client a token request names, as @node-oauth/oauth2-server 5 reads it and as exchangepace
 * does (lib/keys/parse.ts), input by input. Where they differ, either exchangepace refuses the request
 * before the library sees it, or the library names no client (it gives up before asking its
 * model, the exchange is rejected and the unit refunded), or examples/oauth2-server.js bridges the
 * gap: the library does not form-decode Basic credentials (RFC 6749 section 2.3.1 asks for it;
 * its maintainers leave it to the application, node-oauth/node-oauth2-server#213), and the
 * example's adapter decodes them before the library reads them. A row that fails here means the
 * library changed how it reads credentials: look again at the example's mapping.
 */

const { Request, Response } = OAuth2Server
const basic = (credentials: string) => `Basic ${Buffer.from(credentials).toString('base64')}`

/** The client id the library asks its model for (JSON, to show arrays), or the error it raises before asking. */
async function libraryReads (authorization: string | undefined, body: Record<string, unknown>, contentType = 'application/x-www-form-urlencoded'): Promise<string> {
  let asked: unknown
  const server = new OAuth2Server({
    model: {
      getClient: async (clientId: unknown) => { asked = clientId; return null },
      getUserFromClient: async () => null,
      saveToken: async () => null
    }
  })
  const headers: Record<string, string> = { 'content-type': contentType, 'content-length': '1' }
  if (authorization !== undefined) headers.authorization = authorization
  const error = await server.token(new Request({ method: 'POST', headers, query: {}, body }), new Response()).catch((error: Error) => error)
  return asked === undefined ? `${error.name}, no client asked for` : JSON.stringify(asked)
}

/** The client id exchangepace charges (JSON), none, or its 400. */
function exchangepaceReads (authorization: string | undefined, body: Record<string, unknown>): string {
  try {
    const id = declaredClientId(authorization, body, 255)
    return id === undefined ? 'none' : JSON.stringify(id)
  } catch (error) {
    return `400 ${(error as Error).message}`
  }
}

const secret = 's3cret'
const rows: Array<[string, string | undefined, Record<string, unknown>, string, string]> = [
  ['Basic', basic('reporting-service:s3cret'), {}, '"reporting-service"', '"reporting-service"'],
  ['Basic, form-encoded as openid-client sends it: the example decodes it for the library', basic('reporting%2Dservice:s3cret'), {}, '"reporting-service"', '"reporting%2Dservice"'],
  ['Basic with a "+": a space once form-decoded, which the example does for the library', basic('a+b:s3cret'), {}, '"a b"', '"a+b"'],
  ['client_secret_post', undefined, { client_id: 'reporting-service', client_secret: secret }, '"reporting-service"', '"reporting-service"'],
  ['Basic and the same id in the body', basic('reporting-service:s3cret'), { client_id: 'reporting-service' }, '"reporting-service"', '"reporting-service"'],
  ['Basic and another id in the body: the library reads Basic alone', basic('stranger:s3cret'), { client_id: 'victim' }, '400 the request declares conflicting client ids', '"stranger"'],
  ['a secret alone in Basic, an id in the body', basic(':s3cret'), { client_id: 'victim' }, '400 the Basic client id must not be empty', 'invalid_request, no client asked for'],
  ['an id in Basic with an empty secret', basic('victim:'), {}, '"victim"', 'invalid_request, no client asked for'],
  ['an id in the body without a secret', undefined, { client_id: 'victim' }, '"victim"', 'invalid_client, no client asked for'],
  ['an id in the body with an empty secret', undefined, { client_id: 'victim', client_secret: '' }, '"victim"', 'invalid_client, no client asked for'],
  ['an empty id in the body', undefined, { client_id: '', client_secret: secret }, 'none', 'invalid_client, no client asked for'],
  ['a repeated client_id: the library would ask for an array (the example\'s schema refuses it first)', undefined, { client_id: ['victim', 'other'], client_secret: secret }, '400 client_id is repeated', '["victim","other"]'],
  ['an id outside printable ASCII', undefined, { client_id: 'vïctim', client_secret: secret }, '"vïctim"', 'invalid_request, no client asked for'],
  ['a client assertion naming the client: the library reads none', undefined, { client_assertion: 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ2aWN0aW0ifQ.c2ln' }, '"victim"', 'invalid_client, no client asked for']
]

for (const [what, authorization, body, ours, theirs] of rows) {
  t.test(what, async t => {
    t.equal(exchangepaceReads(authorization, body), ours, 'exchangepace')
    t.equal(await libraryReads(authorization, body), theirs, '@node-oauth/oauth2-server')
  })
}

t.test('a JSON body: exchangepace reads its client_id, the library refuses the content type first', async t => {
  const body = { client_id: 'victim', client_secret: secret }
  t.equal(exchangepaceReads(undefined, body), '"victim"')
  t.equal(await libraryReads(undefined, body, 'application/json'), 'invalid_request, no client asked for')
})
