/**
 * Who is in the cluster and who is alive, as this node sees it: a client
 * per peer, the start-up handshake, the check every caller's node id goes
 * through, leases, who answers for a VC now, and deaths
 * (docs/design.md, "Deaths and fencing").
 *
 * Every node renews its lease with every peer a few times per peer
 * timeout; the renewals carry what each knows of deaths and suspicions
 * (liveness.ts keeps the rules). A node serves anything (its own virtual
 * chunks, its mirrors, a peer's read) only while a majority of the cluster
 * granted it a lease. A failed call is never a death by itself: a node is
 * dead once a majority stopped hearing from it, once its port refuses a
 * connection, or once it learns that a peer stopped hearing from it. Then
 * it is fenced: it answers for nothing, its trainer's opens fail until
 * the next training run, and it comes back as a new incarnation, as a
 * remounted node does. Whoever must act on a death (the ledger, the
 * takeover) subscribes with `onDeath` and is told once per death.
 *
 * A node that was remounted, or fenced, comes back: a handshake from a
 * node with a later incarnation than the one known makes it *rejoining*:
 * alive, answering calls, but answering for none of its virtual chunks
 * (their adopters keep them, exactly) until the next generation, when
 * every node starts its epochs afresh and owners are again each VC's first
 * live node (generations.ts).
 *
 * The generation the cluster is in lives here too, since every call
 * carries it: whoever must reset for a later one subscribes with
 * `onGeneration`.
 */
import net from 'node:net'
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import { FsError, UsageError } from '../errors'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { Layout, NodeId, VcId } from '../redirect/layout'
import { ownerOrder } from '../redirect/takeover'
import type { PeerAddress } from './addresses'
import { PeerCallError, takenForDead } from './call-error'
import { PeerClient } from './peer-client'
import type { Credentials } from './security'
import { compareGenerations, describeGeneration, FIRST_GENERATION, generationOf, type GenerationId } from './generations'
import { Liveness, newIncarnation, type Death, type Incarnation, type Suspicion } from './liveness'
import { PROTOCOL_VERSION, type HandshakeReply, type HandshakeRequest, type RenewReply, type RenewRequest } from './wire'

export type Storage = 'shared' | 'sharded'

export interface MembershipOptions {
  node: NodeId
  peers: readonly PeerAddress[]
  token: string
  credentials: Credentials
  storage: Storage
  /** How long a lease this node grants: a peer not heard from for longer is suspected. */
  peerTimeoutMs: number
  /** How long start-up waits for every peer to answer the handshake. */
  startupTimeoutMs: number
  /** The node's sample buffers: peers' answers are read into them. */
  buffers: SampleBuffers
}

export type PeerState = 'self' | 'alive' | 'suspected' | 'rejoining' | 'dead'

/** What a renewal tells of a peer's trainers: the runs named by a launcher they read now. */
export type RunsListener = (peer: NodeId, reading: readonly string[]) => void

/** The incarnations a message names alive, as liveness takes them. */
const aliveOf = (alive: ReadonlyArray<{ node: number, incarnation: number }>): Incarnation[] => alive.map(known => ({ node: known.node as NodeId, incarnation: Number(known.incarnation) }))

/** Renewals go out this many times per peer timeout. */
const RENEWALS_PER_TIMEOUT = 10

