/**
 * Who is in the cluster and who is alive, as this node sees it: a client
 * per peer, the start-up handshake, the check every caller's node id goes
 * through, who answers for a VC now, and deaths.
 *
 * A peer that does not answer a call within the peer timeout is dead to
 * this node (docs/design.md, "Cluster protocol"). Whoever must act on a death (the
 * ledger, the takeover) subscribes with `onDeath` and is told once per
 * death.
 *
 * A node that was remounted after it died comes back: every mount has a new
 * incarnation, and a handshake from a node with another incarnation than
 * the one known (dead or not: a quick restart is a death too) makes it
 * *rejoining*: alive, answering calls, but answering for none of its
 * virtual chunks (their adopters keep them, exactly) until the next
 * generation, when every node starts its epochs afresh and owners are
 * again each VC's first live node (generations.ts).
 *
 * The generation the cluster is in lives here too, since every call
 * carries it: whoever must reset for a later one subscribes with
 * `onGeneration`.
 */
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import { UsageError } from '../errors'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { Layout, NodeId, VcId } from '../redirect/layout'
import { ownerOrder } from '../redirect/takeover'
import type { PeerAddress } from './addresses'
import { PeerCallError } from './call-error'
import { PeerClient } from './peer-client'
import type { Credentials } from './security'
import { randomInt } from 'node:crypto'
import { compareGenerations, describeGeneration, FIRST_GENERATION, generationOf, type GenerationId } from './generations'
import { PROTOCOL_VERSION, type HandshakeRequest } from './wire'

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
  /** The node's sample buffers: peers' answers are read into them. */
  buffers: SampleBuffers
}

/** What asking a peer whether it is still there gives. */
export type Probe = { readonly kind: 'answers' } | { readonly kind: 'unreachable', readonly details: string } | { readonly kind: 'failed', readonly message: string }

export type PeerState = 'self' | 'alive' | 'rejoining' | 'dead'

export class Membership {
  readonly counters = { peersLost: 0, peersRejoined: 0, generations: 0 }
  private readonly clients: (PeerClient | undefined)[]
  private readonly dead = new Set<NodeId>()
  /** Nodes back after they died (this one too, when it is): they answer for no VC until the next generation. */
  private readonly rejoining = new Set<NodeId>()
  private readonly incarnations = new Map<NodeId, number>()
  private readonly deathListeners: ((node: NodeId, why: string) => void)[] = []
  private readonly generationListeners: ((generation: GenerationId) => void)[] = []
  /** This mount's incarnation: random, so a node remounted is known to be another. */
  readonly incarnation = randomInt(1, 2 ** 47)
  generation: GenerationId = FIRST_GENERATION

  constructor (private readonly layout: Layout, readonly options: MembershipOptions, private readonly log: Logger) {
    this.clients = options.peers.map((address, node) => node === options.node ? undefined : new PeerClient(address, options.credentials, options.token, options.peerTimeoutMs, options.buffers))
  }

  get node (): NodeId { return this.options.node }
  get storage (): Storage { return this.options.storage }

  /** The client for `peer` (never this node itself). */
  client (peer: NodeId): PeerClient {
    const client = this.clients[peer]
    if (client === undefined) throw new Error(`node ${peer} is this node; it has no client`)
    return client
  }

  /** Every other node this node still takes for alive (rejoining ones too: they answer calls). */
  livePeers (): NodeId[] {
    return this.clients.flatMap((client, node) => client !== undefined && !this.dead.has(node as NodeId) ? [node as NodeId] : [])
  }

  isDead (node: NodeId): boolean { return this.dead.has(node) }

  /** Back after it died, and answering for no VC until the next generation. */
  isRejoining (node: NodeId): boolean { return this.rejoining.has(node) }

  /** May answer for a VC now: alive and not rejoining. */
  mayOwn (node: NodeId): boolean { return !this.dead.has(node) && !this.rejoining.has(node) }

  stateOf (node: NodeId): PeerState {
    if (node === this.node) return this.rejoining.has(node) ? 'rejoining' : 'self'
    return this.dead.has(node) ? 'dead' : this.rejoining.has(node) ? 'rejoining' : 'alive'
  }

  addressOf (node: NodeId): string { return this.options.peers[node].text }

  /** Who answers for `vc` now, as this node sees it: the first node of its owner order that may own (only its home, with sharded packs). */
  ownerOf (vc: VcId): NodeId | undefined {
    const candidates = this.options.storage === 'sharded' ? [this.layout.vcs[vc].home] : ownerOrder(this.layout, vc)
    return candidates.find(node => this.mayOwn(node))
  }

  onDeath (listener: (node: NodeId, why: string) => void): void { this.deathListeners.push(listener) }

  /** The incarnation of `node` this node knows (undefined before its first handshake). */
  incarnationOf (node: NodeId): number | undefined { return this.incarnations.get(node) }

