/**
 * The peer service a node runs for the others, on gRPC and, for reads and
 * reclaims, on the data channel beside it (data-channel.ts; the handshake reply names
 * its port). It only checks and maps: every call must carry the cluster
 * token, checked from its headers before any of its message is read
 * (refused and logged otherwise), malformed requests get INVALID_ARGUMENT,
 * refusals their own status, and the work itself is the node's (`PeerHandler`).
 */
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import { UsageError } from '../errors'
import type { PeerAddress } from './addresses'
import { PeerRefusal } from './call-error'
import { startDataServer, type StatusOf } from './data-channel'
import { TOKEN_METADATA, tokenMatches, type Credentials } from './security'
import type { PeerHandlers } from './generated/redirfs/v1/Peer'
import { CHANNEL_OPTIONS, peerService, requestLimit, type HandshakeReply, type HandshakeRequest, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type StatsReply, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest, type Generation, type RenewRequest, type RenewReply } from './wire'

export interface PeerHandler {
  /** The server adds where its data channel listens. */
  handshake (request: HandshakeRequest): Omit<HandshakeReply, 'dataPort'>
  /** Served on the data channel, as is `reclaim`. */
  read (request: ReadRequest): Promise<ReadReply>
  /** An answer on the data channel is on the wire: its bytes' buffers are the handler's again. */
  shipped? (bytes: Buffer[]): void
  reclaim (request: ReclaimRequest): ReclaimReply
  takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply>
  sync (request: SyncRequest): SyncReply
  stats (): StatsReply
  /** A peer began a generation; answers with this node's, after. */
  newGeneration (request: Generation): Generation
  /** A peer asks for its lease (membership.ts). */
  renew (request: RenewRequest): RenewReply
}

export interface RunningPeerServer {
  readonly port: number
  readonly dataPort: number
  close (): Promise<void>
}

/**
 * Refuses a call without the cluster token as soon as its headers arrive.
 * grpc-js reads a call's message only once its handler asks, after the
 * headers; a call refused here is never read, so a stranger can make a
 * node hold no more than headers (docs/cluster.md, "Security").
 */
function requireToken (token: string, refused: (call: string, peer: string) => void): grpc.ServerInterceptor {
  return (method, call) => new grpc.ServerInterceptingCall(call, {
    start: next => next({
      onReceiveMetadata: (metadata, pass) => {
        if (tokenMatches(metadata.get(TOKEN_METADATA)[0], token)) return pass(metadata)
        refused(method.path, call.getPeer())
        call.sendStatus({ code: grpc.status.UNAUTHENTICATED, details: 'wrong or missing cluster token' })
      }
    })
  })
}

/**
 * `samples`: the files of the layout, which bound the requests taken (`requestLimit`);
 * `dataPort`: where the data channel listens on the same host; 0, any free port.
 */
export async function startPeerServer (listen: PeerAddress, credentials: Credentials, token: string, handler: PeerHandler, log: Logger, samples: number, dataPort = 0): Promise<RunningPeerServer> {
  let refusedLogged = 0
  const refusedCall = (call: string, peer: string): void => {
    // One line per refusal, up to a point: a misconfigured peer retries a lot.
    if (refusedLogged++ < 100) log.warn({ call, peer }, 'refused a peer call: wrong or missing cluster token')
  }
  const server = new grpc.Server({
    ...CHANNEL_OPTIONS,
    'grpc.max_receive_message_length': requestLimit(samples),
    interceptors: [requireToken(token, refusedCall)]
  })
  const statusOf: StatusOf = (err, call) => {
    const code = err instanceof PeerRefusal ? err.status : grpc.status.INTERNAL
    if (code === grpc.status.INTERNAL) log.error({ call, err: (err as Error).message }, 'peer call failed')
    return { code, details: (err as Error).message }
  }
  const unary = <Req, Rep>(name: string, work: (request: Req) => Rep | Promise<Rep>): grpc.handleUnaryCall<Req, Rep> =>
    (call, callback) => {
      Promise.resolve().then(() => work(call.request)).then(
        reply => callback(null, reply),
        (err: unknown) => callback(statusOf(err, name)))
    }
  // First, so that every handshake can name its port.
  const data = await startDataServer(listen.host, dataPort, credentials, token, handler, statusOf, peer => refusedCall('data channel', peer), log)
    .catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(err.code === 'EADDRINUSE'
        ? `cannot listen for the data channel on port ${dataPort} of ${listen.host}: the port is in use; give --data-port a free port, or leave it out for any free one`
        : `cannot listen for the data channel on ${listen.host}: ${err.message}`)
    })
  const handlers: PeerHandlers = {
    Handshake: unary<HandshakeRequest, HandshakeReply>('handshake', request => ({ ...handler.handshake(request), dataPort: data.port })),
    TakeoverState: unary<TakeoverStateRequest, TakeoverStateReply>('takeoverState', async request => await handler.takeoverState(request)),
    Sync: unary<SyncRequest, SyncReply>('sync', request => handler.sync(request)),
    Stats: unary<object, StatsReply>('stats', () => handler.stats()),
    NewGeneration: unary<Generation, Generation>('newGeneration', request => handler.newGeneration(request)),
    Renew: unary<RenewRequest, RenewReply>('renew', request => handler.renew(request))
  }
  server.addService(peerService(), handlers)
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(listen.text, credentials.server, (err, bound) => {
      if (err === null) resolve(bound)
      else if (err.message.includes('EADDRINUSE')) reject(new UsageError(`cannot listen on ${listen.text}: the port is in use (by another program, or another node's mount on this machine); give this node a free port in --peers, or --listen`))
      else reject(new UsageError(`cannot listen on ${listen.text}: ${err.message}`))
    })
  }).catch((err: Error) => { data.close(); throw err })
  return {
    port,
    dataPort: data.port,
    close: async () => await new Promise<void>(resolve => {
      data.close()
      // Give calls in flight a moment, then cut the rest. Done then: a graceful shutdown's callback waits for every
      // session to close, and one with a frozen peer (SIGSTOPped, its call open) never did, so an unmount waited for it
      // until it was killed.
      const timer = setTimeout(() => { server.forceShutdown(); resolve() }, 2000)
      server.tryShutdown(() => { clearTimeout(timer); resolve() })
    })
  }
}
