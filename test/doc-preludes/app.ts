// Prelude `app` of the documentation's code blocks (test/helpers/doc-blocks.ts): a block fenced
// ```js prelude=app uses an application it does not build, as a snippet placed in the reader's own
// set-up would. Declarations only: the blocks are type-checked, not run.
import type { FastifyInstance } from 'fastify'

/** The reader's Fastify application. */
export declare const app: FastifyInstance
