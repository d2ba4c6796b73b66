/**
 * One node of a cluster: the peer service it runs, the clients it calls
 * its peers with, and who owns which VC.
 *
 * - Start: listen, then handshake with every peer (same protocol version,
 *   same layout hash, the node id each expects) before the mount comes up;
 *   a mismatch fails the mount with a message that says what differs.
 * - Opens: a file of a VC this node owns goes to the engine (home side);
 *   any other to the remote reader, which asks the VC's current owner.
 * - Sync, four times a second: to each peer, the standby copies of the VCs
 *   it would take over from this node, and the files this node served from
 *   its mirrors of that peer's VCs (keeping the owner's ledger true).
 * - Death: a peer that does not answer within the peer timeout is dead to
 *   this node for the rest of the mount. What this node shipped into its
 *   mirror is made loadable again (it never reached a trainer). Then:
 *   - shared storage: each VC whose owners are all dead goes to the next
 *     live node of its owner order (redirect/takeover.ts), which merges the
 *     survivors' reports with its standby copy and takes the VC over;
 *     training goes on with no error.
 *   - sharded packs: nobody else has those chunks; opens of them fail with
 *     EIO at once, with one clear log line.
 */
import type { Logger } from 'pino'
import * as grpc from '@grpc/grpc-js'
import { FsError, UsageError } from '../errors'
import type { ClusterCounters, ClusterStats } from '../stats'
import type { Engine, Reclaimer, RequestAnswer, ServedFile } from '../engine/engine'
import { RemoteReader, type OwnerReply, type Owners } from '../engine/remote-reader'
import type { FileId, Layout, NodeId, VcId } from '../redirect/layout'
import type { MirrorTable, RemoteRequest } from '../redirect/mirror'
import type { ReclaimReport } from '../redirect/protocol'
import { ownerOrder, planAdoption, type StandbyCopy } from '../redirect/takeover'
import type { PeerAddress } from './addresses'
import { PeerCallError, PeerClient } from './peer-client'
import { PeerRefusal, startPeerServer, type PeerHandler, type RunningPeerServer } from './peer-server'
import type { Credentials } from './security'
import { decodeOffsets, encodeOffsets, PROTOCOL_VERSION, type ServedNotice, type StandbyVc, type SyncReply, type SyncRequest, type FileData, type HandshakeReply, type HandshakeRequest, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type TakeoverStateReply, type TakeoverStateRequest, type VcState } from './wire'

export type Storage = 'shared' | 'sharded'

export interface ClusterOptions {
  node: NodeId
  peers: readonly PeerAddress[]
  listen: PeerAddress
  token: string
  credentials: Credentials
  storage: Storage
  /** A peer that does not answer a call within this is dead. */
  peerTimeoutMs: number
  /** How long start-up waits for every peer to answer the handshake. */
  startupTimeoutMs: number
}

/** How often standby copies and served notices go out. */
const SYNC_PERIOD_MS = 250


export class ClusterNode implements PeerHandler {
  readonly counters: ClusterCounters = { peersLost: 0, refusedRequests: 0 }
  private readonly clients: (PeerClient | undefined)[]
  private readonly dead = new Set<NodeId>()
  private warnedExact = false
  /** VCs being taken over, so that each is adopted once. */
  private readonly adopting = new Map<VcId, Promise<void>>()
  private server?: RunningPeerServer
  /** Opens of files whose VC another node owns. */
  readonly remote: RemoteReader
  /** Set by the daemon: the node's stats as JSON, for the Stats call. */
  statsJson: () => string = () => '{}'
  /** Standby copies of the VCs this node would take over (see redirect/takeover.ts). */
  private readonly standby = new Map<VcId, StandbyCopy>()
  /** Served notices not yet delivered, per owner. */
  private readonly unsentNotices = new Map<NodeId, ServedNotice[]>()
  /** Peers with a sync call out (a slow peer gets one at a time). */
  private readonly syncing = new Set<NodeId>()
  private syncTimer?: NodeJS.Timeout

