/**
 * The data channel: how a Read (an open of a file another node owns)
 * travels between peers, beside the gRPC peer service (docs/design.md,
 * "The data channel"). Sample bytes are most of what peers exchange, and
 * through grpc-js each one was copied three times in JavaScript, into a
 * fresh buffer each time (bench/grpc-cost.js measures what that costs).
 * Here the owner writes a file's bytes straight from the buffer it held
 * them in, and the requester reads them straight into a sample buffer
 * (src/chunks/sample-buffers.ts): one copy, and no buffer made per message.
 *
 * Frames and messages: proto/redirfs.proto, "The data channel". A
 * connection is TLS when the cluster uses TLS, and its first frame carries
 * the cluster token; a wrong one is answered with a refusal and closed.
 * One connection per peer carries any number of reads at once; answers
 * come back in the order they are ready.
 */
import net from 'node:net'
import tls from 'node:tls'
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import { sampleBuffers } from '../chunks/sample-buffers'
import { PeerCallError } from './call-error'
import { tokenMatches, type Credentials } from './security'
import { dataMessages, PROTOCOL_VERSION, type FileData, type ReadAnswer, type ReadReply, type ReadRequest } from './wire'

/** Frame kinds (proto/redirfs.proto). */
const HELLO = 1
const READ = 2
const ANSWER = 3
const REFUSED = 4

/** u32 message length, u8 kind, u32 call id. */
const FRAME_HEAD = 9
/** No message of the data channel comes near this; a length above it is not one of ours. */
const MAX_MESSAGE = 16 * 2 ** 20
/** Bytes the requester's socket reads at a time, into one buffer it reuses. */
const READ_BUFFER = 256 * 1024

let codecs: ReturnType<typeof dataMessages> | undefined
const messages = (): ReturnType<typeof dataMessages> => (codecs ??= dataMessages())

function frame (kind: number, id: number, message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEAD + message.length)
  out.writeUInt32BE(message.length, 0)
  out.writeUInt8(kind, 4)
  out.writeUInt32BE(id, 5)
  out.set(message, FRAME_HEAD)
  return out
}

/** What a frame's receiver expects after it: raw bytes to fill these buffers, then `done`. */
interface Expect { readonly targets: Buffer[], readonly done: () => void }

/**
 * Cuts a byte stream fed in pieces into frames, and after a frame that
 * announces bytes, copies them into the buffers its receiver gave.
 */
class FrameReader {
  private readonly head = Buffer.alloc(FRAME_HEAD)
  private headFilled = 0
  private message?: Buffer
  private messageFilled = 0
  /** The bytes an answer announced, while they arrive. */
  private expect?: Expect
  private target = 0
  private targetFilled = 0

  constructor (private readonly onFrame: (kind: number, id: number, message: Buffer) => Expect | undefined) {}

  /** Throws on a frame no peer of ours sends. */
  feed (chunk: Buffer, length = chunk.length): void {
    let at = 0
    while (at < length) {
      if (this.expect !== undefined) {
        const into = this.expect.targets[this.target]
        const n = Math.min(into.length - this.targetFilled, length - at)
        chunk.copy(into, this.targetFilled, at, at + n)
        at += n
        this.targetFilled += n
        this.advanceTargets()
        continue
      }
      if (this.message === undefined) {
        const n = Math.min(FRAME_HEAD - this.headFilled, length - at)
        chunk.copy(this.head, this.headFilled, at, at + n)
        at += n
        this.headFilled += n
        if (this.headFilled < FRAME_HEAD) continue
        this.headFilled = 0
        const size = this.head.readUInt32BE(0)
        if (size > MAX_MESSAGE) throw new Error(`a frame of ${size} bytes is not a redirfs data-channel frame`)
        this.message = Buffer.allocUnsafe(size)
        this.messageFilled = 0
      } else {
        const n = Math.min(this.message.length - this.messageFilled, length - at)
        chunk.copy(this.message, this.messageFilled, at, at + n)
        at += n
        this.messageFilled += n
      }
      if (this.messageFilled < this.message.length) continue
      const message = this.message
      this.message = undefined
      this.expect = this.onFrame(this.head.readUInt8(4), this.head.readUInt32BE(5), message)
      this.target = 0
      this.targetFilled = 0
      this.advanceTargets()
    }
  }

  /** Past every filled buffer (empty files at once); `done` when none is left. */
  private advanceTargets (): void {
    if (this.expect === undefined) return
    const { targets, done } = this.expect
    while (this.target < targets.length && this.targetFilled === targets[this.target].length) {
      this.target++
      this.targetFilled = 0
    }
    if (this.target === targets.length) {
      this.expect = undefined
      done()
    }
  }
}

// ---------------------------------------------------------------- owner side

export interface DataHandler {
  read (request: ReadRequest): Promise<ReadReply>
  /** An answer's bytes are on the wire (or its requester is gone): the buffers are the handler's again. */
  shipped? (bytes: Buffer[]): void
}

