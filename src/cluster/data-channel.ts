/**
 * The data channel: how the two calls that carry sample bytes, Read (an
 * open of a file another node owns) and Reclaim (an owner taking a file
 * back from a holder's mirror), travel between peers, beside the gRPC peer
 * service (docs/design.md, "The data channel"). Sample bytes are most of
 * what peers exchange, and through grpc-js each one was copied three times
 * in JavaScript, into a fresh buffer each time (bench/rpc-cost.js measures
 * what a read costs). Here the answering node writes a file's bytes
 * straight from the buffer it held them in, and the caller reads them
 * straight into a sample buffer (src/chunks/sample-buffers.ts): one copy,
 * and no buffer made per message.
 *
 * Frames and messages: proto/redirfs.proto, "The data channel". A
 * connection is TLS when the cluster uses TLS, and its first frame carries
 * the cluster token; a wrong one is answered with a refusal and closed.
 * One connection per peer carries any number of calls at once; answers
 * come back in the order they are ready.
 */
import net from 'node:net'
import tls from 'node:tls'
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import { PeerCallError } from './call-error'
import { generationOf } from './generations'
import { tokenMatches, type Credentials } from './security'
import { dataMessages, PROTOCOL_VERSION, type FileData, type MessageCodec, type ReadAnswer, type ReadReply, type ReadRequest, type ReclaimAnswer, type ReclaimReply, type ReclaimRequest } from './wire'

/** Frame kinds (proto/redirfs.proto). */
const HELLO = 1
const READ = 2
const READ_ANSWER = 3
const REFUSED = 4
const RECLAIM = 5
const RECLAIM_ANSWER = 6

/** u32 message length, u8 kind, u32 call id. */
const FRAME_HEAD = 9
/** No message of the data channel comes near this; a length above it is not one of ours. */
const MAX_MESSAGE = 16 * 2 ** 20
/**
 * Before its HELLO a connection is anyone's: its first frame is a token and
 * a version (a few hundred bytes), so nothing larger is taken in; it has
 * `GREETING_MS` to send it, and `UNGREETED_MAX` such connections are held at
 * once. Without these, anyone who can reach the port had the daemon
 * allocate 16 MiB a connection, or hold descriptors for ever, unasked.
 */
const HELLO_MAX = 4096
const GREETING_MS = 10_000
const UNGREETED_MAX = 64
/** Bytes the caller's socket reads at a time, into one buffer it reuses. */
const SOCKET_READ_BYTES = 256 * 1024

let codecs: ReturnType<typeof dataMessages> | undefined
const messages = (): ReturnType<typeof dataMessages> => (codecs ??= dataMessages())

/** What every answer starts with (both answers share their first four fields). */
type AnswerHead = Pick<ReadAnswer, 'status' | 'details' | 'files' | 'sizes'>

const answerCodec = (kind: number): MessageCodec<AnswerHead> | undefined =>
  kind === READ_ANSWER || kind === REFUSED ? messages().readAnswer : kind === RECLAIM_ANSWER ? messages().reclaimAnswer : undefined

function frame (kind: number, id: number, message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEAD + message.length)
  out.writeUInt32BE(message.length, 0)
  out.writeUInt8(kind, 4)
  out.writeUInt32BE(id, 5)
  out.set(message, FRAME_HEAD)
  return out
}

/** An answer that says why there is none: the status and details, nothing else. */
const errorFrame = (kind: number, id: number, code: grpc.status, details: string): Buffer =>
  frame(kind, id, answerCodec(kind)!.encode({ status: code, details, files: [], sizes: [] }))

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
  /** The largest message taken in now (HELLO_MAX until a connection is greeted). */
  maxMessage = MAX_MESSAGE

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
        if (size > this.maxMessage) throw new Error(`a frame of ${size} bytes is not a redirfs data-channel frame`)
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

// ---------------------------------------------------------------- answering side

