// Prelude `oauth` of the documentation's code blocks (test/helpers/doc-blocks.ts): what the
// reader's authorization server already has, which the examples call and exchangepace does not
// provide. Declarations only: the blocks are type-checked, not run.
import type { FastifyReply, FastifyRequest } from 'fastify'

/** A registered client, as the reader's server keeps it. */
export interface Client {
  readonly id: string
}

/** Client authentication (client_secret_basic or client_secret_post): the client, or null when it failed. */
export declare function authenticateClient (request: FastifyRequest): Promise<Client | null>

/** The token response for an authenticated client. */
export declare function issueToken (client: Client, body: unknown): Promise<{ access_token: string, token_type: string, expires_in: number }>

/** The authorization endpoint's handler. */
export declare function authorize (request: FastifyRequest, reply: FastifyReply): Promise<unknown>

/** The registered clients by id, in memory (what `isClient` and `rateOf` read). */
export declare const clients: ReadonlyMap<string, Client>
