import { secretKey } from './secrets.js'

/**
 * The key as the trail records it: a source, or the hash of a device code or bearer token, as it
 * is; a client id (alone, in a pair before its address, or a custom key) only when `clientIds`,
 * otherwise `sha256:` and its hash, so that the same client reads the same.
 */
export function auditedKey (keyKind: string, key: string, clientIds: boolean): string {
  if (keyKind === 'source' || keyKind === 'device_code' || keyKind === 'bearer') return key
  const at = keyKind === 'client+source' ? key.indexOf('\u001f') : -1
  const client = at === -1 ? key : key.slice(0, at)
  const shown = clientIds ? client : `sha256:${secretKey(client)}`
  return at === -1 ? shown : `${shown} @ ${key.slice(at + 1)}`
}
