/**
 * Calls to one peer. Every call carries the cluster token and a deadline,
 * and waits for the connection up to that deadline (so a peer restarting
 * its listener is not taken for dead at once); a peer that cannot be
 * reached within it is `unreachable`, which the node treats as dead.
 *
 * A read may take long for good reasons: the owner may be loading a chunk,
 * or waiting on a third node that died. So a read is not judged by its own
 * duration: while it is out, the peer is pinged every `timeoutMs`, and only
 * a ping that goes unanswered makes the read fail as unreachable. A slow
 * but live owner is never taken for dead; a dead one is known within about
 * two timeouts.
 */
import * as grpc from '@grpc/grpc-js'

import { FsError } from '../errors'
import type { PeerAddress } from './addresses'
import { TOKEN_METADATA, type Credentials } from './security'
import { CHANNEL_OPTIONS, peerService, type HandshakeReply, type HandshakeRequest, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type StatsReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest } from './wire'

/** A call to a peer that failed; an open that needed it fails with EIO. */
export class PeerCallError extends FsError {
  constructor (readonly peer: string, readonly status: grpc.status, readonly details: string) {
    super('EIO', `peer ${peer}: ${details}`)
  }

  /** The peer did not answer at all (not up, gone, or too slow). */
  get unreachable (): boolean {
    return this.status === grpc.status.UNAVAILABLE || this.status === grpc.status.DEADLINE_EXCEEDED || this.status === grpc.status.CANCELLED
  }
}

type Unary<Req, Rep> = (request: Req, metadata: grpc.Metadata, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, reply?: Rep) => void) => grpc.ClientUnaryCall

/** The longest a read may take while the owner keeps answering pings (under FUSE's 120 s open limit). */
const READ_DEADLINE_MS = 110_000

export class PeerClient {
  private readonly client: grpc.Client & Record<string, Unary<unknown, unknown>>

  constructor (readonly address: PeerAddress, credentials: Credentials, private readonly token: string, private readonly timeoutMs: number) {
    const Client = grpc.makeGenericClientConstructor(peerService(), 'Peer')
    this.client = new Client(address.text, credentials.client, CHANNEL_OPTIONS) as unknown as grpc.Client & Record<string, Unary<unknown, unknown>>
  }

  private async call<Req, Rep> (method: string, request: Req, timeoutMs = this.timeoutMs, watch?: { ping: Req }): Promise<Rep> {
    // grpc-js fails fast by default; waiting for the connection is a metadata option.
    const metadata = new grpc.Metadata({ waitForReady: true })
    metadata.set(TOKEN_METADATA, this.token)
    let watchdog: NodeJS.Timeout | undefined
    try {
      return await new Promise<Rep>((resolve, reject) => {
        const call = this.client[method].call(this.client, request, metadata, { deadline: Date.now() + timeoutMs }, (err, reply) => {
          if (err !== null) reject(new PeerCallError(this.address.text, err.code, err.details === '' ? err.message : err.details))
          else resolve(reply as Rep)
        })
        if (watch === undefined) return
        const check = (): void => {
          this.call<Req, Rep>('handshake', watch.ping).then(
            () => { watchdog = setTimeout(check, this.timeoutMs) },
            (err: unknown) => {
              if (!(err instanceof PeerCallError && err.unreachable)) { watchdog = setTimeout(check, this.timeoutMs); return }
              call.cancel()
              reject(new PeerCallError(this.address.text, grpc.status.UNAVAILABLE, `did not answer a ping within ${this.timeoutMs / 1000}s while a read was out`))
            })
        }
        watchdog = setTimeout(check, this.timeoutMs)
      })
    } finally {
      clearTimeout(watchdog)
    }
  }

  async handshake (request: HandshakeRequest, timeoutMs?: number): Promise<HandshakeReply> { return await this.call('handshake', request, timeoutMs) }
  /** `ping`: a handshake that the peer answers at once while the read is out. */
  async read (request: ReadRequest, ping: HandshakeRequest): Promise<ReadReply> { return await this.call<unknown, ReadReply>('read', request, READ_DEADLINE_MS, { ping }) }
  async reclaim (request: ReclaimRequest): Promise<ReclaimReply> { return await this.call('reclaim', request) }
  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> { return await this.call('takeoverState', request) }
  async stats (): Promise<StatsReply> { return await this.call('stats', {}) }
  async sync (request: SyncRequest): Promise<object> { return await this.call('sync', request) }

  close (): void { this.client.close() }
}
