import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Holding } from './bound-pace.js'
import { PaceTicket } from './ticket.js'

/**
 * `request.pace`: a ticket on every request, kept under a symbol of the request's own (`kTicket`)
 * that the plugin's hooks read and write directly.
 *
 * `kTicket` is a request decoration initialised to null, so Fastify's request constructor keeps one
 * shape; `request.pace` is a getter on the request's prototype that returns the ticket there, and
 * makes one on its first read when no hook has (an unpaced route, or a paced route before its
 * pace's hook). So the hooks pay no getter and no allocation beyond the paced route's own ticket,
 * and an unpaced route that never reads `request.pace` pays nothing but the decoration's
 * initialisation, as it paid for the `null` decoration before.
 */

/** The request's ticket, or null until a hook or a read of `request.pace` makes one. */
export const kTicket = Symbol('exchangepace.ticket')

/** Marks the config of each route the plugin paces (a copy it makes: the app's object is not changed). */
const kPaced = Symbol('exchangepace.paced')

/** A request seen with its ticket under `kTicket`. */
export type TicketedRequest = FastifyRequest & { [kTicket]: PaceTicket<Holding> | null }

/** Makes the ticket of a request on a paced route, the kind the plugin's hooks fill. */
export type PacedTicket = (request: FastifyRequest) => PaceTicket<Holding>

/** Decorates requests with `kTicket` and the `request.pace` getter; `paced` makes a paced route's ticket, as the hooks do. */
export function decorateTickets (fastify: FastifyInstance, paced: PacedTicket): void {
  fastify.decorateRequest(kTicket, null)
  fastify.decorateRequest('pace', {
    getter (this: FastifyRequest): PaceTicket {
      return (this as TicketedRequest)[kTicket] ?? firstTicket(this as TicketedRequest, paced)
    }
  })
}

/**
 * The ticket of a request no hook has given one yet, kept under `kTicket` so that every later read,
 * and the pace's hook if one comes, sees the same: on a route the plugin paces, a ticket like the
 * hook's (holding nothing yet); on any other, an inert one.
 */
function firstTicket (request: TicketedRequest, paced: PacedTicket): PaceTicket {
  const ticket = isPaced(request.routeOptions.config) ? paced(request) : new PaceTicket<Holding>(null, null, false)
  request[kTicket] = ticket
  return ticket
}

/** A route's config seen for the mark alone. */
interface MarkedConfig { readonly [kPaced]?: true }

/** Whether the plugin paces the route of `config` (`config.pace` alone is also on a route it never saw). */
export function isPaced (config: object): boolean {
  return (config as MarkedConfig)[kPaced] === true
}

/** The config a paced route is added with: `config` and the mark that the plugin paces it (a copy: the app's object is not changed). */
export function markPaced<Config extends object> (config: Config | undefined): Config {
  const marked: MarkedConfig = { [kPaced]: true }
  return Object.assign(marked, config) as Config
}