  constructor (
    private readonly layout: Layout,
    private readonly engine: Engine,
    mirror: MirrorTable,
    private readonly options: ClusterOptions,
    private readonly log: Logger
  ) {
    this.clients = options.peers.map((address, node) => node === options.node ? undefined : new PeerClient(address, options.credentials, options.token, options.peerTimeoutMs))
    const owners: Owners = { read: async request => await this.askOwner(request) }
    this.remote = new RemoteReader(mirror, owners)
    engine.reclaimer = this.reclaimFromHolders
  }

  get node (): NodeId { return this.options.node }

  /** Listens, then handshakes with every peer; throws a one-line reason on any mismatch. */
  async start (): Promise<void> {
    this.server = await startPeerServer(this.options.listen, this.options.credentials, this.options.token, this, this.log)
    const request = this.handshakeRequest()
    await Promise.all(this.clients.map(async (client, node) => {
      if (client === undefined) return
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
    this.syncTimer = setInterval(() => { void this.syncPeers() }, SYNC_PERIOD_MS)
    this.syncTimer.unref()
  }

  /**
   * The periodic sync: to each live peer, the standby copies of the VCs it
   * would take over from this node, and the files this node served from its
   * mirrors of that peer's VCs. What cannot be delivered is sent again next
   * time (until the peer is found dead).
   */
  private async syncPeers (): Promise<void> {
    const standbyFor = new Map<NodeId, StandbyVc[]>()
    for (const update of this.engine.protocol.takeStandbyUpdates()) {
      const next = ownerOrder(this.layout, update.vc).find(node => node !== this.node && !this.dead.has(node))
      const wire = { vc: update.vc, epoch: update.epoch, servedFiles: update.served.map(s => s.file), servedNodes: update.served.map(s => s.node) }
      if (next !== undefined) standbyFor.set(next, [...(standbyFor.get(next) ?? []), wire])
    }
    for (const notice of this.remote.mirror.takeServedNotices()) {
      const owner = this.ownerOf(notice.vc)
      if (owner !== undefined && owner !== this.node) this.unsentNotices.set(owner, [...(this.unsentNotices.get(owner) ?? []), notice])
    }
    await Promise.all(this.clients.map(async (client, node) => {
      const standby = standbyFor.get(node) ?? []
      if (client === undefined || this.dead.has(node)) return
      if (this.syncing.has(node)) {
        for (const update of standby) this.engine.protocol.touch(update.vc)
        return
      }
      const served = this.unsentNotices.get(node) ?? []
      if (standby.length === 0 && served.length === 0) return
      this.unsentNotices.delete(node)
      this.syncing.add(node)
      try {
        await client.sync({ node: this.node, standby, served })
      } catch (err) {
        this.log.debug({ peer: node, err: (err as Error).message }, 'sync failed; will send again')
        for (const update of standby) this.engine.protocol.touch(update.vc)
        this.unsentNotices.set(node, [...served, ...(this.unsentNotices.get(node) ?? [])])
      } finally {
        this.syncing.delete(node)
      }
    }))
  }

  private handshakeRequest (): HandshakeRequest {
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, nodes: this.layout.nodes, layoutHash: this.layout.hash }
  }

  private handshakeError (node: NodeId, err: unknown): UsageError {
    const address = this.options.peers[node].text
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

  // ---------------------------------------------------------------- opens

  /**
   * An open by this node's trainer. `exact` (the file itself) is honoured
   * for VCs this node answers for; a remote VC's home cannot be asked for
   * it yet, so such an open is answered as any other (and logged once).
   */
  async open (file: FileId, options: { exact?: boolean } = {}): Promise<ServedFile> {
    for (;;) {
      const vc = this.vcOf(file)
      if (this.engine.protocol.owns(vc)) return await this.engine.open(file, options)
      if (options.exact === true && !this.warnedExact) {
        this.warnedExact = true
        this.log.warn({ file: this.layout.files[file].path }, 'a loader stats sample paths before opening them; in a cluster only files whose home is this node are served exactly')
      }
      const opened = await this.remote.open(file)
      if (opened.kind === 'served') return opened.served
      // Otherwise a takeover made this node the owner while the open was asking elsewhere: decide it here.
    }
  }

  private vcOf (file: FileId): VcId { return this.layout.pcs[this.layout.filePc[file]].vc }

  /** Who answers for `vc` now, as this node sees it: the first live node of its owner order (only its home, with sharded packs). */
  private ownerOf (vc: VcId): NodeId | undefined {
    const candidates = this.options.storage === 'sharded' ? [this.layout.vcs[vc].home] : ownerOrder(this.layout, vc)
    return candidates.find(node => !this.dead.has(node))
  }

  /** Sends a remote open to the VC's owner, following takeovers. */
  private async askOwner (request: RemoteRequest): Promise<OwnerReply> {
    for (;;) {
      const owner = this.ownerOf(request.vc)
      const home = this.layout.vcs[request.vc].home
      if (owner === undefined) {
        throw new FsError('EIO', `node ${home} (${this.options.peers[home].text}) is gone and ${this.options.storage === 'sharded' ? 'its chunks are only in its pack shard' : 'no node is left to take over its chunks'}`)
      }
      if (owner === this.node) {
        await this.adoptOrphans()
        if (!this.engine.protocol.owns(request.vc)) throw new FsError('EIO', `this node could not take over virtual chunk ${request.vc} of dead node ${home}`)
        return { kind: 'owner-is-here' }
      }
      try {
        const reply = await this.clients[owner]!.read({
          node: this.node,
          file: request.file,
          emptyOffsets: encodeOffsets(request.emptyOffsets, this.layout.chunkSize),
          freeBytes: Math.floor(request.freeBytes),
          lastBatch: request.lastBatch
        }, this.handshakeRequest())
        return { kind: 'answered', answer: this.decodeReadReply(reply) }
      } catch (err) {
        if (err instanceof PeerCallError && err.unreachable) {
          this.markDead(owner, err.details)
          continue
        }
        throw new FsError('EIO', `node ${owner} could not answer for file ${request.file}: ${(err as Error).message}`)
      }
    }
  }

  private decodeReadReply (reply: ReadReply): RequestAnswer {
    const served = reply.served === null ? undefined : { file: reply.served.file, bytes: reply.served.data }
    return { served, batch: reply.batch.map(f => ({ file: f.file, bytes: f.data })), batchNumber: reply.batchNumber, vcEpoch: reply.vcEpoch }
  }

  // ---------------------------------------------------------------- reclaims (home side)

  private readonly reclaimFromHolders: Reclaimer = async plan => {
    const reports: ReclaimReport[] = []
    let returned: ServedFile | undefined
    await Promise.all(plan.holders.map(async holder => {
      if (this.dead.has(holder)) { reports.push({ node: holder, dead: true }); return }
      const giveBack = plan.giveBack?.node === holder
      try {
        const reply = await this.clients[holder]!.reclaim({ node: this.node, vc: plan.vc, giveBack, offsets: giveBack ? [...(plan.giveBack!.offsets ?? [])] : [] })
        if (reply.returned != null) returned = { file: reply.returned.file, bytes: reply.returned.data }
        reports.push({ node: holder, held: reply.held, lastBatch: reply.lastBatch, returned: reply.returned?.file })
      } catch (err) {
        if (err instanceof PeerCallError && err.unreachable) this.markDead(holder, err.details)
        else this.log.error({ holder, vc: plan.vc, err: (err as Error).message }, 'reclaim refused; treating the holder as dead')
        reports.push({ node: holder, dead: true })
      }
    }))
    return { reports, returned }
  }

  // ---------------------------------------------------------------- deaths and takeovers

  private markDead (node: NodeId, why: string): void {
    if (node === this.node || this.dead.has(node)) return
    this.dead.add(node)
    this.counters.peersLost++
    const lost = this.engine.protocol.forgetNode(node)
    const address = this.options.peers[node].text
    if (this.options.storage === 'sharded') {
      this.log.error({ peer: node, address, why }, `peer ${node} (${address}) is unreachable (${why}): its samples are only in its pack shard, so opens of them now fail with EIO`)
    } else {
      this.log.error({ peer: node, address, why, vcsWithLostFiles: lost.length }, `peer ${node} (${address}) is unreachable (${why}): the other nodes take over its chunks`)
      void this.adoptOrphans().catch(err => this.log.error({ dead: node, err: (err as Error).message }, 'takeover failed'))
    }
  }

  /**
   * Takes over every VC this node should now answer for and does not yet:
   * its owners before this node in the rotation are all dead. Each VC is
   * adopted once; VCs of one dead home are adopted together.
   */
  private async adoptOrphans (): Promise<void> {
    const orphans = this.layout.vcs.map((_, vc) => vc).filter(vc => !this.engine.protocol.owns(vc) && !this.adopting.has(vc) && this.ownerOf(vc) === this.node)
    const byHome = new Map<NodeId, VcId[]>()
    for (const vc of orphans) byHome.set(this.layout.vcs[vc].home, [...(byHome.get(this.layout.vcs[vc].home) ?? []), vc])
    for (const [home, vcs] of byHome) {
      const work = this.adopt(home, vcs)
      for (const vc of vcs) this.adopting.set(vc, work)
    }
    await Promise.all(this.layout.vcs.map((_, vc) => vc).filter(vc => this.ownerOf(vc) === this.node).map(async vc => await this.adopting.get(vc)))
  }

  /** Adopts `vcs` of the dead `home` from the survivors' reports and the standby copies. */
  private async adopt (home: NodeId, vcs: VcId[]): Promise<void> {
    const states = new Map<VcId, { node: NodeId, state: VcState }[]>(vcs.map(vc => [vc, []]))
    const collect = (node: NodeId, reply: TakeoverStateReply): void => {
      for (const state of reply.vcs) states.get(state.vc)?.push({ node, state })
    }
    collect(this.node, this.mirrorStates(vcs))
    await Promise.all(this.clients.map(async (client, node) => {
      if (client === undefined || this.dead.has(node)) return
      try {
        collect(node, await client.takeoverState({ node: this.node, dead: home, vcs }))
      } catch (err) {
        this.log.warn({ peer: node, err: (err as Error).message }, 'a survivor did not report its state for a takeover; going on without it')
      }
    }))
    for (const vc of vcs) {
      const reports = states.get(vc)!.map(({ node, state }) => ({ node, ...state }))
      this.engine.adopt(vc, planAdoption(reports, this.standby.get(vc), this.node, node => this.dead.has(node)), this.remote.surrender(vc))
    }
    this.remote.wakeAll(vcs)
    this.log.info({ home, vcs: vcs.length }, `took over ${vcs.length} virtual chunk(s) of node ${home}`)
  }

  private mirrorStates (vcs: readonly VcId[]): TakeoverStateReply {
    return { vcs: vcs.map(vc => ({ vc, ...this.remote.mirror.takeoverReport(vc) })) }
  }

  // ---------------------------------------------------------------- the peer service

  handshake (request: HandshakeRequest): HandshakeReply {
    const problem = this.checkNode(request.node) ?? this.mismatch(request.protocolVersion, request.layoutHash, this.node, this.node) ??
      (request.nodes !== this.layout.nodes ? `it has ${request.nodes} nodes in --peers, this node has ${this.layout.nodes}` : undefined)
    if (problem !== undefined) {
      this.log.warn({ peer: request.node, problem }, 'refused a peer handshake')
      throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node}: ${problem}`)
    }
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, layoutHash: this.layout.hash }
  }

  async read (request: ReadRequest): Promise<ReadReply> {
    this.invalid(this.checkNode(request.node))
    this.invalid(request.file < this.layout.files.length ? undefined : `file ${request.file} is not in the layout (it has ${this.layout.files.length})`)
    const vc = this.vcOf(request.file)
    if (!this.engine.protocol.owns(vc)) await this.becomeOwner(vc, request.node)
    const answer = await this.engine.serveRequest(request.file, {
      node: request.node,
      emptyOffsets: decodeOffsets(request.emptyOffsets),
      freeBytes: request.freeBytes,
      lastBatch: request.lastBatch
    })
    const data = (f: ServedFile): FileData => ({ file: f.file, data: f.bytes })
    return { served: answer.served === undefined ? null : data(answer.served), batch: answer.batch.map(data), batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch }
  }

  /** A request for a VC this node does not own: this node answers only once every node before it in the VC's owner order is dead. */
  private async becomeOwner (vc: VcId, requester: NodeId): Promise<void> {
    const home = this.layout.vcs[vc].home
    const refuse = (why: string): never => {
      this.counters.refusedRequests++
      throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node} does not answer for virtual chunk ${vc} (asked by node ${requester}): ${why}`)
    }
    if (this.options.storage === 'sharded') refuse(`its home, node ${home}, is the only node with its chunks`)
    // The requester found every node before us in the VC's owner order dead; check for ourselves.
    const order = ownerOrder(this.layout, vc)
    for (const earlier of order.slice(0, order.indexOf(this.node))) {
      if (this.dead.has(earlier)) continue
      try {
        await this.clients[earlier]!.handshake(this.handshakeRequest())
        refuse(`node ${earlier}, which answers for it before this node, answers`)
      } catch (err) {
        if (err instanceof PeerRefusal) throw err
        if (!(err instanceof PeerCallError && err.unreachable)) refuse(`node ${earlier} answered: ${(err as Error).message}`)
        this.markDead(earlier, `node ${requester} found it unreachable, and so did this node`)
      }
    }
    if (this.ownerOf(vc) !== this.node) refuse(`node ${this.ownerOf(vc) ?? 'none'} takes it over`)
    await this.adoptOrphans()
    if (!this.engine.protocol.owns(vc)) refuse('the takeover did not include it')
  }

  reclaim (request: ReclaimRequest): ReclaimReply {
    this.invalid(this.checkNode(request.node))
    // Once we reported our state for a takeover of that node, it is dead to us:
    // a late reclaim from it must not take a file that the new owner counts on.
    if (this.dead.has(request.node)) throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node} takes node ${request.node} for dead`)
    this.invalid(request.vc < this.layout.vcs.length ? undefined : `virtual chunk ${request.vc} is not in the layout`)
    const { held, lastBatch, returned } = this.remote.reclaim(request.vc, request.giveBack, request.offsets)
    return { held, lastBatch, returned: returned === undefined ? null : { file: returned.file, data: returned.bytes } }
  }

  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> {
    this.invalid(this.checkNode(request.node) ?? this.checkNode(request.dead))
    this.invalid(request.vcs.every(vc => vc < this.layout.vcs.length && this.layout.vcs[vc].home === request.dead) ? undefined : 'the virtual chunks asked for are not all the dead node\'s')
    const reply = this.mirrorStates(request.vcs)
    // The taking-over node found it dead: stop asking it, and take over our share.
    this.markDead(request.dead, `node ${request.node} is taking over its chunks`)
    return reply
  }

  sync (request: SyncRequest): SyncReply {
    this.invalid(this.checkNode(request.node))
    if (this.dead.has(request.node)) return {}
    for (const update of request.standby) {
      this.invalid(update.vc < this.layout.vcs.length && update.servedFiles.length === update.servedNodes.length ? undefined : `bad standby update for virtual chunk ${update.vc}`)
      const known = this.standby.get(update.vc)
      if (known === undefined || update.epoch >= known.epoch) this.standby.set(update.vc, { epoch: update.epoch, served: update.servedFiles.map((file, i) => ({ file, node: update.servedNodes[i] })) })
    }
    this.engine.protocol.noteServedElsewhere(request.node, request.served.filter(n => n.vc < this.layout.vcs.length && this.engine.protocol.owns(n.vc)))
    return {}
  }

  stats (): { json: string } { return { json: this.statsJson() } }

  private checkNode (node: number): string | undefined {
    if (!Number.isInteger(node) || node < 0 || node >= this.layout.nodes) return `node ${node} is not in this cluster of ${this.layout.nodes}`
    return undefined
  }

  private invalid (problem: string | undefined): void {
    if (problem !== undefined) throw new PeerRefusal(grpc.status.INVALID_ARGUMENT, problem)
  }

  /** What `<mnt>/.redirfs/stats` shows of the cluster. */
  describe (): ClusterStats {
    return {
      node: this.node,
      nodes: this.layout.nodes,
      storage: this.options.storage,
      listen: this.options.listen.text,
      remoteMemoryBytes: this.remote.mirror.limitBytes,
      tls: this.options.credentials.tls,
      peers: this.options.peers.map((address, node) => ({ node, address: address.text, state: node === this.node ? 'self' : this.dead.has(node) ? 'dead' : 'alive' })),
      ...this.counters,
      takeovers: this.engine.protocol.counters.takeovers,
      ...this.remote.mirror.counters
    }
  }

  async close (): Promise<void> {
    clearInterval(this.syncTimer)
    await this.server?.close()
    for (const client of this.clients) client?.close()
  }
}
