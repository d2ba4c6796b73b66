/**
 * Who is in the cluster and who is alive, as this node sees it: a client
 * per peer, the start-up handshake, the check every caller's node id goes
 * through, who answers for a VC now, and deaths.
 *
 * A peer that does not answer a call within the peer timeout is dead to
 * this node for the rest of the mount (docs/design.md, "Cluster"). Whoever
 * must act on a death (the ledger, the takeover) subscribes with `onDeath`
 * and is told once per peer.
 */
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import { UsageError } from '../errors'
import type { Layout, NodeId, VcId } from '../redirect/layout'
import { ownerOrder } from '../redirect/takeover'
import type { PeerAddress } from './addresses'
import { PeerCallError } from './call-error'
import { PeerClient } from './peer-client'
import type { Credentials } from './security'
import { PROTOCOL_VERSION, type HandshakeReply, type HandshakeRequest } from './wire'

export type Storage = 'shared' | 'sharded'

export interface MembershipOptions {
  node: NodeId
  peers: readonly PeerAddress[]
  token: string
  credentials: Credentials
  storage: Storage
  /** A peer that does not answer a call within this is dead. */
  peerTimeoutMs: number
  /** How long start-up waits for every peer to answer the handshake. */
  startupTimeoutMs: number
}

/** What asking a peer whether it is still there gives. */
export type Probe = { readonly kind: 'answers' } | { readonly kind: 'unreachable', readonly details: string } | { readonly kind: 'failed', readonly message: string }

export type PeerState = 'self' | 'alive' | 'dead'

export class Membership {
  readonly counters = { peersLost: 0 }
  private readonly clients: (PeerClient | undefined)[]
  private readonly dead = new Set<NodeId>()
  private readonly deathListeners: ((node: NodeId, why: string) => void)[] = []

  constructor (private readonly layout: Layout, readonly options: MembershipOptions, private readonly log: Logger) {
    this.clients = options.peers.map((address, node) => node === options.node ? undefined : new PeerClient(address, options.credentials, options.token, options.peerTimeoutMs))
  }

  get node (): NodeId { return this.options.node }
  get storage (): Storage { return this.options.storage }

  /** The client for `peer` (never this node itself). */
  client (peer: NodeId): PeerClient {
    const client = this.clients[peer]
    if (client === undefined) throw new Error(`node ${peer} is this node; it has no client`)
    return client
  }

  /** Every other node this node still takes for alive. */
  livePeers (): NodeId[] {
    return this.clients.flatMap((client, node) => client !== undefined && !this.dead.has(node) ? [node] : [])
  }

  isDead (node: NodeId): boolean { return this.dead.has(node) }

  stateOf (node: NodeId): PeerState { return node === this.node ? 'self' : this.dead.has(node) ? 'dead' : 'alive' }

  addressOf (node: NodeId): string { return this.options.peers[node].text }

  /** Who answers for `vc` now, as this node sees it: the first live node of its owner order (only its home, with sharded packs). */
  ownerOf (vc: VcId): NodeId | undefined {
    const candidates = this.options.storage === 'sharded' ? [this.layout.vcs[vc].home] : ownerOrder(this.layout, vc)
    return candidates.find(node => !this.dead.has(node))
  }

  onDeath (listener: (node: NodeId, why: string) => void): void { this.deathListeners.push(listener) }

  /** `node` is dead to this node from now on; the listeners hear of it once. */
  markDead (node: NodeId, why: string): void {
    if (node === this.node || this.dead.has(node)) return
    this.dead.add(node)
    this.counters.peersLost++
    for (const listener of this.deathListeners) listener(node, why)
  }

  /** Handshakes with every peer; throws a one-line reason on any mismatch or silence. */
  async handshakeAll (): Promise<void> {
    const request = this.handshakeRequest()
    await Promise.all(this.livePeers().map(async node => {
      const client = this.client(node)
      let reply: HandshakeReply
      try {
        reply = await client.handshake(request, this.options.startupTimeoutMs)
      } catch (err) {
        throw this.handshakeError(node, err)
      }
      const problem = this.mismatch(reply.protocolVersion, reply.layoutHash, reply.node, node)
      if (problem !== undefined) throw new UsageError(`peer ${node} at ${client.address.text}: ${problem}`)
    }))
    this.log.info({ node: this.node, peers: this.options.peers.map(p => p.text), storage: this.options.storage }, 'cluster handshake done')
  }

  /** Asks `peer` whether it is still there (a handshake, which also pings). */
  async probe (peer: NodeId): Promise<Probe> {
    try {
      await this.client(peer).handshake(this.handshakeRequest())
      return { kind: 'answers' }
    } catch (err) {
      if (err instanceof PeerCallError && err.unreachable) return { kind: 'unreachable', details: err.details }
      return { kind: 'failed', message: (err as Error).message }
    }
  }

  /** What this node says of itself in a handshake (and a read's ping). */
  handshakeRequest (): HandshakeRequest {
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, nodes: this.layout.nodes, layoutHash: this.layout.hash }
  }

  /** Why a peer's handshake is refused, or undefined. */
  refusalOf (request: HandshakeRequest): string | undefined {
    return this.checkNode(request.node) ?? this.mismatch(request.protocolVersion, request.layoutHash, this.node, this.node) ??
      (request.nodes !== this.layout.nodes ? `it has ${request.nodes} nodes in --peers, this node has ${this.layout.nodes}` : undefined)
  }

  /** Why `node` cannot be the sender of a call, or undefined. */
  checkNode (node: number): string | undefined {
    if (!Number.isInteger(node) || node < 0 || node >= this.layout.nodes) return `node ${node} is not in this cluster of ${this.layout.nodes}`
    return undefined
  }

  private handshakeError (node: NodeId, err: unknown): UsageError {
    const address = this.addressOf(node)
    if (!(err instanceof PeerCallError)) return new UsageError(`handshake with peer ${node} at ${address} failed: ${(err as Error).message}`)
    if (err.status === grpc.status.UNAUTHENTICATED) return new UsageError(`peer ${node} at ${address} refused our cluster token: every node needs the same --token-file`)
    if (err.status === grpc.status.FAILED_PRECONDITION) return new UsageError(`peer ${node} at ${address} refused us: ${err.details}`)
    if (err.unreachable) return new UsageError(`peer ${node} at ${address} did not answer within ${this.options.startupTimeoutMs / 1000}s (${err.details}); start every node's mount at about the same time (mount-scripts/ do)`)
    return new UsageError(`handshake with peer ${node} at ${address} failed: ${err.details}`)
  }

  /** What differs between a peer and us, or undefined. */
  private mismatch (version: number, hash: string, theirId: number, expectedId: number): string | undefined {
    if (version !== PROTOCOL_VERSION) return `protocol version ${version}, this node speaks ${PROTOCOL_VERSION}; run the same redirfs on every node`
    if (theirId !== expectedId) return `it is node ${theirId}, but --peers lists it as node ${expectedId}; give every node the same --peers in the same order`
    if (hash !== this.layout.hash) return `layout ${hash}, this node has ${this.layout.hash}; every node must mount the same dataset with the same --chunk-size, --seed, --memory and --peers`
    return undefined
  }

  close (): void {
    for (const client of this.clients) client?.close()
  }
}
