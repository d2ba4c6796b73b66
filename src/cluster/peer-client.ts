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
import { peerStub, type HandshakeReply, type HandshakeRequest, type PeerStub, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type StatsReply, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest } from './wire'

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

/** One call on the stub, given what every call carries (the token's metadata, the deadline) and where its answer goes. */
type Invoke<Rep> = (metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<Rep>) => grpc.ClientUnaryCall

/** The longest a read may take while the owner keeps answering pings (under FUSE's 120 s open limit). */
const READ_DEADLINE_MS = 110_000

export class PeerClient {
  private readonly client: PeerStub

  constructor (readonly address: PeerAddress, credentials: Credentials, private readonly token: string, private readonly timeoutMs: number) {
    this.client = peerStub(address.text, credentials.client)
  }

  private async call<Rep> (invoke: Invoke<Rep>, timeoutMs = this.timeoutMs, watch?: { ping: HandshakeRequest }): Promise<Rep> {
    // grpc-js fails fast by default; waiting for the connection is a metadata option.
    const metadata = new grpc.Metadata({ waitForReady: true })
    metadata.set(TOKEN_METADATA, this.token)
    let watchdog: NodeJS.Timeout | undefined
    try {
      return await new Promise<Rep>((resolve, reject) => {
        const call = invoke(metadata, { deadline: Date.now() + timeoutMs }, (err, reply) => {
          if (err !== null) reject(new PeerCallError(this.address.text, err.code, err.details === '' ? err.message : err.details))
          else resolve(reply as Rep)
        })
        if (watch === undefined) return
        const check = (): void => {
          this.handshake(watch.ping).then(
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

  async handshake (request: HandshakeRequest, timeoutMs?: number): Promise<HandshakeReply> {
    return await this.call<HandshakeReply>((metadata, options, done) => this.client.handshake(request, metadata, options, done), timeoutMs)
  }

  /** `ping`: a handshake that the peer answers at once while the read is out. */
  async read (request: ReadRequest, ping: HandshakeRequest): Promise<ReadReply> {
    return await this.call<ReadReply>((metadata, options, done) => this.client.read(request, metadata, options, done), READ_DEADLINE_MS, { ping })
  }

  async reclaim (request: ReclaimRequest): Promise<ReclaimReply> {
    return await this.call<ReclaimReply>((metadata, options, done) => this.client.reclaim(request, metadata, options, done))
  }

  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> {
    return await this.call<TakeoverStateReply>((metadata, options, done) => this.client.takeoverState(request, metadata, options, done))
  }

  async stats (): Promise<StatsReply> {
    return await this.call<StatsReply>((metadata, options, done) => this.client.stats({}, metadata, options, done))
  }

  async sync (request: SyncRequest): Promise<SyncReply> {
    return await this.call<SyncReply>((metadata, options, done) => this.client.sync(request, metadata, options, done))
  }

  close (): void { this.client.close() }
}