export class Membership {
  readonly counters = { peersLost: 0, peersRejoined: 0, generations: 0, fenced: 0 }
  private readonly clients: (PeerClient | undefined)[]
  private readonly liveness: Liveness
  /** Nodes back after they died (this one too, when it is): they answer for no VC until the next generation. */
  private readonly rejoining = new Set<NodeId>()
  private readonly deathListeners: ((node: NodeId, why: string) => void)[] = []
  private readonly generationListeners: ((generation: GenerationId) => void)[] = []
  private readonly fenceListeners: (() => void)[] = []
  private readonly runsListeners: RunsListener[] = []
  private readonly ownersListeners: (() => void)[] = []
  /** Calls out to a node, to give up on once it is dead. */
  private readonly deathWatchers = new Set<{ readonly node: NodeId, readonly onDead: () => void }>()
  /** Peers with a renewal out, and with a check of their port out. */
  private readonly renewing = new Set<NodeId>()
  private readonly probing = new Set<NodeId>()
  /** Opens waiting for this node to hold a quorum of leases. */
  private quorumWaiters: (() => void)[] = []
  /** Why each peer's handshake was refused here, for a start-up still waiting for it. */
  private readonly refusedHere = new Map<NodeId, string>()
  private onRefusedHere?: () => void
  private timer?: NodeJS.Timeout
  /** Grants only once start-up learned every peer's news. */
  private started = false
  private closing = false
  /** The generation in which this node was fenced, and why: its trainer's opens fail until a later one. */
  private fencedIn?: { generation: GenerationId, why: string }
  /** Since its fencing, not every live peer has had this node's handshake: it owns nothing, whatever the generation. */
  private rejoinPending = false
  /** Why a start-up must fail whatever it waits for (another node claims this one's id). */
  private conflict?: string
  /** The runs this node's trainers read now (set by the cluster node). */
  reading: () => readonly string[] = () => []
  generation: GenerationId = FIRST_GENERATION

  constructor (private readonly layout: Layout, readonly options: MembershipOptions, private readonly log: Logger) {
    this.clients = options.peers.map((_, node) => node === options.node ? undefined : this.newClient(node as NodeId))
    this.liveness = new Liveness(options.node, layout.nodes, newIncarnation(), options.peerTimeoutMs)
  }

  get node (): NodeId { return this.options.node }
  get storage (): Storage { return this.options.storage }
  /** This node's incarnation: a new one at each mount, and after each fencing. */
  get incarnation (): number { return this.liveness.incarnation }

  private newClient (node: NodeId): PeerClient {
    const { peers, credentials, token, peerTimeoutMs, buffers } = this.options
    return new PeerClient(peers[node], credentials, token, peerTimeoutMs, buffers)
  }

  /** The client for `peer` (never this node itself). */
  client (peer: NodeId): PeerClient {
    const client = this.clients[peer]
    if (client === undefined) throw new Error(`node ${peer} is this node; it has no client`)
    return client
  }

  /** Every other node this node does not take for dead (rejoining and suspected ones too: they answer calls). */
  livePeers (): NodeId[] {
    return this.clients.flatMap((client, node) => client !== undefined && !this.isDead(node as NodeId) ? [node as NodeId] : [])
  }

  isDead (node: NodeId): boolean { return node !== this.node && this.liveness.isDead(node) }

  /** Back after it died, and answering for no VC until the next generation. */
  isRejoining (node: NodeId): boolean { return this.rejoining.has(node) }

  /** May answer for a VC now: alive and not rejoining. */
  mayOwn (node: NodeId): boolean { return !this.isDead(node) && !this.rejoining.has(node) }

  stateOf (node: NodeId): PeerState {
    if (node === this.node) return this.rejoining.has(node) ? 'rejoining' : 'self'
    const state = this.liveness.stateOf(node)
    return state === 'alive' && this.rejoining.has(node) ? 'rejoining' : state
  }

  addressOf (node: NodeId): string { return this.options.peers[node].text }

  /** Who answers for `vc` now, as this node sees it: the first node of its owner order that may own (only its home, with sharded packs). */
  ownerOf (vc: VcId): NodeId | undefined {
    const candidates = this.options.storage === 'sharded' ? [this.layout.vcs[vc].home] : ownerOrder(this.layout, vc)
    return candidates.find(node => this.mayOwn(node))
  }

  onDeath (listener: (node: NodeId, why: string) => void): void { this.deathListeners.push(listener) }

  /** Calls `onDead` once `node` is dead, unless the returned function is called first. */
  whenDead (node: NodeId, onDead: () => void): () => void {
    const watcher = { node, onDead }
    this.deathWatchers.add(watcher)
    return () => { this.deathWatchers.delete(watcher) }
  }

  /** This node was taken for dead: it must drop what it answers for. */
  onFence (listener: () => void): void { this.fenceListeners.push(listener) }

  /** A node that owned VCs now owns none in this generation (it rejoins): their next owners take them. */
  onOwnersChanged (listener: () => void): void { this.ownersListeners.push(listener) }

