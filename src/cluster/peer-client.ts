/**
 * Calls to one peer. Every gRPC call carries the cluster token and a
 * deadline, and waits for the connection up to that deadline (so a peer
 * restarting its listener is not missed); a peer that cannot be reached
 * within it is `unreachable`. Reads and reclaims go over the peer's data
 * channel (data-channel.ts), whose port each handshake reply names; a data
 * connection that cannot be made, or breaks, fails its calls as
 * unreachable too. None of this is a death: only the cluster's leases say
 * who is dead (membership.ts).
 *
 * A read may take long for good reasons: the owner may be loading a chunk,
 * or waiting on a third node. So a read is not judged by its duration: it
 * waits for its answer until the caller gives up on it (the owner was
 * taken for dead: `signal`), or for at most the FUSE open's limit.
 */
import * as grpc from '@grpc/grpc-js'

import type { SampleBuffers } from '../chunks/sample-buffers'
import type { PeerAddress } from './addresses'
import { PeerCallError } from './call-error'
import { DataClient } from './data-channel'
import { TOKEN_METADATA, type Credentials } from './security'
import { peerStub, type HandshakeReply, type HandshakeRequest, type PeerStub, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type RenewReply, type RenewRequest, type StatsReply, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest, type Generation } from './wire'

/** One call on the stub, given what every call carries (the token's metadata, the deadline) and where its answer goes. */
type Invoke<Rep> = (metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<Rep>) => grpc.ClientUnaryCall

/** The longest a read may take while the owner keeps answering pings (under FUSE's 120 s open limit). */
const READ_DEADLINE_MS = 110_000

export class PeerClient {
  private readonly client: PeerStub
  private readonly data: DataClient

  /** `buffers`: the pool the files of data-channel answers are read into. */
  constructor (readonly address: PeerAddress, credentials: Credentials, private readonly token: string, private readonly timeoutMs: number, buffers: SampleBuffers) {
    this.client = peerStub(address.text, credentials.client)
    this.data = new DataClient(address.host, credentials, token, address.text, buffers)
  }

  private async call<Rep> (invoke: Invoke<Rep>, timeoutMs = this.timeoutMs, waitForReady = true): Promise<Rep> {
    // grpc-js fails fast by default; waiting for the connection is a metadata option.
    const metadata = new grpc.Metadata({ waitForReady })
    metadata.set(TOKEN_METADATA, this.token)
    return await new Promise<Rep>((resolve, reject) => {
      invoke(metadata, { deadline: Date.now() + timeoutMs }, (err, reply) => {
        if (err !== null) reject(new PeerCallError(this.address.text, err.code, err.details === '' ? err.message : err.details))
        else resolve(reply as Rep)
      })
    })
  }

  /** Also learns where the peer's data channel listens. */
  async handshake (request: HandshakeRequest, timeoutMs?: number): Promise<HandshakeReply> {
    const reply = await this.call<HandshakeReply>((metadata, options, done) => this.client.handshake(request, metadata, options, done), timeoutMs)
    this.data.setPort(reply.dataPort)
    return reply
  }

  /** `ping`: the handshake that names the data channel, if none has yet; `signal`: the caller gives up (the answer, if one comes, is dropped). */
  async read (request: ReadRequest, ping: HandshakeRequest, signal?: AbortSignal): Promise<ReadReply> {
    const { answer, cancel } = (await this.dataChannel(ping)).read(request, READ_DEADLINE_MS)
    const giveUp = (): void => cancel(new PeerCallError(this.address.text, grpc.status.CANCELLED, 'it was taken for dead while a read was out'))
    if (signal?.aborted === true) giveUp()
    signal?.addEventListener('abort', giveUp)
    try {
      return await answer
    } finally {
      signal?.removeEventListener('abort', giveUp)
    }
  }

  /** On the data channel, within the peer timeout; `ping`: the handshake that names the channel, if none has yet. */
  async reclaim (request: ReclaimRequest, ping: HandshakeRequest): Promise<ReclaimReply> {
    return await (await this.dataChannel(ping)).reclaim(request, this.timeoutMs).answer
  }

  /** The peer was mounted again: its data channel listens elsewhere now, which its next handshake says. */
  forgetDataChannel (): void { this.data.forgetPort() }

  /** The peer's data channel, after the handshake (`ping`) that names its port, if none has yet. */
  private async dataChannel (ping: HandshakeRequest): Promise<DataClient> {
    if (this.data.knownPort === 0) await this.handshake(ping)
    return this.data
  }

  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> {
    return await this.call<TakeoverStateReply>((metadata, options, done) => this.client.takeoverState(request, metadata, options, done))
  }

  async stats (): Promise<StatsReply> {
    return await this.call<StatsReply>((metadata, options, done) => this.client.stats({}, metadata, options, done))
  }

  /** Fails at once when there is no connection: another renewal follows soon. */
  async renew (request: RenewRequest): Promise<RenewReply> {
    return await this.call<RenewReply>((metadata, options, done) => this.client.renew(request, metadata, options, done), this.timeoutMs / 2, false)
  }

  async newGeneration (generation: Generation): Promise<Generation> {
    return await this.call<Generation>((metadata, options, done) => this.client.newGeneration(generation, metadata, options, done))
  }

  async sync (request: SyncRequest): Promise<SyncReply> {
    return await this.call<SyncReply>((metadata, options, done) => this.client.sync(request, metadata, options, done))
  }

  close (): void {
    this.client.close()
    this.data.close()
  }
}
