/**
 * One node of a cluster, put together from its parts (docs/design.md,
 * "Cluster protocol"):
 * - membership.ts: who is alive, the clients, the start-up handshake;
 * - service.ts: what this node answers to its peers;
 * - sync.ts: standby copies and served notices, four times a second;
 * - takeover.ts: what a peer's death changes;
 * - generations.ts: a new training run begins a generation everywhere;
 * - here: this node's own opens, routed to the engine (VCs it owns) or to
 *   the remote reader, which asks the VC's current owner; and the home
 *   side's reclaims from the nodes holding its files.
 *
 * Start: listen, then handshake with every peer (same protocol version,
 * same layout hash, the node id each expects) before the mount comes up;
 * a mismatch fails the mount with a message that says what differs.
 */
import type { Logger } from 'pino'
import { FsError } from '../errors'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { ClusterStats } from '../stats'
import type { Engine, Reclaimer, RequestAnswer, ServedFile } from '../engine/engine'
import { RemoteReader, type OwnerReply } from '../engine/remote-reader'
import { allVcs, vcOfFile, type FileId, type Layout, type NodeId, type VcId } from '../redirect/layout'
import type { MirrorTable, RemoteRequest } from '../redirect/mirror'
import type { ReclaimReport } from '../redirect/protocol'
import type { PeerAddress } from './addresses'
import type { Membership } from './membership'
import { PeerCallError } from './call-error'
import { compareGenerations, generationOf, refusedFor } from './generations'
import type { Run } from '../runs/run-tracker'
import { startPeerServer, type RunningPeerServer } from './peer-server'
import { PeerService } from './service'
import { Sync } from './sync'
import { Takeover } from './takeover'
import { encodeOffsets, type ReadReply } from './wire'

export type { Storage } from './membership'

export interface ClusterNodeOptions {
  /** Where the peer service listens (this node's entry in --peers unless --listen says otherwise). */
  listen: PeerAddress
  /** The data channel's port on the same host; 0: any free one. */
  dataPort: number
  /** The node's stats as JSON, for the Stats call. */
  statsJson: () => string
}

/**
 * The home side's reclaim: asks each holder what it holds of the VC (and
 * one of them for a file back). A holder that cannot be asked is reported
 * dead, and is dead to this node from then on.
 */
export function reclaimFromHolders (membership: Membership, log: Logger): Reclaimer {
  return async plan => {
    const reports: ReclaimReport[] = []
    let returned: ServedFile | undefined
    await Promise.all(plan.holders.map(async holder => {
      if (membership.isDead(holder)) { reports.push({ node: holder, dead: true }); return }
      const giveBack = plan.giveBack?.node === holder
      const incarnation = membership.incarnationOf(holder)
      try {
        const reply = await membership.client(holder).reclaim({ generation: membership.generation, node: membership.node, vc: plan.vc, giveBack, offsets: giveBack ? [...(plan.giveBack!.offsets ?? [])] : [] }, membership.handshakeRequest())
        // Ids from a peer's message: the layout both nodes share (the handshake checked its hash) numbers them.
        const returnedFile = reply.returned?.file as FileId | undefined
        if (reply.returned != null) returned = { file: returnedFile!, bytes: reply.returned.data }
        reports.push({ node: holder, held: reply.held as FileId[], lastBatch: reply.lastBatch, returned: returnedFile })
      } catch (err) {
        const later = err instanceof PeerCallError ? refusedFor(err) : undefined
        if (later !== undefined) {
          // The holder is in a later generation: this node starts it (its ledgers are then empty), and the holder holds nothing of this one.
          membership.observe(later)
          reports.push({ node: holder, held: [], lastBatch: 0 })
          return
        }
        if (err instanceof PeerCallError && err.unreachable) membership.markDead(holder, err.details, incarnation)
        else log.error({ holder, vc: plan.vc, err: (err as Error).message }, 'reclaim refused; treating the holder as dead')
        reports.push({ node: holder, dead: true })
      }
    }))
    return { reports, returned }
  }
}