  /** A peer's renewal said which runs its trainers read. */
  onPeerRuns (listener: RunsListener): void { this.runsListeners.push(listener) }

  /** The incarnation of `node` this node knows (undefined before its first handshake). */
  incarnationOf (node: NodeId): number | undefined { return this.liveness.incarnationOf(node) }

  // ---------------------------------------------------------------- serving

  /** The mount is going away: nothing more is served, asked or retried. */
  get closed (): boolean { return this.closing }

  /** Whether this node has started: its handshakes are done (before, a death changes nothing it answers for). */
  get ready (): boolean { return this.started }

  /** Whether this node may serve now: not fenced, not closing, and a majority of the cluster granted it a lease. */
  mayServe (): boolean {
    return this.fencedIn === undefined && !this.closing && this.liveness.hasQuorum(performance.now())
  }

  /** Why this node's trainer's opens fail, if they do (it was taken for dead in this generation). */
  get fenced (): string | undefined { return this.fencedIn?.why }

  /**
   * Waits until this node may serve; fails with EIO, saying why, if it is
   * fenced, closing, or has held no quorum by `deadline` (performance.now()).
   */
  async untilServing (deadline: number): Promise<void> {
    for (;;) {
      if (this.fencedIn !== undefined) throw this.fencedError()
      if (this.closing) throw new FsError('EIO', 'the mount is going away')
      const now = performance.now()
      if (this.liveness.hasQuorum(now)) return
      if (now >= deadline) {
        throw new FsError('EIO', `this node has not heard from a majority of the cluster's ${this.layout.nodes} nodes for a long while (${this.describePeers()}): it serves nothing until it does`)
      }
      await new Promise<void>(resolve => {
        const timer = setTimeout(resolve, Math.min(deadline - now, this.renewEveryMs))
        this.quorumWaiters.push(() => { clearTimeout(timer); resolve() })
      })
    }
  }

  private fencedError (): FsError {
    return new FsError('EIO', `this node was taken for dead by its peers (${this.fencedIn?.why ?? ''}), so it answers for nothing: its trainer's opens fail until the next training run starts`)
  }

  private describePeers (): string {
    return this.livePeers().map(peer => `node ${peer} ${this.stateOf(peer)}`).join(', ')
  }

  private get renewEveryMs (): number { return Math.max(20, this.options.peerTimeoutMs / RENEWALS_PER_TIMEOUT) }

  // ---------------------------------------------------------------- deaths

  /** Deaths learned: each is told to the listeners once, and a dead node is no longer rejoining. */
  private died (deaths: readonly Death[], why: string): void {
    for (const death of deaths) {
      if (death.node === this.node) continue
      this.rejoining.delete(death.node)
      this.counters.peersLost++
      const cause = death.gone ? `${why}: its process is gone` : why
      for (const listener of this.deathListeners) listener(death.node, cause)
      for (const watcher of [...this.deathWatchers]) if (watcher.node === death.node) watcher.onDead()
    }
    if (deaths.length > 0) this.wakeQuorumWaiters()
  }

  /** What a peer knows of deaths and suspicions; a node that learns it is suspected stops. */
  learn (news: { dead?: readonly Death[], suspicions?: readonly Suspicion[], alive?: readonly Incarnation[] }, from: string): void {
    const { deaths, fenced, backUnheard } = this.liveness.learn(news, performance.now())
    this.died(deaths, `a majority of the cluster stopped hearing from it (as ${from} says)`)
    if (fenced !== undefined) this.fence(fenced)
    for (const { node, incarnation } of backUnheard) this.takeBack(node, incarnation)
  }

  /** Handshakes asked of nodes taken back from news: one at a time each, and none again for a while after one failed. */
  private readonly askingBack = new Set<string>()

