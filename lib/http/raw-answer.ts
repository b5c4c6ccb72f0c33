import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { BODY_CAP, type AnswerReader } from './answer-outcome.js'
import type { Holding } from './bound-pace.js'
import { writeQuota } from './quota-headers.js'
import type { PaceTicket } from './ticket.js'

/**
 * An answer written on the raw response, past Fastify's onSend (a hijacked reply: a mounted Koa
 * or Express app handed the request, a stream piped by hand). The response's `writeHead`, `write`
 * and `end` are watched for the request: the head is held until the outcome is known (the first
 * write, or the end for a JSON body the decision reads, up to `BODY_CAP`), then goes out with the
 * quota headers; the units are settled when the app ends the response, whether or not the client
 * reads it. A response closed before the app ends it (a client that hung up while the secret was
 * checked) is never settled: its units stay spent.
 */

type Callback = (err?: Error | null) => void
type Chunk = string | Uint8Array

/** Wraps `reply.hijack` so that a hijacked answer is watched; a ticket already settled (a route that commits as it reserves) only carries its quota headers over. */
export function watchHijack (reply: FastifyReply, ticket: PaceTicket<Holding>, reader: AnswerReader, request: FastifyRequest): void {
  const hijack = reply.hijack
  reply.hijack = function hijackWatched (this: FastifyReply) {
    const res = reply.raw
    if (ticket.settled) {
      for (const name of ['ratelimit-policy', 'ratelimit']) {
        const value = reply.getHeader(name)
        if (value !== undefined) res.setHeader(name, value)
      }
    } else {
      watchRaw(res, ticket, reader, request)
    }
    return hijack.call(this)
  }
}

/** Watches `res` until the app ends it: see above. */
export function watchRaw (res: ServerResponse, ticket: PaceTicket<Holding>, reader: AnswerReader, request: FastifyRequest): void {
  const writeHead = res.writeHead
  const write = res.write
  const end = res.end
  /** The status message given to `writeHead`, which goes out when the head does. */
  let statusMessage: string | undefined
  let headHeld = false
  /** Writes held while the outcome waits for the body, and their size. */
  const held: Array<[Chunk, BufferEncoding | undefined, Callback | undefined]> = []
  let size = 0
  let decided = false
  let reading = false

  /** The outcome from what the response holds, the quota headers, and the head and held writes out. */
  const decide = (body: Buffer | undefined): void => {
    decided = true
    res.writeHead = writeHead
    res.write = write
    if (!ticket._told && !ticket.refused) {
      ticket._answered(reader.quick(res.statusCode) ?? reader.decide(request, res.statusCode, res.getHeaders(), body))
    }
    if (!ticket.refused) writeQuota({ header: (name, value) => res.setHeader(name, value) }, ticket._held, ticket.outcome, null)
    if (headHeld) (writeHead as (statusCode: number, statusMessage?: string) => ServerResponse).call(res, res.statusCode, statusMessage)
    for (const [chunk, encoding, callback] of held) write.call(res, chunk, encoding as BufferEncoding, callback)
    held.length = 0
  }
  /** Whether the outcome needs the body: known once the head's headers are. */
  const needsBody = (): boolean => reader.quick(res.statusCode) === null && reader.readsBody(res.getHeader('content-type'), res.getHeader('content-encoding'))

  res.writeHead = function heldHead (this: ServerResponse, statusCode: number, ...rest: unknown[]) {
    this.statusCode = statusCode
    if (typeof rest[0] === 'string') statusMessage = rest.shift() as string
    const headers = rest[0] as OutgoingHttpHeaders | Array<string | string[]> | undefined
    if (Array.isArray(headers)) {
      const flat = headers.flat()
      for (let i = 0; i + 1 < flat.length; i += 2) this.appendHeader(flat[i], flat[i + 1])
    } else if (headers !== undefined) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) this.setHeader(name, value)
    }
    headHeld = true
    return this
  } as ServerResponse['writeHead']

  res.write = function heldWrite (this: ServerResponse, chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) {
    if (typeof encoding === 'function') {
      callback = encoding
      encoding = undefined
    }
    if (!decided && !reading) {
      reading = needsBody()
      if (!reading) decide(undefined)
    }
    if (decided) return write.call(this, chunk, encoding as BufferEncoding, callback)
    held.push([chunk, encoding, callback])
    size += typeof chunk === 'string' ? Buffer.byteLength(chunk, encoding) : chunk.byteLength
    if (size > BODY_CAP) decide(undefined)
    return true
  } as ServerResponse['write']

  res.end = function watchedEnd (this: ServerResponse, chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) {
    if (typeof chunk === 'function') {
      callback = chunk
      chunk = undefined
    } else if (typeof encoding === 'function') {
      callback = encoding
      encoding = undefined
    }
    res.end = end
    if (!decided) {
      if (chunk !== undefined) held.push([chunk, encoding as BufferEncoding | undefined, undefined])
      const body = needsBody() ? Buffer.concat(held.map(([c, e]) => typeof c === 'string' ? Buffer.from(c, e) : c)) : undefined
      if (chunk !== undefined) held.pop()
      decide(body)
    }
    end.call(this, chunk, encoding as BufferEncoding, callback)
    ticket._send()
    return this
  } as ServerResponse['end']
}
