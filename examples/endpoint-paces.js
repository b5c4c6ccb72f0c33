// The paces of an authorization server's endpoints whose handlers the app did not write, as
// docs/endpoints.md recommends them: oidc-provider mounted in Fastify (oidc-provider.js) and the
// gateway in front of any server (gateway.js). Each has a name of its own, shared by the routes
// that spend it.

import { DEVICE_GRANT } from './client-auth.js'
import { DEVICE_INTERVAL } from './device-flow.js'

const SLOW_DOWN = { statusCode: 400, body: { error: 'slow_down', error_description: 'poll no more often than the interval, now 5 seconds longer' } }

/**
 * The failure budgets of the endpoints where clients authenticate (docs/endpoints.md): failed client
 * authentications per (declared client id, address), 5 an hour, and per address whatever id they
 * name, 100 a day. With the plugin's `isClient`, a made-up client id spends the second only, so a
 * flood of made-up ids leaves a row per address, not per id.
 */
const failures = { name: 'failures', limit: 5, window: 3600, key: ['client', 'source'], spend: 'rejected' }
const sourceFailures = { name: 'source-failures', limit: 100, window: 86400, key: 'source', spend: 'rejected' }
const ceiling = { name: 'ceiling', perSecond: 50, key: 'source', spend: 'every' }
/** The token endpoint's paces, per grant (docs/endpoints.md): the README's four, and one poll per interval per device code. */
export const PACES = {
  token: [
    { name: 'device-polls', limit: 1, window: DEVICE_INTERVAL, key: 'device_code', spend: 'every', refusal: SLOW_DOWN },
    failures,
    sourceFailures,
    { name: 'token', perSecond: 5, key: 'client', spend: 'accepted', exceptGrantTypes: [DEVICE_GRANT] },
    ceiling
  ],
  deviceAuthorization: [{ name: 'device-authorization', limit: 10, window: 60, key: 'source', spend: 'every' }, failures],
  authorization: { name: 'authorization', perSecond: 10, key: 'source', spend: 'every' },
  par: [failures, sourceFailures, { name: 'par', perSecond: 20, key: 'client', spend: 'accepted' }, ceiling],
  introspection: [failures, sourceFailures, { name: 'introspection', perSecond: 100, key: 'client', spend: 'accepted' }, ceiling],
  revocation: [failures, sourceFailures, { name: 'revocation', perSecond: 10, key: 'client', spend: 'accepted' }, ceiling],
  userinfo: [{ name: 'userinfo', limit: 10, window: 60, key: 'bearer', spend: 'every' }, { name: 'userinfo-failures', limit: 20, window: 3600, key: 'source', spend: 'rejected' }]
}
