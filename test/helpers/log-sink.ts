import { Writable } from 'node:stream'

/** A stream for Fastify's logger (`logger: { stream }`) and the JSON lines written to it, parsed, in order. */
export function logSink (): { stream: Writable, lines: Array<Record<string, any>> } {
  const lines: Array<Record<string, any>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line !== '') lines.push(JSON.parse(line))
      done()
    }
  })
  return { stream, lines }
}
