import { exchangePace } from './plugin.js'

export { exchangePace }
export type { ExchangePaceOptions, PaceRefusal } from './plugin.js'
export { Pace, Reservation, defaultClock } from './pace.js'
export type { Clock, PaceOptions, PaceRate } from './pace.js'
export { PaceRegistry } from './registry.js'
export { PaceCounts } from './observer.js'
export type { PaceEvent, PaceKeyName } from './observer.js'
export { PaceTicket } from './ticket.js'
export type { HeldReservation, PaceOutcome, PaceSpend } from './ticket.js'
export type { PaceKey, PaceRouteOptions } from './route-config.js'
export { InvalidRequest } from './keys.js'
export { RedisStore } from './redis-store.js'
export type { RedisStoreOptions, RedisClientLike, RedisUnavailable } from './redis-store.js'
export type { PaceStore, PaceBucket, SharedPace, PaceReservation } from './store.js'
export default exchangePace