export interface DataHandler {
  read (request: ReadRequest): Promise<ReadReply>
  reclaim (request: ReclaimRequest): ReclaimReply
  /** An answer's bytes are on the wire (or its caller is gone): the buffers are the handler's again. */
  shipped? (bytes: Buffer[]): void
}

export interface RunningDataServer {
  readonly port: number
  close (): void
}

/** How a failed call is told to its caller: a refusal's own status, anything else INTERNAL. */
export type StatusOf = (err: unknown, call: string) => { code: grpc.status, details: string }

/** An answer ready to go: its encoded head and the bytes that follow it. */
interface Answer { readonly head: Uint8Array, readonly bytes: Buffer[] }

function readAnswer (reply: ReadReply): Answer {
  const files: FileData[] = reply.served === null ? reply.batch : [reply.served, ...reply.batch]
  const bytes = files.map(f => f.data)
  const head = messages().readAnswer.encode({
    status: grpc.status.OK,
    details: '',
    files: files.map(f => f.file),
    sizes: bytes.map(b => b.length),
    servedAbsent: reply.served === null,
    batchNumber: reply.batchNumber,
    vcEpoch: reply.vcEpoch,
    generation: reply.generation
  })
  return { head, bytes }
}

function reclaimAnswer (reply: ReclaimReply): Answer {
  const bytes = reply.returned === null ? [] : [reply.returned.data]
  const head = messages().reclaimAnswer.encode({
    status: grpc.status.OK,
    details: '',
    files: reply.returned === null ? [] : [reply.returned.file],
    sizes: bytes.map(b => b.length),
    held: reply.held,
    lastBatch: reply.lastBatch,
    givenBackFiles: reply.givenBackBefore.map(g => g.file),
    givenBackBatches: reply.givenBackBefore.map(g => g.batch)
  })
  return { head, bytes }
}

/** A call the channel serves: its name, its answer's kind, and how a request's bytes become the work that answers it (decoding throws on a malformed one). */
interface ServedCall {
  readonly name: string
  readonly answerKind: number
  decode (message: Uint8Array): () => Promise<Answer>
}

function servedCall<T> (name: string, answerKind: number, codec: MessageCodec<T>, answer: (request: T) => Promise<Answer>): ServedCall {
  return {
    name,
    answerKind,
    decode: message => {
      const request = codec.decode(message)
      return async () => await answer(request)
    }
  }
}

/** Each call the channel serves, by its request's kind. */
function calls (handler: DataHandler): Map<number, ServedCall> {
  return new Map([
    [READ, servedCall('read', READ_ANSWER, messages().read, async request => readAnswer(await handler.read(request)))],
    [RECLAIM, servedCall('reclaim', RECLAIM_ANSWER, messages().reclaim, async request => reclaimAnswer(handler.reclaim(request)))]
  ])
}

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
  const served = calls(handler)
  const sockets = new Set<net.Socket>()
  let ungreeted = 0
  const serve = (socket: net.Socket): void => {
    if (ungreeted >= UNGREETED_MAX) {
      socket.destroy()
      return
    }
    ungreeted++
    const greetingTimer = setTimeout(() => socket.destroy(), GREETING_MS)
    let counted = true
    const uncount = (): void => { if (counted) { counted = false; ungreeted-- } }
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket); uncount(); clearTimeout(greetingTimer) })
    socket.on('error', err => log.debug({ peer: socket.remoteAddress, err: err.message }, 'data channel connection failed'))
    socket.setNoDelay(true)
    let greeted = false
    let refused = false
    const refuse = (code: grpc.status, details: string): void => {
      refused = true
      socket.end(errorFrame(REFUSED, 0, code, details))
    }
    const reader: FrameReader = new FrameReader((kind, id, message) => {
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
          reader.maxMessage = MAX_MESSAGE
          uncount()
          clearTimeout(greetingTimer)
        }
        return undefined
      }
      const call = served.get(kind)
      if (call === undefined) throw new Error(`a frame of kind ${kind} where a call was expected`)
      let work: () => Promise<Answer>
      try {
        work = call.decode(message)
      } catch (err) {
        socket.write(errorFrame(call.answerKind, id, grpc.status.INVALID_ARGUMENT, `a malformed ${call.name}: ${(err as Error).message}`))
        return undefined
      }
      // A failure of the work or of its answer's encoding is the caller's error, never this process's.
      work().then(answer => writeAnswer(socket, call.answerKind, id, answer, handler)).catch((err: unknown) => {
        const { code, details } = statusOf(err, call.name)
        if (!socket.destroyed) socket.write(errorFrame(call.answerKind, id, code, details))
      })
      return undefined
    })
    reader.maxMessage = HELLO_MAX
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

