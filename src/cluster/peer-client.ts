/**
 * Calls to one peer. Every gRPC call carries the cluster token and a
 * deadline, and waits for the connection up to that deadline (so a peer
 * restarting its listener is not taken for dead at once); a peer that
 * cannot be reached within it is `unreachable`, which the node treats as
 * dead. Reads and reclaims go over the peer's data channel
 * (data-channel.ts), whose port each handshake reply names; a data
 * connection that cannot be made, or breaks, fails its calls as
 * unreachable too.
 *
 * A read may take long for good reasons: the owner may be loading a chunk,
 * or waiting on a third node that died. So a read is not judged by its own
 * duration: while it is out, the peer is pinged every `timeoutMs`, and only
 * a ping that goes unanswered makes the read fail as unreachable. A slow
 * but live owner is never taken for dead; a dead one is known within about
 * two timeouts.
 */
import * as grpc from '@grpc/grpc-js'

import type { SampleBuffers } from '../chunks/sample-buffers'
import type { PeerAddress } from './addresses'
import { PeerCallError } from './call-error'
import { DataClient } from './data-channel'
import { TOKEN_METADATA, type Credentials } from './security'
import { peerStub, type HandshakeReply, type HandshakeRequest, type PeerStub, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type StatsReply, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest, type Generation } from './wire'

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

  private async call<Rep> (invoke: Invoke<Rep>, timeoutMs = this.timeoutMs): Promise<Rep> {
    // grpc-js fails fast by default; waiting for the connection is a metadata option.
    const metadata = new grpc.Metadata({ waitForReady: true })
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

  /** `ping`: a handshake that the peer answers at once while the read is out. */
  async read (request: ReadRequest, ping: HandshakeRequest): Promise<ReadReply> {
    const { answer, cancel } = (await this.dataChannel(ping)).read(request, READ_DEADLINE_MS)
    let watchdog: NodeJS.Timeout | undefined
    let answered = false
    const check = (): void => {
      this.handshake(ping).then(
        () => { if (!answered) watchdog = setTimeout(check, this.timeoutMs) },
        (err: unknown) => {
          if (answered) return
          if (!(err instanceof PeerCallError && err.unreachable)) { watchdog = setTimeout(check, this.timeoutMs); return }
          cancel(new PeerCallError(this.address.text, grpc.status.UNAVAILABLE, `did not answer a ping within ${this.timeoutMs / 1000}s while a read was out`))
        })
    }
    watchdog = setTimeout(check, this.timeoutMs)
    try {
      return await answer
    } finally {
      answered = true // a ping still out when the answer came must not start another
      clearTimeout(watchdog)
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
