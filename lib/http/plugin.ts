import fp from 'fastify-plugin'
import type { FastifyInstance, RouteOptions } from 'fastify'
import { bindPace, type Binding } from './bound-pace.js'
import { Observer } from './observer.js'
import { checkOptions, type ExchangePaceOptions } from './options.js'
import { PaceRegistry } from '../paces/registry.js'
import { KeyReaders } from './request-keys.js'
import { decorateTickets, markPaced } from './request-ticket.js'
import { RequestPaces, reserveAll, type ReserveStep } from './reserve-hook.js'
import { describeRoute } from './route-description.js'
import type { PaceConfig } from './pace-config.js'
import { paceRules } from './route-config.js'
import { settleOnSend, settleOnError } from './settle-hooks.js'
import { AnswerReader } from './answer-outcome.js'
import { guardUnseenRoutes } from './unseen-routes.js'
import type { PaceTicket } from './ticket.js'
import { warnOfTrustProxy } from './trust-proxy.js'

export type { ExchangePaceOptions, PaceRefusal } from './options.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The paces by name, and the operator's actions on them (exchangepace). */
    pace: PaceRegistry
  }
  interface FastifyRequest {
    /**
     * What the request holds, and the outcome flag the handler sets to `'rejected'` when the
     * exchange did not take place. Every request has one: on a route without `config.pace` it is
     * inert (`paced` is false, it holds nothing, and its outcome changes nothing).
     */
    readonly pace: PaceTicket
  }
  interface FastifyContextConfig {
    /** Paces this route spends from (exchangepace): one, or an array (see `PaceConfig`). */
    pace?: PaceConfig<this> | undefined
  }
}

/**
 * Registers the plugin: checks its options, decorates `fastify.pace` and `request.pace`, and adds
 * the hooks to each route that declares `config.pace` as the route is added. Routes without a pace
 * get no hook, and pay nothing unless they read `request.pace` (see request-ticket.ts); a route
 * that declares one but was added before the plugin loaded is refused (see unseen-routes.ts).
 */
function exchangePacePlugin (fastify: FastifyInstance, options: ExchangePaceOptions, done: (err?: Error) => void): void {
  let checked: ReturnType<typeof checkOptions>
  try {
    checked = checkOptions(options)
  } catch (err) {
    return done(err as Error)
  }
  const { now, store, ipv6Subnet, maxKeyLength, maxKeys } = checked
  const observer = new Observer(checked.onEvent, checked.logClientIds, fastify.log)
  const registry = new PaceRegistry({ now, store, ipv6Subnet, maxKeyLength, maxKeys, log: fastify.log, observer })
  const binding: Binding = { registry, readers: new KeyReaders(ipv6Subnet, maxKeyLength, fastify.log, checked.isClient) }
  const answers = new AnswerReader(checked.outcomeOf)
  const answering: Answering = { refusalBody: checked.errorResponseBuilder, observer, shared: store !== undefined, answers }
  const settleHooks: SettleHooks = { onSend: settleOnSend(answers), onError: settleOnError }
  let pacedBySource = false
  fastify.decorate('pace', registry)
  decorateTickets(fastify, request => new RequestPaces(observer, request, answers))
  guardUnseenRoutes(fastify)

  fastify.addHook('onRoute', function paceRoute (this: FastifyInstance, routeOptions: RouteOptions) {
    const config = routeOptions.config?.pace
    if (config === undefined) return
    const route = `${String(routeOptions.method)} ${routeOptions.url}`
    const rules = paceRules(config, route, paceUrl(routeOptions), checked.shadow)
    const bound = rules.map(rule => bindPace(rule, route, binding))
    pacedBySource ||= rules.some(rule => rule.key === 'source')
    addHooks(routeOptions, bound.filter(b => b.rule.early), bound.filter(b => !b.rule.early), answering, settleHooks)
    routeOptions.config = markPaced(routeOptions.config)
    // A serializer compiler of the app's own (a Zod type provider's) may reject a JSON Schema 429.
    const ownSerializer = routeOptions.serializerCompiler !== undefined || this.serializerCompiler !== undefined
    routeOptions.schema = describeRoute(routeOptions.schema, rules, checked.store, !ownSerializer)
  })

  fastify.addHook('onReady', function warnTrustProxy (next) {
    if (pacedBySource) warnOfTrustProxy(fastify)
    next()
  })

  if (store?.record !== undefined) {
    const record = store.record.bind(store)
    fastify.addHook('onReady', async function recordPaces () {
      try {
        await record(registry._catalog())
      } catch (err) {
        fastify.log.warn({ err }, 'exchangepace: the store did not record the catalog of paces; the CLI cannot check pace names against it until a replica starts while it answers')
      }
    })
  }

  done()
}

/** What every reserving hook of the plugin instance shares: the 429 body's builder, the observer and where the paces live. */
type Answering = Pick<ReserveStep, 'refusalBody' | 'observer' | 'shared' | 'answers'>

/** The settling hooks every route with late paces gets, made once per plugin instance. */
interface SettleHooks {
  readonly onSend: ReturnType<typeof settleOnSend>
  readonly onError: typeof settleOnError
}

/**
 * Puts the plugin's hooks before the route's own (reserving) and after them (settling): `early`
 * paces reserve in onRequest, `late` ones in preHandler, which on a shared store also awaits the
 * early ones (see `ReserveStep.waits`); a route with late paces also settles in onSend and
 * onError. A route with early paces only commits in its onRequest hook and gets no other (see
 * `ReserveStep.commits`).
 */
function addHooks (routeOptions: RouteOptions, early: ReserveStep['paces'], late: ReserveStep['paces'], answering: Answering, settle: SettleHooks): void {
  const commits = late.length === 0
  if (early.length > 0) {
    const step: ReserveStep = { paces: early, commits, waits: commits, last: commits, ...answering }
    routeOptions.onRequest = [(request, reply, next) => reserveAll(step, request, reply, next), ...hookList(routeOptions.onRequest)]
  }
  if (commits) return
  const step: ReserveStep = { paces: late, commits: false, waits: true, last: true, ...answering }
  routeOptions.preHandler = [(request, reply, next) => reserveAll(step, request, reply, next), ...hookList(routeOptions.preHandler)]
  routeOptions.onSend = [...hookList(routeOptions.onSend), settle.onSend]
  routeOptions.onError = [...hookList(routeOptions.onError), settle.onError]
}

/**
 * The URL a route's default pace name is made of. A route at `/` under a prefix, with
 * `prefixTrailingSlash: 'both'` (the default), is the prefix's route: Fastify serves both
 * `/authorize` and `/authorize/` from it, and adds the HEAD of each as a route of its own; named
 * by their URLs, the two HEADs would keep two paces. With 'slash' it serves `/authorize/` alone,
 * by its own name.
 */
function paceUrl (routeOptions: RouteOptions): string {
  // Fastify 5 passes these to onRoute but leaves them out of RouteOptions' type.
  const { prefix, routePath } = routeOptions as RouteOptions & { prefix?: string, routePath?: string }
  const both = (routeOptions.prefixTrailingSlash ?? 'both') === 'both'
  return both && prefix !== undefined && prefix !== '' && routePath === '/' ? prefix : routeOptions.url
}

/** A route's hooks of one kind as an array (the route's own, when it gave one): callers spread it into a new one. */
function hookList<T> (hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}

/** The exchangepace plugin: register it once, before the routes it paces. */
export const exchangePace = fp(exchangePacePlugin, { name: 'exchangepace', fastify: '5.x' })