  /**
   * `node` is dead to this node from now on; the listeners hear of it once.
   * `incarnation`: the one a failed call was made to; a failure of an
   * incarnation that has since come back is old news, and ignored.
   */
  markDead (node: NodeId, why: string, incarnation?: number): void {
    if (node === this.node || this.dead.has(node)) return
    if (incarnation !== undefined && this.incarnations.get(node) !== incarnation) return
    this.dead.add(node)
    this.rejoining.delete(node)
    this.counters.peersLost++
    for (const listener of this.deathListeners) listener(node, why)
  }

  onGeneration (listener: (generation: GenerationId) => void): void { this.generationListeners.push(listener) }

  /**
   * Takes note of a generation a peer is in (a call or an answer carried
   * it): a later one is started here at once (its listeners reset). Gives
   * how the peer's compares with this node's, now.
   */
  observe (theirs: GenerationId): number {
    const order = compareGenerations(theirs, this.generation)
    if (order > 0) this.startGeneration(theirs)
    return order
  }

  /** Starts `generation` here: nodes back from the dead own their VCs again from now on. */
  startGeneration (generation: GenerationId): void {
    if (compareGenerations(generation, this.generation) <= 0) return
    this.generation = generation
    this.rejoining.clear()
    this.counters.generations++
    this.log.info({ generation: generation.number, run: generation.key }, `${describeGeneration(generation)} began: every virtual chunk starts a new epoch`)
    for (const listener of this.generationListeners) listener(generation)
  }

  /**
   * A peer's handshake: a node seen before with another incarnation came
   * back after it died (whether or not this node had noticed the death).
   * Gives whether it is rejoining.
   */
  admit (node: NodeId, incarnation: number): boolean {
    const known = this.incarnations.get(node)
    this.incarnations.set(node, incarnation)
    if (known !== undefined && known !== incarnation) {
      this.rejoining.delete(node)
      this.markDead(node, 'it was mounted again')
      this.clients[node]?.forgetDataChannel()
      this.dead.delete(node)
      this.rejoining.add(node)
      this.counters.peersRejoined++
      this.log.info({ peer: node, address: this.addressOf(node) }, `peer ${node} (${this.addressOf(node)}) is back: it takes its virtual chunks back at the next generation (the next training run)`)
    } else if (known === undefined && this.dead.has(node)) {
      // Dead to us before we ever saw it answer (we came up while it was gone): it is back now.
      this.dead.delete(node)
      this.clients[node]?.forgetDataChannel()
      this.rejoining.add(node)
      this.counters.peersRejoined++
    }
    return this.rejoining.has(node)
  }

  /** The nodes this node takes for dead, for a node that comes back. */
  deadNodes (): NodeId[] { return [...this.dead] }

  /**
   * Handshakes with every peer; throws a one-line reason on any mismatch or
   * silence. A node mounted again after it died learns it from the peers'
   * replies: it rejoins (owning nothing until the next generation), in
   * their generation, and does not wait for the nodes they take for dead.
   */
  async handshakeAll (): Promise<void> {
    const request = this.handshakeRequest()
    const waiting = new Set(this.livePeers())
    let rejoins = false
    await new Promise<void>((resolve, reject) => {
      const settle = (): void => {
        for (const node of waiting) if (this.dead.has(node)) waiting.delete(node)
        if (waiting.size === 0) resolve()
      }
      for (const node of [...waiting]) {
        const client = this.client(node)
        client.handshake(request, this.options.startupTimeoutMs).then(reply => {
          if (!waiting.has(node)) return
          const problem = this.mismatch(reply.protocolVersion, reply.layoutHash, reply.node, node)
          if (problem !== undefined) { reject(new UsageError(`peer ${node} at ${client.address.text}: ${problem}`)); return }
          waiting.delete(node)
          rejoins ||= reply.rejoining
          this.observe(generationOf(reply))
          for (const dead of reply.dead as NodeId[]) if (dead !== this.node) this.markDead(dead, `node ${node} takes it for dead`)
          settle()
        }, err => {
          if (!waiting.has(node)) return
          if (this.dead.has(node)) { settle(); return }
          reject(this.handshakeError(node, err))
        })
      }
      settle()
    })
    if (rejoins) {
      this.rejoining.add(this.node)
      this.log.info({ node: this.node, generation: this.generation.number }, 'this node was mounted again after it died: it answers for its virtual chunks again from the next training run on')
    }
    this.log.info({ node: this.node, peers: this.options.peers.map(p => p.text), storage: this.options.storage, dead: this.deadNodes() }, 'cluster handshake done')
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
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, nodes: this.layout.nodes, layoutHash: this.layout.hash, incarnation: this.incarnation, generation: this.generation }
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
