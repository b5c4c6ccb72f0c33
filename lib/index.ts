import { exchangePace } from './http/plugin.js'

export { exchangePace }
export type { ExchangePaceOptions, PaceRefusal } from './http/plugin.js'
export { Pace, Reservation, defaultClock } from './bucket/pace.js'
export type { Clock, PaceOptions, PaceRate } from './bucket/pace.js'
export { PaceRegistry } from './operator/registry.js'
export { PaceCounts } from './http/observer.js'
export type { PaceEvent, PaceKeyName } from './http/observer.js'
export { PaceTicket } from './http/ticket.js'
export type { HeldReservation, PaceOutcome, PaceSpend } from './http/ticket.js'
export type { PaceKey, PaceRouteOptions } from './http/route-config.js'
export type { PaceRefusalAnswer, PaceRefusalOption } from './http/refusal-shape.js'
export { InvalidRequest } from './keys/parse.js'
export { secretKey } from './keys/secrets.js'
export { RedisStore } from './redis/store.js'
export type { RedisStoreOptions, RedisClientLike, RedisUnavailable } from './redis/store.js'
export type { PaceStore, PaceBucket, SharedPace, PaceReservation } from './store.js'
export default exchangePace