/** The answer's head, then each file's bytes from where this node held them; the buffers go back once written. */
function writeAnswer (socket: net.Socket, kind: number, id: number, { head, bytes }: Answer, handler: DataHandler): void {
  if (socket.destroyed) {
    handler.shipped?.(bytes)
    return
  }
  socket.cork()
  socket.write(frame(kind, id, head))
  // Writes complete in order: once the last is done, no write holds any of these buffers.
  bytes.forEach((b, i) => socket.write(b, i === bytes.length - 1 ? () => handler.shipped?.(bytes) : undefined))
  socket.uncork()
}

function unbracketed (host: string): string { return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host }

// ---------------------------------------------------------------- calling side

/** A call in flight, and how its answer's head and bytes become its reply. */
interface PendingCall {
  finish (head: AnswerHead, files: Buffer[]): void
  reject (err: Error): void
  timer: NodeJS.Timeout
}

/** A call in flight on a connection, and how to give up on it. */
export interface CallInFlight<T> { readonly answer: Promise<T>, cancel: (err: Error) => void }

/** One connection to a peer's data channel; any failure fails every call it carries. */
class Connection {
  private readonly pending = new Map<number, PendingCall>()
  private readonly socket: net.Socket
  private nextId = 1
  closed = false

  /** `onRefused`: the port refused the connection (nothing listens there any more). */
  constructor (host: string, port: number, credentials: Credentials, token: string, private readonly peer: string, private readonly buffers: SampleBuffers, private readonly onClosed: () => void, onRefused: () => void = () => {}) {
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
      const readBuffer = Buffer.allocUnsafe(SOCKET_READ_BYTES)
      this.socket = net.connect({ host: unbracketed(host), port, onread: { buffer: readBuffer, callback: length => feed(readBuffer, length) } })
    }
    this.socket.setNoDelay(true)
    this.socket.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ECONNREFUSED') onRefused()
      this.fail(new PeerCallError(peer, grpc.status.UNAVAILABLE, `data channel: ${err.message}`))
    })
    this.socket.on('close', () => this.fail(new PeerCallError(peer, grpc.status.UNAVAILABLE, 'data channel: the connection closed')))
    this.socket.write(frame(HELLO, 0, messages().hello.encode({ token, protocolVersion: PROTOCOL_VERSION })))
  }

  /** Sends a request of `kind`; `finish` makes the reply of the answer's head and its files' bytes. */
  call<T, Head extends AnswerHead> (kind: number, message: Uint8Array, deadlineMs: number, finish: (head: Head, files: Buffer[]) => T): CallInFlight<T> {
    const id = this.nextId++
    if (this.nextId > 0xffffffff) this.nextId = 1
    const answer = new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => this.settle(id)?.reject(new PeerCallError(this.peer, grpc.status.DEADLINE_EXCEEDED, `no answer within ${deadlineMs / 1000}s`)), deadlineMs)
      // The answer's kind is the request's, so its head is this call's Head.
      this.pending.set(id, { finish: (head, files) => resolve(finish(head as Head, files)), reject, timer })
    })
    this.socket.write(frame(kind, id, message))
    return { answer, cancel: err => this.settle(id)?.reject(err) }
  }

  close (): void {
    this.fail(new PeerCallError(this.peer, grpc.status.CANCELLED, 'data channel: closed'))
  }

  private settle (id: number): PendingCall | undefined {
    const call = this.pending.get(id)
    if (call === undefined) return undefined
    this.pending.delete(id)
    clearTimeout(call.timer)
    return call
  }

  private onFrame (kind: number, id: number, message: Buffer): Expect | undefined {
    const codec = answerCodec(kind)
    if (codec === undefined) throw new Error(`a frame of kind ${kind} where an answer was expected`)
    const head = codec.decode(message)
    if (kind === REFUSED) {
      this.fail(new PeerCallError(this.peer, head.status, head.details))
      return undefined
    }
    if (head.status !== grpc.status.OK) {
      this.settle(id)?.reject(new PeerCallError(this.peer, head.status, head.details))
      return undefined
    }
    const targets = head.sizes.map(size => this.buffers.take(size))
    return {
      targets,
      done: () => {
        const call = this.settle(id)
        if (call === undefined) {
          // Its caller gave up waiting (cancelled, or past its deadline): nobody takes these bytes.
          for (const bytes of targets) this.buffers.give(bytes)
          return
        }
        call.finish(head, targets)
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

/** Calls to one peer's data channel, over one connection made when first needed and made again after a failure. */
export class DataClient {
  private port?: number
  private connection?: Connection

  /** `buffers`: the pool answers' files are read into (the node's own, so its mirror's bytes count against --remote-memory there). */
  constructor (private readonly host: string, private readonly credentials: Credentials, private readonly token: string, private readonly peer: string, private readonly buffers: SampleBuffers) {}

  /** Where the peer's data channel listens, as its handshake says; 0 until one has. */
  get knownPort (): number { return this.port ?? 0 }

  /** Forgets the port (the peer restarted): the next call needs a handshake first. */
  forgetPort (): void {
    this.port = undefined
    this.connection?.close()
    this.connection = undefined
  }

  setPort (port: number): void {
    if (port === this.port) return
    this.port = port
    this.connection?.close()
  }

  read (request: ReadRequest, deadlineMs: number): CallInFlight<ReadReply> {
    return this.connected().call(READ, messages().read.encode(request), deadlineMs, (head: ReadAnswer, bytes): ReadReply => {
      const files = head.files.map((file, i) => ({ file, data: bytes[i] }))
      const served = head.servedAbsent ? null : files.shift() ?? null
      return { served, batch: files, batchNumber: head.batchNumber, vcEpoch: head.vcEpoch, generation: generationOf(head) }
    })
  }

  reclaim (request: ReclaimRequest, deadlineMs: number): CallInFlight<ReclaimReply> {
    return this.connected().call(RECLAIM, messages().reclaim.encode(request), deadlineMs, (head: ReclaimAnswer, bytes): ReclaimReply =>
      ({ held: head.held, lastBatch: head.lastBatch, returned: head.files.length > 0 ? { file: head.files[0], data: bytes[0] } : null, givenBackBefore: head.givenBackFiles.map((file, i) => ({ file, batch: head.givenBackBatches[i] ?? 0 })) }))
  }

  close (): void { this.connection?.close() }

  private connected (): Connection {
    if (this.port === undefined) throw new Error('the peer\'s data port is not known before a handshake')
    if (this.connection === undefined || this.connection.closed) {
      const port = this.port
      const connection: Connection = new Connection(this.host, port, this.credentials, this.token, this.peer, this.buffers, () => {
        if (this.connection === connection) this.connection = undefined
      }, () => {
        // Nothing listens there: the peer was mounted again (its new process may be known to this node only from
        // news, with no handshake of its own here yet). The next call asks its peer service where it listens now.
        if (this.port === port) this.port = undefined
      })
      this.connection = connection
    }
    return this.connection
  }
}