export interface RunningDataServer {
  readonly port: number
  close (): void
}

/** How a failed read is told to its requester: a refusal's own status, anything else INTERNAL. */
export type StatusOf = (err: unknown, call: string) => { code: grpc.status, details: string }

export async function startDataServer (
  host: string,
  port: number,
  credentials: Credentials,
  token: string,
  handler: DataHandler,
  statusOf: StatusOf,
  onRefused: (peer: string) => void,
  log: Logger
): Promise<RunningDataServer> {
  const sockets = new Set<net.Socket>()
  const serve = (socket: net.Socket): void => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', err => log.debug({ peer: socket.remoteAddress, err: err.message }, 'data channel connection failed'))
    socket.setNoDelay(true)
    let greeted = false
    let refused = false
    const refuse = (code: grpc.status, details: string): void => {
      refused = true
      socket.end(frame(REFUSED, 0, messages().answer.encode(answerHead(code, details))))
    }
    const reader = new FrameReader((kind, id, message) => {
      if (refused) return undefined
      if (!greeted) {
        const hello = kind === HELLO ? messages().hello.decode(message) : undefined
        if (hello === undefined || !tokenMatches(hello.token, token)) {
          onRefused(`${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`)
          refuse(grpc.status.UNAUTHENTICATED, 'wrong or missing cluster token')
        } else if (hello.protocolVersion !== PROTOCOL_VERSION) {
          refuse(grpc.status.FAILED_PRECONDITION, `protocol version ${hello.protocolVersion}, this node speaks ${PROTOCOL_VERSION}; run the same redirfs on every node`)
        } else {
          greeted = true
        }
        return undefined
      }
      if (kind !== READ) throw new Error(`a frame of kind ${kind} where a read was expected`)
      let request: ReadRequest
      try {
        request = messages().request.decode(message)
      } catch (err) {
        socket.write(frame(ANSWER, id, messages().answer.encode(answerHead(grpc.status.INVALID_ARGUMENT, `a malformed read: ${(err as Error).message}`))))
        return undefined
      }
      // A failure of the read or of its answer's encoding is the requester's error, never this process's.
      handler.read(request).then(reply => writeAnswer(socket, id, reply, handler)).catch((err: unknown) => {
        const { code, details } = statusOf(err, 'read')
        if (!socket.destroyed) socket.write(frame(ANSWER, id, messages().answer.encode(answerHead(code, details))))
      })
      return undefined
    })
    socket.on('data', (chunk: Buffer) => {
      try {
        reader.feed(chunk)
      } catch (err) {
        log.warn({ peer: socket.remoteAddress, err: (err as Error).message }, 'closed a data channel connection that sent something else')
        socket.destroy()
      }
    })
  }
  const pem = credentials.pem
  const server = pem !== undefined
    ? tls.createServer({ cert: pem.cert, key: pem.key, ca: pem.ca, requestCert: true, rejectUnauthorized: true }).on('secureConnection', serve)
    : net.createServer(serve)
  server.on('tlsClientError', (err: Error) => log.debug({ err: err.message }, 'a data channel TLS handshake failed'))
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, unbracketed(host), () => { server.off('error', reject); resolve() })
  })
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () => {
      server.close()
      for (const socket of sockets) socket.destroy()
    }
  }
}

function answerHead (status: grpc.status, details: string): ReadAnswer {
  return { status, details, files: [], sizes: [], servedAbsent: true, batchNumber: 0, vcEpoch: 0 }
}

/** The answer's head, then each file's bytes from where the owner held them; the buffers go back once written. */
function writeAnswer (socket: net.Socket, id: number, reply: ReadReply, handler: DataHandler): void {
  const files: FileData[] = reply.served === null ? reply.batch : [reply.served, ...reply.batch]
  const bytes = files.map(f => f.data)
  if (socket.destroyed) {
    handler.shipped?.(bytes)
    return
  }
  const head = messages().answer.encode({
    status: grpc.status.OK,
    details: '',
    files: files.map(f => f.file),
    sizes: bytes.map(b => b.length),
    servedAbsent: reply.served === null,
    batchNumber: reply.batchNumber,
    vcEpoch: reply.vcEpoch
  })
  socket.cork()
  socket.write(frame(ANSWER, id, head))
  // Writes complete in order: once the last is done, no write holds any of these buffers.
  bytes.forEach((b, i) => socket.write(b, i === bytes.length - 1 ? () => handler.shipped?.(bytes) : undefined))
  socket.uncork()
}

function unbracketed (host: string): string { return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host }

// ---------------------------------------------------------------- requester side

interface PendingRead {
  resolve (reply: ReadReply): void
  reject (err: Error): void
  timer: NodeJS.Timeout
}

/** One connection to a peer's data channel; any failure fails every read it carries. */
class Connection {
  private readonly pending = new Map<number, PendingRead>()
  private readonly socket: net.Socket
  private nextId = 1
  closed = false