  /**
   * A node this node takes for dead is alive again as a later incarnation,
   * say its peers. It may never handshake with this node (two nodes fenced
   * at once each take the other for dead, so neither rejoins with the
   * other), and this node would then answer, from the next generation on,
   * for chunks it took over from it while the rest of the cluster takes it
   * for their owner: so this node takes it back at once, as a handshake
   * would (rejoining, a new client), then gives it a handshake, so that it
   * learns this node's incarnation in turn.
   */
  private takeBack (node: NodeId, incarnation: number): void {
    if (this.closing || this.admitIncarnation(node, incarnation) === 'past') return
    const asked = `${node}:${incarnation}`
    if (this.askingBack.has(asked)) return
    this.askingBack.add(asked)
    this.client(node).handshake(this.handshakeRequest()).then(reply => {
      this.admitReply(node, reply)
      this.askingBack.delete(asked)
    }, (err: Error) => {
      this.log.debug({ peer: node, err: err.message }, 'a handshake with a peer back from the dead failed; its renewals will tell it')
      setTimeout(() => this.askingBack.delete(asked), this.options.peerTimeoutMs).unref()
    })
  }

  /**
   * A peer refused a call because it takes this node for dead. A refusal
   * of an earlier incarnation (this node was fenced since, and that peer
   * has not had its handshake yet) is old news.
   */
  refusedAsDead (peer: NodeId, err: PeerCallError): void {
    const refused = err.takenForDead
    if (refused !== undefined && refused.incarnation !== this.incarnation) {
      void this.client(peer).handshake(this.handshakeRequest()).then(reply => this.admitReply(peer, reply), () => {})
      return
    }
    this.fence(refused?.why ?? err.details)
  }

  /**
   * A call to `peer` could not connect: if its port refuses a connection
   * (its process is gone), that incarnation is dead. A port that accepts
   * (a paused process, whose kernel still does) or does not answer (a
   * host that is down, a partition) proves nothing.
   */
  checkGone (peer: NodeId): void {
    const incarnation = this.liveness.incarnationOf(peer)
    if (incarnation === undefined || this.isDead(peer) || this.probing.has(peer)) return
    this.probing.add(peer)
    const { host, port } = this.options.peers[peer]
    const socket = net.connect({ host: host.replace(/^\[(.*)\]$/, '$1'), port })
    const done = (refused: boolean): void => {
      socket.destroy()
      this.probing.delete(peer)
      if (!refused) return
      const death = this.liveness.gone(peer, incarnation, performance.now())
      if (death !== undefined) this.died([death], `its port ${this.addressOf(peer)} refused a connection`)
    }
    socket.setTimeout(Math.min(2000, this.options.peerTimeoutMs / 2), () => done(false))
    socket.once('connect', () => done(false))
    socket.once('error', (err: NodeJS.ErrnoException) => done(err.code === 'ECONNREFUSED'))
  }

  /**
   * This node (its current incarnation) was taken for dead: it stops
   * answering for anything, its trainer's opens fail until the next
   * generation, and it comes back as a new incarnation that owns nothing
   * (as a remounted node does). A node fenced again before that (paused
   * again, say) comes back as yet another.
   */
  private fence (why: string): void {
    if (this.closing) return
    this.fencedIn = { generation: this.generation, why }
    this.counters.fenced++
    this.liveness.reincarnate(newIncarnation(this.liveness.incarnation), performance.now())
    this.rejoining.add(this.node)
    this.rejoinPending = true
    this.log.error({ why, generation: this.generation.number }, `this node was taken for dead (${why}): it answers for nothing now, its trainer's opens fail with EIO until the next training run, and it rejoins as a remounted node does (a pause or a cut longer than --peer-timeout does this)`)
    for (const listener of this.fenceListeners) listener()
    this.wakeQuorumWaiters()
    void this.rejoin()
  }

  /**
   * A fenced node's handshake with every peer, as its new incarnation: each
   * then takes it as rejoining. Until every live peer has had it, this node
   * owns nothing, even in a later generation: a peer that did not would
   * still take its chunks for its successor's.
   */
  private async rejoin (): Promise<void> {
    const incarnation = this.incarnation
    await Promise.all(this.livePeers().map(async peer => {
      while (!this.closing && !this.isDead(peer) && this.incarnation === incarnation) {
        try {
          this.admitReply(peer, await this.client(peer).handshake(this.handshakeRequest()))
          return
        } catch (err) {
          if (err instanceof PeerCallError && err.unreachable) this.checkGone(peer)
          await new Promise(resolve => setTimeout(resolve, this.renewEveryMs))
        }
      }
    }))
    if (this.incarnation === incarnation) this.rejoinPending = false
  }