export class ClusterNode {
  /** Opens of files whose VC another node owns. */
  private readonly remote: RemoteReader
  private readonly takeover: Takeover
  private readonly sync: Sync
  private readonly service: PeerService
  private server?: RunningPeerServer
  private warnedExact = false
  /** Whether this node's trainer opened a sample in the current generation (see generations.ts). */
  private readHere = false

  constructor (
    private readonly layout: Layout,
    private readonly engine: Engine,
    mirror: MirrorTable,
    private readonly membership: Membership,
    /** The node's one pool (the daemon's): its engine's loads, its mirror's files and its peers' answers. */
    private readonly buffers: SampleBuffers,
    private readonly options: ClusterNodeOptions,
    private readonly log: Logger
  ) {
    this.remote = new RemoteReader(mirror, { read: async request => await this.askOwner(request) }, buffers)
    this.takeover = new Takeover(layout, membership, engine, this.remote, log)
    this.sync = new Sync(layout, membership, engine, this.remote, this.takeover, log)
    this.service = new PeerService({ layout, membership, engine, remote: this.remote, takeover: this.takeover, sync: this.sync, statsJson: options.statsJson, buffers, log })
    membership.onGeneration(() => this.startedGeneration())
  }

  /**
   * A training run began on this node (src/runs): it begins a generation
   * across the cluster, or joins the one it finds (generations.ts).
   */
  beginRun (run: Run): void {
    const { generation } = this.membership
    if (generation.key === run.key) return
    if (!run.global && !this.readHere) {
      this.log.info({ run: run.key, generation: generation.number }, 'a training run began here; it joins the current generation (this node\'s trainer had not read in it)')
      return
    }
    const next = { number: generation.number + 1, key: run.key }
    this.membership.startGeneration(next)
    for (const peer of this.membership.livePeers()) {
      this.membership.client(peer).newGeneration(next).then(theirs => { this.membership.observe(generationOf({ generation: theirs })) }, (err: unknown) => {
        // A peer that misses the news learns it from the next call that carries the generation.
        this.log.warn({ peer, err: (err as Error).message }, 'a peer did not hear of the new generation yet')
      })
    }
  }

  /** Every node's epochs start afresh: nothing of the last generation is kept, and owners are each VC's first live node again. */
  private startedGeneration (): void {
    const droppedHere = this.engine.reset()
    const droppedMirrors = this.remote.reset()
    this.takeover.newGeneration()
    this.sync.newGeneration()
    this.engine.setOwnership(vc => this.membership.ownerOf(vc) === this.membership.node)
    this.remote.wakeAll(allVcs(this.layout))
    this.readHere = false
    this.log.info({ generation: this.membership.generation.number, droppedHere, droppedMirrors }, 'new generation: epoch state, mirrors and ledgers reset')
  }

  /** Listens, then handshakes with every peer; throws a one-line reason on any mismatch. */
  async start (): Promise<void> {
    const { credentials, token } = this.membership.options
    this.server = await startPeerServer(this.options.listen, credentials, token, this.service, this.log, this.options.dataPort)
    await this.membership.handshakeAll()
    // Mounted again after it died: its VCs stay with their adopters until the next generation.
    if (this.membership.isRejoining(this.membership.node)) this.engine.setOwnership(vc => this.membership.ownerOf(vc) === this.membership.node)
    this.sync.start()
  }

  /**
   * An open by this node's trainer. `exact` (the file itself) is honoured
   * for VCs this node answers for; a remote VC's home cannot be asked for
   * it yet, so such an open is answered as any other (and logged once).
   */
  async open (file: FileId, options: { exact?: boolean } = {}): Promise<ServedFile> {
    this.readHere = true
    for (;;) {
      if (this.engine.owns(this.vcOf(file))) return await this.engine.open(file, options)
      if (options.exact === true && !this.warnedExact) {
        this.warnedExact = true
        this.log.warn({ file: this.layout.files[file].path }, 'a loader stats sample paths before opening them; in a cluster only files whose home is this node are served exactly')
      }
      const opened = await this.remote.open(file)
      if (opened.kind === 'served') return opened.served
      // Otherwise a takeover made this node the owner while the open was asking elsewhere: decide it here.
    }
  }

  private vcOf (file: FileId): VcId { return vcOfFile(this.layout, file) }

