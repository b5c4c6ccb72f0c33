import { createServer, type AddressInfo } from 'node:net'

/** A free port on 127.0.0.1, for a server whose URL (an issuer) must be known before it is built. */
export async function freePort (): Promise<number> {
  const server = createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise(resolve => server.close(resolve))
  return port
}
