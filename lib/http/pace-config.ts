import type { FastifyContextConfig } from 'fastify'
import type { PaceRouteOptions } from './route-config.js'

/**
 * The type of `config.pace` as a route method checks it. Fastify types a route's `config` as
 * `FastifyContextConfig` intersected with the type of the object written (its `ContextConfig`,
 * inferred), so to the compiler every field written is a known one, and a value outside a field's
 * literal types empties the intersection, which it then reports against the array form, by the
 * array's methods. `FastifyContextConfig` therefore gives `pace` the type `PaceConfig<this>`:
 * `this`, in an intersection, is the whole of it, from which the object written is read back and
 * a single pace checked field by field, each wrong field given a type that names it and what it
 * takes (a type the compiler cannot merge away), so that the message says so.
 */

/** Each field of a pace, as `PaceRouteOptions` types it (the two forms of its rate together). */
export type PaceFields = { [Field in keyof PaceRouteOptions]-?: PaceRouteOptions[Field] }

/** What each field takes, as a compiler's message says it. */
interface PaceFieldHelp {
  perSecond: 'a number of units per second, from 1'
  limit: 'a number of units per window, from 1'
  window: 'a number of seconds'
  key: "'client', 'source', ['client', 'source'], 'device_code', 'bearer' or a function (request) => string | undefined"
  spend: "'accepted', 'rejected' or 'every'"
  name: 'a string'
  rateOf: 'a function (key) => number | undefined'
  refusal: '{ statusCode, body, headers } or a function (request, refusal) returning one'
  exceptGrantTypes: 'an array of grant_type values'
  shadow: 'a boolean'
  warnAt: 'a share of the bucket, above 0 and at most 1'
}

/** The type a wrong field is given: an object no value of the field is, whose one property is the message. */
type PaceFieldError<Message extends string> = { readonly [Said in Message]: true }

/** The fields, as a message lists them. */
type FieldList = 'perSecond, limit, window, key, spend, name, rateOf, refusal, exceptGrantTypes, shadow, warnAt'

/** The fields of `Written` that are not a pace's, or hold what their field does not take. */
type WrongFields<Written> = {
  [Field in keyof Written]-?: Field extends keyof PaceFields ? (Written[Field] extends PaceFields[Field] ? never : Field) : Field
}[keyof Written]

/**
 * A single pace written as `Written`: `PaceRouteOptions` when each field is one a pace takes and
 * holds what it takes (the rest, the rate's form and the fields required, are checked there);
 * otherwise the fields as written, each wrong one given a type that says what is wrong.
 */
type CheckedObject<Written> = [WrongFields<Written>] extends [never]
  ? PaceRouteOptions
  : {
      readonly [Field in keyof Written]: Field extends WrongFields<Written>
        ? PaceFieldError<Field extends keyof PaceFields ? `${Field} must be ${PaceFieldHelp[Field]}` : `${Field & string} is not a field of a pace: ${FieldList}`>
        : Written[Field]
    }

/**
 * The part of `Config` beside `FastifyContextConfig`: the object the route's config was written
 * as, or unknown (`FastifyContextConfig` alone, whose own `pace` must not be read back).
 */
type Written<Config> = Config extends FastifyContextConfig & infer Rest
  ? FastifyContextConfig extends Rest ? unknown : Rest
  : unknown

/** What `Written` gives `pace`, or unknown. */
type WrittenPace<Written> = Written extends { readonly pace?: infer Pace } ? Pace : unknown

/** The type a pace written as `Pace` is checked against (both forms when nothing was written, as when `config.pace` is read). */
type CheckedPace<Pace> = [Pace] extends [readonly unknown[]]
  ? readonly PaceRouteOptions[]
  : [Pace] extends [object] ? CheckedObject<Pace> : PaceRouteOptions | readonly PaceRouteOptions[]

/**
 * `config.pace`: one pace, or an array of paces that must all grant. `Config` is the route's
 * config as the compiler sees it (`this` in `FastifyContextConfig`); a single pace is checked field
 * by field against the object written there, so that a misspelt field or a wrong value is an error
 * that names the field and what it takes.
 */
export type PaceConfig<Config = unknown> = CheckedPace<WrittenPace<Written<Config>>>