  // ---------------------------------------------------------------- leases

  /** Renews this node's leases, and suspects peers not heard from, a few times per peer timeout (from start-up on). */
  private startRenewing (): void {
    if (this.timer !== undefined) return
    this.timer = setInterval(() => this.renewAll(), this.renewEveryMs)
    this.timer.unref()
  }

  private renewAll (): void {
    const now = performance.now()
    const { suspected, deaths } = this.liveness.tick(now)
    for (const { node } of suspected) {
      this.log.warn({ peer: node, address: this.addressOf(node) }, `peer ${node} (${this.addressOf(node)}) has not renewed its lease for longer than --peer-timeout: this node suspects it, and takes it for dead once a majority of the cluster does`)
    }
    this.died(deaths, 'a majority of the cluster stopped hearing from it')
    for (const peer of this.livePeers()) {
      if (!this.renewing.has(peer) && this.liveness.incarnationOf(peer) !== undefined) void this.renew(peer)
    }
  }

  private async renew (peer: NodeId): Promise<void> {
    this.renewing.add(peer)
    const sentAt = performance.now()
    const incarnation = this.incarnation
    try {
      const reply = await this.client(peer).renew(this.renewRequest())
      if (this.incarnation !== incarnation || this.admitIncarnation(peer, Number(reply.incarnation)) === 'past') return
      this.learn({ dead: reply.dead as Death[], suspicions: reply.suspicions as Suspicion[], alive: aliveOf(reply.alive) }, `node ${peer}`)
      this.observe(generationOf(reply))
      for (const listener of this.runsListeners) listener(peer, reply.reading)
      // Fenced by what it learned: the reply was about an incarnation gone.
      if (this.incarnation !== incarnation) return
      if (reply.takenForDead) {
        this.fence(reply.refusal)
      } else if (reply.grantedMs > 0) {
        this.liveness.granted(peer, Number(reply.incarnation), sentAt, reply.grantedMs)
        this.wakeQuorumWaiters()
      } else if (this.started) {
        this.log.debug({ peer, refusal: reply.refusal }, 'a lease renewal was refused')
        // It has not had our handshake (this node was fenced, or it was remounted): give it one.
        await this.client(peer).handshake(this.handshakeRequest()).then(reply => this.admitReply(peer, reply), () => {})
      }
    } catch (err) {
      this.log.debug({ peer, err: (err as Error).message }, 'a lease renewal failed')
      if (err instanceof PeerCallError && err.unreachable) this.checkGone(peer)
    } finally {
      this.renewing.delete(peer)
    }
  }

  private renewRequest (): RenewRequest {
    const { dead, suspicions } = this.liveness.news()
    return { node: this.node, incarnation: this.incarnation, generation: this.generation, dead, suspicions, alive: this.liveness.alive(), reading: [...this.reading()], rejoining: this.rejoining.has(this.node) }
  }

  /**
   * A peer's renewal: a grant, unless this node has not started (it grants
   * only once it knows what every peer knows), or takes the peer for dead.
   * A peer that says it owns nothing in this generation is taken at its
   * word (a fenced node not yet back with every peer).
   */
  renewalFrom (request: RenewRequest): RenewReply {
    const node = request.node as NodeId
    // The asker itself is alive as the incarnation it renews: a node just mounted, which has not had its handshake
    // reply yet, must not take the asker's earlier incarnation, dead in the news, for its current one.
    const alive = [...aliveOf(request.alive), { node, incarnation: Number(request.incarnation) }]
    this.learn({ dead: request.dead as Death[], suspicions: request.suspicions as Suspicion[], alive }, `node ${node}`)
    const generation = this.observe(generationOf(request))
    for (const listener of this.runsListeners) listener(node, request.reading)
    const renewal = this.liveness.renewalFrom(node, Number(request.incarnation), performance.now(), this.started)
    if ('grantedMs' in renewal && generation === 0 && request.rejoining && !this.rejoining.has(node)) {
      this.rejoining.add(node)
      for (const listener of this.ownersListeners) listener()
    }
    const { dead, suspicions } = this.liveness.news()
    const base = { incarnation: this.incarnation, generation: this.generation, dead, suspicions, alive: this.liveness.alive(), reading: [...this.reading()] }
    return 'grantedMs' in renewal ? { ...base, grantedMs: renewal.grantedMs, refusal: '', takenForDead: false } : { ...base, grantedMs: 0, refusal: renewal.refusal, takenForDead: renewal.takenForDead }
  }