  constructor (host: string, port: number, credentials: Credentials, token: string, private readonly peer: string, private readonly onClosed: () => void) {
    const reader = new FrameReader((kind, id, message) => this.onFrame(kind, id, message))
    const feed = (buffer: Buffer, length: number): boolean => {
      try {
        reader.feed(buffer, length)
      } catch (err) {
        this.fail(new PeerCallError(peer, grpc.status.INTERNAL, `data channel: ${(err as Error).message}`))
      }
      return true
    }
    const pem = credentials.pem
    if (pem !== undefined) {
      this.socket = tls.connect({ host: unbracketed(host), port, cert: pem.cert, key: pem.key, ca: pem.ca })
      this.socket.on('data', (chunk: Buffer) => feed(chunk, chunk.length))
    } else {
      // Plain TCP reads into one buffer, reused: no buffer is made per read.
      const readBuffer = Buffer.allocUnsafe(READ_BUFFER)
      this.socket = net.connect({ host: unbracketed(host), port, onread: { buffer: readBuffer, callback: length => feed(readBuffer, length) } })
    }
    this.socket.setNoDelay(true)
    this.socket.on('error', err => this.fail(new PeerCallError(peer, grpc.status.UNAVAILABLE, `data channel: ${err.message}`)))
    this.socket.on('close', () => this.fail(new PeerCallError(peer, grpc.status.UNAVAILABLE, 'data channel: the connection closed')))
    this.socket.write(frame(HELLO, 0, messages().hello.encode({ token, protocolVersion: PROTOCOL_VERSION })))
  }

  read (request: ReadRequest, deadlineMs: number): { answer: Promise<ReadReply>, cancel: (err: Error) => void } {
    const id = this.nextId++
    if (this.nextId > 0xffffffff) this.nextId = 1
    const answer = new Promise<ReadReply>((resolve, reject) => {
      const timer = setTimeout(() => this.settle(id)?.reject(new PeerCallError(this.peer, grpc.status.DEADLINE_EXCEEDED, `no answer within ${deadlineMs / 1000}s`)), deadlineMs)
      this.pending.set(id, { resolve, reject, timer })
    })
    this.socket.write(frame(READ, id, messages().request.encode(request)))
    return { answer, cancel: err => this.settle(id)?.reject(err) }
  }

  close (): void {
    this.fail(new PeerCallError(this.peer, grpc.status.CANCELLED, 'data channel: closed'))
  }

  private settle (id: number): PendingRead | undefined {
    const read = this.pending.get(id)
    if (read === undefined) return undefined
    this.pending.delete(id)
    clearTimeout(read.timer)
    return read
  }

  private onFrame (kind: number, id: number, message: Buffer): Expect | undefined {
    const answer = messages().answer.decode(message)
    if (kind === REFUSED) {
      this.fail(new PeerCallError(this.peer, answer.status, answer.details))
      return undefined
    }
    if (kind !== ANSWER) throw new Error(`a frame of kind ${kind} where an answer was expected`)
    if (answer.status !== grpc.status.OK) {
      this.settle(id)?.reject(new PeerCallError(this.peer, answer.status, answer.details))
      return undefined
    }
    const targets = answer.sizes.map(size => sampleBuffers.take(size))
    return {
      targets,
      done: () => {
        const read = this.settle(id)
        if (read === undefined) {
          // Its open gave up waiting (cancelled, or past its deadline): nobody takes these bytes.
          for (const bytes of targets) sampleBuffers.give(bytes)
          return
        }
        const files = answer.files.map((file, i) => ({ file, data: targets[i] }))
        const served = answer.servedAbsent ? null : files.shift() ?? null
        read.resolve({ served, batch: files, batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch })
      }
    }
  }

  private fail (err: Error): void {
    if (!this.closed) {
      this.closed = true
      this.socket.destroy()
      this.onClosed()
    }
    for (const id of [...this.pending.keys()]) this.settle(id)?.reject(err)
  }
}

/** Reads from one peer's data channel, over one connection made when first needed and made again after a failure. */
export class DataClient {
  private port?: number
  private connection?: Connection

  constructor (private readonly host: string, private readonly credentials: Credentials, private readonly token: string, private readonly peer: string) {}

  /** Where the peer's data channel listens, as its handshake says; 0 until one has. */
  get knownPort (): number { return this.port ?? 0 }

  setPort (port: number): void {
    if (port === this.port) return
    this.port = port
    this.connection?.close()
  }

  read (request: ReadRequest, deadlineMs: number): { answer: Promise<ReadReply>, cancel: (err: Error) => void } {
    if (this.port === undefined) throw new Error('the peer\'s data port is not known before a handshake')
    if (this.connection === undefined || this.connection.closed) {
      const connection: Connection = new Connection(this.host, this.port, this.credentials, this.token, this.peer, () => {
        if (this.connection === connection) this.connection = undefined
      })
      this.connection = connection
    }
    return this.connection.read(request, deadlineMs)
  }

  close (): void { this.connection?.close() }
}
