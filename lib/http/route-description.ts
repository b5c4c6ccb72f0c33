import type { RouteOptions } from 'fastify'
import type { PaceRule } from './route-config.js'
import type { PaceStore } from '../store.js'

/**
 * What a paced route publishes about its paces: a sentence in its description, an
 * `x-exchangepace` extension, and the 429 among its responses, so that an OpenAPI document made
 * from the routes (@fastify/swagger) says what is counted, per what, and over which scope.
 */

/** Where the rate holds without a shared store. */
const PER_REPLICA = 'per replica'

function keyDescription (rule: PaceRule): string {
  if (rule.key === 'client') return 'declared client id'
  if (rule.key === 'source') return 'source address'
  if (rule.key === 'client+source') return 'declared client id and source address'
  if (rule.key === 'device_code') return 'device code'
  if (rule.key === 'bearer') return 'bearer token'
  return 'custom key'
}

/** What one unit of a pace is, and which outcome gives it back. */
const COUNTED: Record<PaceRule['spend'], { what: string, refund: string }> = {
  accepted: { what: 'requests', refund: ' (rejected exchanges are refunded)' },
  rejected: { what: 'failed client authentications', refund: ' (accepted exchanges are refunded)' },
  every: { what: 'requests', refund: ' (every request counts)' }
}

/** `second`, `10 minutes`, `hour`, `2 days`, `90 seconds`: a window in the largest unit that divides it. */
function windowText (window: number): string {
  for (const [unit, seconds] of [['day', 86400], ['hour', 3600], ['minute', 60], ['second', 1]] as const) {
    if (window % seconds === 0) return window === seconds ? unit : `${window / seconds} ${unit}s`
  }
  return `${window} seconds`
}

/** `10 requests per second per source address (every request counts)` */
function rateSentence (rule: PaceRule): string {
  const { what, refund } = COUNTED[rule.spend]
  const amount = rule.window === 1 ? rule.perSecond : rule.limit
  const unit = amount === 1 ? what.slice(0, -1) : what
  const grants = rule.exceptGrantTypes === null ? '' : ` except for grant_type ${rule.exceptGrantTypes.join(' and ')}`
  const own = rule.rateOf === undefined ? '' : `, or the ${rule.key === 'client' || rule.key === 'client+source' ? "client's registered" : "key's own"} rate`
  const shadow = rule.shadow ? ', in shadow (refusals reported, not enforced)' : ''
  return `${amount} ${unit} per ${windowText(rule.window)} per ${keyDescription(rule)}${own}${grants}${refund}${shadow}`
}

/**
 * The sentence every paced route's description gets: the rate, the key, and the scope over which
 * the rate holds (per replica by default, or the shared store's; a shared store's sentence says
 * that the route's failure budgets hold over it too, so a guesser moving between replicas spends
 * one budget).
 */
function paceSentence (rules: readonly PaceRule[], store: PaceStore | undefined): string {
  const parts = rules.map(rateSentence)
  const budgets = rules.some(rule => rule.spend === 'rejected') ? ', failure budgets included' : ''
  const holds = store === undefined
    ? `Each rate is ${PER_REPLICA}: N replicas admit up to N times it.`
    : `Each rate is ${store.scope}${budgets}; while the store is unavailable, ${store.outage}.`
  return `Paced by exchangepace: ${parts.join('; ')}. ${holds}`
}

/**
 * The route's schema with the per-replica statement added: the description sentence (after the
 * route's own), an `x-exchangepace` extension, and, with `with429`, the 429 response, in JSON
 * Schema, unless the route documents its own. Fastify compiles every response schema with the
 * route's serializer compiler, so a route whose compiler reads another kind of schema gets no
 * 429 from here (its body is serialized by the plugin either way). A new object: the HEAD route
 * Fastify derives from a GET shares the original.
 */
export function describeRoute (schema: RouteOptions['schema'], rules: readonly PaceRule[], store: PaceStore | undefined, with429: boolean): RouteOptions['schema'] {
  const own = (schema ?? {}) as Record<string, unknown>
  const scope = store?.scope ?? PER_REPLICA
  const sentence = paceSentence(rules, store)
  const description = typeof own.description === 'string' && own.description !== '' ? `${own.description} ${sentence}` : sentence
  const described: Record<string, unknown> = {
    ...own,
    description,
    'x-exchangepace': {
      scope,
      paces: rules.map(rule => ({ name: rule.name, perSecond: rule.perSecond, limit: rule.limit, window: rule.window, key: keyDescription(rule), spend: rule.spend, ...(rule.rateOf === undefined ? {} : { ownRates: true }) }))
    }
  }
  const response = own.response as Record<string, unknown> | undefined
  if (with429 && response?.[429] === undefined) {
    described.response = {
      ...response,
      429: {
        description: `Too many requests: the pace is spent (${scope}). Retry after the Retry-After header, in seconds.`,
        type: 'object',
        properties: { error: { type: 'string' }, error_description: { type: 'string' } },
        additionalProperties: true
      }
    }
  }
  return described as RouteOptions['schema']
}
