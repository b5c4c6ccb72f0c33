import type { OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { BODY_CAP, type AnswerReader } from './answer-outcome.js'
import type { Holding } from './bound-pace.js'
import { writeQuota } from './quota-headers.js'
import { kTicket } from './request-ticket.js'
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

/** A ticket whose reply, once hijacked, is watched: see `hijackWatched`. */
export interface HijackWatcher {
  _hijacked (reply: FastifyReply): void
}

/**
 * `reply.hijack` on the reply of a paced route, set on it once its units are held: the ticket
 * watches the raw response (or, settled already, carries its quota headers over), then Fastify's
 * own hijack runs. One function for every reply: setting it allocates nothing.
 */
export function hijackWatched (this: FastifyReply): FastifyReply {
  ((this.request as unknown as { [kTicket]: HijackWatcher })[kTicket])._hijacked(this)
  return (Object.getPrototypeOf(this) as FastifyReply).hijack.call(this)
}

/** What a hijacked reply's ticket does: a ticket already settled (a route that commits as it reserves) only carries its quota headers over. */
export function watchHijacked (reply: FastifyReply, ticket: PaceTicket<Holding>, reader: AnswerReader, request: FastifyRequest): void {
  const res = reply.raw
  if (!ticket.settled) return watchRaw(res, ticket, reader, request)
  for (const name of ['ratelimit-policy', 'ratelimit']) {
    const value = reply.getHeader(name)
    if (value !== undefined) res.setHeader(name, value)
  }
}

/** Watches `res` until the app ends it: see above. */
export function watchRaw (res: ServerResponse, ticket: PaceTicket<Holding>, reader: AnswerReader, request: FastifyRequest): void {
  const watch = new RawWatch(res, ticket, reader, request)
  res.writeHead = function heldHead (this: ServerResponse, statusCode: number, ...rest: unknown[]) {
    watch.holdHead(statusCode, rest)
    return this
  } as ServerResponse['writeHead']
  res.write = function heldWrite (this: ServerResponse, chunk: Chunk, encoding?: BufferEncoding | Callback, callback?: Callback) {
    return typeof encoding === 'function' ? watch.write(chunk, undefined, encoding) : watch.write(chunk, encoding, callback)
  } as ServerResponse['write']
  res.end = function watchedEnd (this: ServerResponse, chunk?: Chunk | Callback, encoding?: BufferEncoding | Callback, callback?: Callback) {
    if (typeof chunk === 'function') watch.end(undefined, undefined, chunk)
    else if (typeof encoding === 'function') watch.end(chunk, undefined, encoding)
    else watch.end(chunk, encoding, callback)
    return this
  } as ServerResponse['end']
}

/** One raw response watched: what it holds back until the outcome is known. */
class RawWatch {
  readonly #writeHead: ServerResponse['writeHead']
  readonly #write: ServerResponse['write']
  readonly #end: ServerResponse['end']
  /** The status message given to `writeHead`, which goes out when the head does. */
  #statusMessage: string | undefined
  #headHeld = false
  /** Writes held while the outcome waits for the body, and their size. */
  readonly #held: Array<[Chunk, BufferEncoding | undefined, Callback | undefined]> = []
  #size = 0
  #decided = false
  #reading = false

  constructor (readonly res: ServerResponse, readonly ticket: PaceTicket<Holding>, readonly reader: AnswerReader, readonly request: FastifyRequest) {
    this.#writeHead = res.writeHead
    this.#write = res.write
    this.#end = res.end
  }

  /** `writeHead`: its status and headers go onto the response; the head itself waits. */
  holdHead (statusCode: number, rest: unknown[]): void {
    const res = this.res
    res.statusCode = statusCode
    if (typeof rest[0] === 'string') this.#statusMessage = rest.shift() as string
    const headers = rest[0] as OutgoingHttpHeaders | Array<string | string[]> | undefined
    if (Array.isArray(headers)) {
      const flat = headers.flat()
      for (let i = 0; i + 1 < flat.length; i += 2) res.appendHeader(flat[i], flat[i + 1])
    } else if (headers !== undefined) {
      for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value)
    }
    this.#headHeld = true
  }

  write (chunk: Chunk, encoding: BufferEncoding | undefined, callback: Callback | undefined): boolean {
    if (!this.#decided && !this.#reading) {
      this.#reading = this.#needsBody()
      if (!this.#reading) this.#decide(undefined)
    }
    if (this.#decided) return this.#write.call(this.res, chunk, encoding as BufferEncoding, callback)
    this.#held.push([chunk, encoding, callback])
    this.#size += typeof chunk === 'string' ? Buffer.byteLength(chunk, encoding) : chunk.byteLength
    if (this.#size > BODY_CAP) this.#decide(undefined)
    return true
  }

  /** The app ends the response: the outcome from the whole body if it waited for it, and the settlement. */
  end (chunk: Chunk | undefined, encoding: BufferEncoding | undefined, callback: Callback | undefined): void {
    const res = this.res
    res.end = this.#end
    if (!this.#decided) {
      const parts = chunk === undefined ? this.#held : [...this.#held, [chunk, encoding] as const]
      this.#decide(this.#needsBody() ? Buffer.concat(parts.map(([c, e]) => typeof c === 'string' ? Buffer.from(c, e) : c)) : undefined)
    }
    this.#end.call(res, chunk, encoding as BufferEncoding, callback)
    this.ticket._send()
  }

  /** Whether the outcome needs the body: known once the head's headers are. */
  #needsBody (): boolean {
    const res = this.res
    return this.reader.quick(res.statusCode) === null && this.reader.readsBody(res.getHeader('content-type'), res.getHeader('content-encoding'))
  }

  /** The outcome from what the response holds, the quota headers, and the head and held writes out. */
  #decide (body: Buffer | undefined): void {
    const { res, ticket, reader } = this
    this.#decided = true
    res.writeHead = this.#writeHead
    res.write = this.#write
    if (!ticket._told && !ticket.refused) {
      ticket._answered(reader.quick(res.statusCode) ?? reader.decide(this.request, res.statusCode, res.getHeaders(), body))
    }
    if (!ticket.refused) writeQuota({ header: (name, value) => res.setHeader(name, value) }, ticket._held, ticket.outcome, null)
    if (this.#headHeld) (this.#writeHead as (statusCode: number, statusMessage?: string) => ServerResponse).call(res, res.statusCode, this.#statusMessage)
    for (const [chunk, encoding, callback] of this.#held) this.#write.call(res, chunk, encoding as BufferEncoding, callback)
    this.#held.length = 0
  }
}