  private wakeQuorumWaiters (): void {
    const waiters = this.quorumWaiters
    this.quorumWaiters = []
    for (const wake of waiters) wake()
  }

  // ---------------------------------------------------------------- generations

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

  /** Starts `generation` here: nodes back from the dead (this one too, if it was fenced) own their VCs again from now on. */
  startGeneration (generation: GenerationId): void {
    if (compareGenerations(generation, this.generation) <= 0) return
    this.generation = generation
    this.rejoining.clear()
    if (this.rejoinPending) this.rejoining.add(this.node)
    this.fencedIn = undefined
    this.counters.generations++
    this.log.info({ generation: generation.number, run: generation.key }, `${describeGeneration(generation)} began: every virtual chunk starts a new epoch`)
    for (const listener of this.generationListeners) listener(generation)
  }

  // ---------------------------------------------------------------- handshakes

  /**
   * A peer's handshake: a node seen before with a later incarnation came
   * back after it died or was fenced (whether or not this node had noticed
   * the death). Throws the refusal of an incarnation taken for dead. Gives
   * whether it is rejoining.
   */
  admit (node: NodeId, incarnation: number): boolean {
    const admitted = this.admitIncarnation(node, incarnation)
    if (admitted === 'past') throw takenForDead(incarnation, `node ${this.node} takes that incarnation of node ${node} for dead`)
    return this.rejoining.has(node)
  }

  /** Takes note of `incarnation` of `node`, from its handshake or its answer. */
  private admitIncarnation (node: NodeId, incarnation: number): 'new' | 'known' | 'back' | 'past' {
    const earlier = this.liveness.incarnationOf(node)
    const { kind, death } = this.liveness.admit(node, incarnation, performance.now())
    if (death !== undefined) this.died([death], 'it was mounted again, or rejoined')
    // Another process than the one known (back; or the first heard of, after an earlier one known only from news,
    // such as a remount that failed while this node was paused): start afresh with it, its reconnection backoff
    // and data port included.
    if (kind === 'back' || (kind === 'new' && earlier !== undefined)) {
      this.clients[node]?.close()
      this.clients[node] = this.newClient(node)
    }
    if (kind === 'back') {
      this.rejoining.add(node)
      // Its VCs go to their next owners now: the death told above found it alive (its new incarnation) and not yet rejoining.
      for (const listener of this.ownersListeners) listener()
      this.counters.peersRejoined++
      this.log.info({ peer: node, address: this.addressOf(node) }, `peer ${node} (${this.addressOf(node)}) is back: it takes its virtual chunks back at the next generation (the next training run)`)
    }
    return kind
  }

  /** A peer's handshake reply: its incarnation and what it knows (nothing, from an incarnation taken for dead). */
  private admitReply (node: NodeId, reply: HandshakeReply): void {
    if (this.admitIncarnation(node, Number(reply.incarnation)) === 'past') return
    this.learn({ dead: reply.dead as Death[], suspicions: reply.suspicions as Suspicion[], alive: aliveOf(reply.alive) }, `node ${node}`)
    this.observe(generationOf(reply))
  }

  /** Every death this node knows. */
  deaths (): Death[] { return this.liveness.news().dead }

  /** What a handshake reply tells of this node: its incarnation, every death and suspicion it knows, and who it knows alive. */
  handshakeNews (): Pick<HandshakeReply, 'incarnation' | 'dead' | 'suspicions' | 'alive'> {
    return { incarnation: this.incarnation, ...this.liveness.news(), alive: this.liveness.alive() }
  }

