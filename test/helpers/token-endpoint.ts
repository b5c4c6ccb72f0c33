import type { FastifyReply, FastifyRequest } from 'fastify'

/**
 * A token endpoint's handler for client_secret_post against `secrets` (client id to secret): a
 * wrong secret, or an id no client has, is a 401 `invalid_client` whose outcome is rejected; the
 * right one gets a token.
 */
export function secretPost (secrets: ReadonlyMap<string, string>): (request: FastifyRequest, reply: FastifyReply) => Promise<unknown> {
  return async (request, reply) => {
    const body = request.body as Record<string, string>
    if (secrets.get(body.client_id) !== body.client_secret) {
      request.pace.outcome = 'rejected'
      return await reply.code(401).send({ error: 'invalid_client' })
    }
    return { access_token: 'token', token_type: 'Bearer' }
  }
}