  /** Sends a remote open to the VC's owner, following deaths and takeovers. */
  private async askOwner (request: RemoteRequest): Promise<OwnerReply> {
    for (;;) {
      const owner = this.membership.ownerOf(request.vc)
      const home = this.layout.vcs[request.vc].home
      if (owner === undefined) {
        throw new FsError('EIO', `node ${home} (${this.membership.addressOf(home)}) is gone and ${this.membership.storage === 'sharded' ? 'its chunks are only in its pack shard' : 'no node is left to take over its chunks'}`)
      }
      if (owner === this.membership.node) {
        await this.takeover.adoptOrphans()
        if (!this.engine.owns(request.vc)) throw new FsError('EIO', `this node could not take over virtual chunk ${request.vc} of dead node ${home}`)
        return { kind: 'owner-is-here' }
      }
      const incarnation = this.membership.incarnationOf(owner)
      try {
        const reply = await this.membership.client(owner).read({
          generation: this.membership.generation,
          node: this.membership.node,
          file: request.file,
          emptyOffsets: encodeOffsets(request.emptyOffsets, this.layout.chunkSize),
          freeBytes: Math.floor(request.freeBytes),
          lastBatch: request.lastBatch
        }, this.membership.handshakeRequest())
        // A later generation the owner is in starts here; an answer of one this node has left is not kept (its files were that generation's).
        this.membership.observe(reply.generation)
        if (compareGenerations(reply.generation, this.membership.generation) !== 0) {
          this.drop(reply)
          continue
        }
        return { kind: 'answered', answer: decodeReadReply(reply) }
      } catch (err) {
        const later = err instanceof PeerCallError ? refusedFor(err) : undefined
        if (later !== undefined) {
          this.membership.observe(later)
          continue
        }
        if (err instanceof PeerCallError && err.unreachable) {
          this.membership.markDead(owner, err.details, incarnation)
          continue
        }
        throw new FsError('EIO', `node ${owner} could not answer for file ${request.file}: ${(err as Error).message}`)
      }
    }
  }

  /** A failed open of this node's trainer that must not count: its file is charged to another open (a VC this node answers for). */
  uncharge (file: FileId, generation?: number): void {
    if (this.engine.owns(this.vcOf(file))) this.engine.uncharge(file, generation)
  }

  /** An answer that never reached this node's trainer: a file of a VC this node answers for waits for another open; a peer's is dropped (its home counts it served). */
  giveBack (served: ServedFile): void {
    if (this.engine.owns(this.vcOf(served.file))) this.engine.giveBack(served)
    else this.buffers.give(served.bytes)
  }

  /** An answer of another generation: nobody takes its bytes. */
  private drop (reply: ReadReply): void {
    if (reply.served !== null) this.buffers.give(reply.served.data)
    for (const f of reply.batch) this.buffers.give(f.data)
  }

  /** Drops every mirrored file (`redirfs reset`); gives how many. */
  reset (): number { return this.remote.reset() }

  /** What `<mnt>/.redirfs/stats` shows of the cluster. */
  describe (): ClusterStats {
    const { node, peers, storage, credentials } = this.membership.options
    return {
      node,
      nodes: this.layout.nodes,
      storage,
      listen: this.options.listen.text,
      dataPort: this.server?.dataPort ?? 0,
      remoteMemoryBytes: this.remote.limitBytes,
      tls: credentials.tls,
      peers: peers.map((address, peer) => ({ node: peer, address: address.text, state: this.membership.stateOf(peer as NodeId) })),
      generation: { ...this.membership.generation },
      ...this.membership.counters,
      ...this.service.counters,
      takeovers: this.engine.takeovers,
      unsynced: this.sync.pending(),
      ...this.remote.counters
    }
  }

  async close (): Promise<void> {
    this.sync.stop()
    await this.server?.close()
    this.membership.close()
  }
}

/** An owner's answer, its file numbers made ids (the layout both share numbers them). */
function decodeReadReply (reply: ReadReply): RequestAnswer {
  const served = reply.served === null ? undefined : { file: reply.served.file as FileId, bytes: reply.served.data }
  return { served, batch: reply.batch.map(f => ({ file: f.file as FileId, bytes: f.data })), batchNumber: reply.batchNumber, vcEpoch: reply.vcEpoch }
}