  /**
   * Handshakes with every peer; throws a one-line reason on any mismatch or
   * silence, or as soon as this node refused a peer's own handshake (it
   * knows what differs). A node mounted again after it died learns it from
   * the peers' replies: it rejoins (owning nothing until the next
   * generation), in their generation, and does not wait for the nodes they
   * take for dead, but does for one they know alive as a later incarnation.
   */
  async handshakeAll (): Promise<void> {
    const request = this.handshakeRequest()
    const answered = new Set<NodeId>()
    /** Peers with a handshake call out: one waited for without one (named alive again after its call failed) is asked again. */
    const asking = new Set<NodeId>()
    let rejoins = false
    let outcome: 'waiting' | 'started' | 'failed' = 'waiting'
    this.startRenewing()
    const unwatch: (() => void)[] = []
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error): void => { if (outcome === 'waiting') { outcome = 'failed'; reject(err) } }
      // Every peer not taken for dead answers first: one a later reply names alive again is waited for too, one that dies meanwhile no longer.
      const settle = (): void => {
        if (outcome !== 'waiting') return
        if (this.conflict !== undefined) { fail(new UsageError(this.conflict)); return }
        const waiting = this.livePeers().filter(node => !answered.has(node))
        for (const node of waiting) {
          const refused = this.refusedHere.get(node)
          if (refused !== undefined) { fail(new UsageError(`peer ${node} at ${this.addressOf(node)} cannot join: ${refused}`)); return }
        }
        if (waiting.length === 0) { outcome = 'started'; resolve(); return }
        for (const node of waiting) if (!asking.has(node)) ask(node)
      }
      this.onRefusedHere = settle
      // Every peer, not only those alive now: one dead already may be named alive again, then die again.
      for (const [node, client] of this.clients.entries()) if (client !== undefined) unwatch.push(this.whenDead(node as NodeId, settle))
      const ask = (node: NodeId): void => {
        const client = this.client(node)
        asking.add(node)
        client.handshake(request, this.options.startupTimeoutMs).finally(() => asking.delete(node)).then(reply => {
          const problem = this.mismatch(reply.protocolVersion, reply.layoutHash, reply.node, node, reply.samples)
          // A peer not waited for (taken for dead from another's news) that answers after start-up is alive: admitted.
          if (outcome !== 'waiting') { if (outcome === 'started' && problem === undefined) this.admitReply(node, reply); return }
          if (problem !== undefined) { fail(new UsageError(`peer ${node} at ${client.address.text}: ${problem}`)); return }
          answered.add(node)
          rejoins ||= reply.rejoining
          this.admitReply(node, reply)
          settle()
        }, err => {
          if (outcome !== 'waiting' || answered.has(node)) return
          if (this.isDead(node)) { settle(); return }
          // Its channel was replaced meanwhile, which fails the calls on the old one ("Channel closed before
          // call started"): another incarnation of that node called us (a remount, or another node given its
          // --node). That is no answer from it: ask again on the new channel.
          if (this.client(node) !== client) { ask(node); return }
          fail(this.handshakeError(node, err))
        })
      }
      settle()
    }).finally(() => {
      this.onRefusedHere = undefined
      for (const stop of unwatch) stop()
    })
    this.started = true
    if (rejoins) {
      this.rejoining.add(this.node)
      this.log.info({ node: this.node, generation: this.generation.number }, 'this node was mounted again after it died: it answers for its virtual chunks again from the next training run on')
    }
    this.log.info({ node: this.node, peers: this.options.peers.map(p => p.text), storage: this.options.storage, dead: this.clients.flatMap((_, n) => this.isDead(n as NodeId) ? [n] : []) }, 'cluster handshake done')
  }

  /** What this node says of itself in a handshake. */
  handshakeRequest (): HandshakeRequest {
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, nodes: this.layout.nodes, layoutHash: this.layout.hash, incarnation: this.incarnation, generation: this.generation, samples: this.layout.files.length }
  }

  /** Why a peer's handshake is refused, or undefined; a refusal is remembered, for a start-up that waits for that peer. */
  refusalOf (request: HandshakeRequest): string | undefined {
    const problem = this.checkNode(request.node) ??
      (request.node === this.node ? `it was given --node ${request.node}, as this node was; give each node its own --node` : undefined) ??
      (request.nodes !== this.layout.nodes ? `it has ${request.nodes} nodes in --peers, this node has ${this.layout.nodes}; give every node the same --peers` : undefined) ??
      this.mismatch(request.protocolVersion, request.layoutHash, this.node, this.node, request.samples)
    if (problem !== undefined && this.checkNode(request.node) === undefined) {
      if (request.node === this.node) this.conflict = `another node was given --node ${this.node} too; give each node its own --node`
      else this.refusedHere.set(request.node as NodeId, problem)
      this.onRefusedHere?.()
    }
    return problem
  }

  /** Why `node` cannot be the sender of a call, or undefined. */
  checkNode (node: number): string | undefined {
    if (!Number.isInteger(node) || node < 0 || node >= this.layout.nodes) return `node ${node} is not in this cluster of ${this.layout.nodes}`
    return undefined
  }

  /** Refuses a call from a node this one takes for dead, or suspects: it must learn that it is fenced. */
  checkAlive (node: NodeId): void {
    const incarnation = this.liveness.incarnationOf(node)
    if (node === this.node || incarnation === undefined) return
    const state = this.liveness.stateOf(node)
    if (state === 'dead') throw takenForDead(incarnation, `node ${this.node} takes node ${node} for dead`)
    if (state === 'suspected') throw takenForDead(incarnation, `node ${this.node} did not hear from node ${node} for longer than ${this.options.peerTimeoutMs / 1000}s`)
  }

  private handshakeError (node: NodeId, err: unknown): UsageError {
    const address = this.addressOf(node)
    if (!(err instanceof PeerCallError)) return new UsageError(`handshake with peer ${node} at ${address} failed: ${(err as Error).message}`)
    if (err.status === grpc.status.UNAUTHENTICATED) return new UsageError(`peer ${node} at ${address} refused our cluster token: every node needs the same --token-file`)
    // At start-up, only a later mount given this --node (or this one paused past the timeout) makes a peer take it for dead.
    if (err.takenForDead !== undefined) return new UsageError(`peer ${node} at ${address} takes this mount of node ${this.node} for dead: another mount given --node ${this.node} reached it after this one (two nodes given the same --node, or this node mounted again meanwhile), or this one paused past --peer-timeout; give each node its own --node`)
    if (err.status === grpc.status.FAILED_PRECONDITION) return new UsageError(`peer ${node} at ${address} refused us: ${err.details}`)
    if (err.unreachable) {
      // gRPC's own account of a deadline (its resolver and balancer steps) says nothing the line does not.
      const why = err.details.startsWith('Deadline exceeded') ? '' : ` (${err.details.split(',')[0]})`
      return new UsageError(`peer ${node} at ${address} did not answer within ${this.options.startupTimeoutMs / 1000}s${why}: start every node's mount at about the same time (mount-scripts/ do); when joining a running cluster, that peer must be running and reachable (a peer that is stopped or cut off holds a node's start until it answers or the others take it for dead)`)
    }
    return new UsageError(`handshake with peer ${node} at ${address} failed: ${err.details}`)
  }

  /** What differs between a peer and us, or undefined. */
  private mismatch (version: number, hash: string, theirId: number, expectedId: number, theirSamples: number): string | undefined {
    if (version !== PROTOCOL_VERSION) return `protocol version ${version}, this node speaks ${PROTOCOL_VERSION}; run the same redirfs on every node`
    if (theirId !== expectedId) return `it says it is --node ${theirId}, but --peers lists it as node ${expectedId}; give every node the same --peers in the same order, and each its own --node`
    if (hash === this.layout.hash) return undefined
    const samples = theirSamples !== this.layout.files.length ? ` (its dataset has ${theirSamples} samples, this node's ${this.layout.files.length})` : ''
    return `layout ${hash}, this node has ${this.layout.hash}${samples}; every node must mount the same dataset with the same --chunk-size, --seed, --memory and --peers`
  }

  /** Stops serving first (a peer may take this node's port closing for its death), then the clients. */
  stopServing (): void {
    this.closing = true
    this.wakeQuorumWaiters()
  }

  close (): void {
    this.stopServing()
    clearInterval(this.timer)
    for (const client of this.clients) client?.close()
  }
}
