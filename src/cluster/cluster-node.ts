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
 * a mismatch fails the mount with a message that says what differs, and
 * the node tells its peers why for a while before it goes, so that none
 * waits for it in vain.
 *
 * Nothing is served without a quorum of leases (membership.ts), and no
 * failed call is a death: an open whose owner does not answer, or says to
 * ask again, asks again (the owner may be slow, paused, or no longer the
 * owner) until the cluster takes that owner for dead, or the open's limit.
 */
import type { Logger } from 'pino'
import { FsError, UsageError } from '../errors'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { ClusterStats } from '../stats'
import { NotOwnedHere, type Engine, type OpenOptions, type Reclaimer, type RequestAnswer, type ServedFile } from '../engine/engine'
import { RemoteReader, type OwnerReply } from '../engine/remote-reader'
import { allVcs, vcOfFile, type FileId, type Layout, type NodeId, type VcId } from '../redirect/layout'
import type { MirrorTable, RemoteRequest } from '../redirect/mirror'
import type { GivenBack, ReclaimReport } from '../redirect/protocol'
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
  /** The runs named by a launcher that this node's trainers read now. */
  readingRuns?: () => readonly string[]
  /** A peer's trainers read `run`, which none of this node's does while they read: two jobs at once. */
  runElsewhere?: (peer: NodeId, run: string) => void
}

/** How long an open may wait on the cluster (a quorum, an owner that answers): under FUSE's limit for an open. */
const OPEN_WAIT_MS = 100_000
/** How long an open or a reclaim waits before it asks again. */
const ASK_AGAIN_MS = 100
/** How long a node that cannot join tells its peers why, at most, before it goes. */
const TELL_PEERS_MS = 10_000

const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

/**
 * The home side's reclaim: asks each holder what it holds of the VC (and
 * one of them for a file back). A holder that does not answer is asked
 * again until it does, or the cluster takes it for dead: only then are its
 * files loadable again (a holder that is merely slow or cut off may still
 * serve them).
 */
export function reclaimFromHolders (membership: Membership, log: Logger): Reclaimer {
  return async plan => {
    const reports: ReclaimReport[] = []
    let returned: ServedFile | undefined
    await Promise.all(plan.holders.map(async holder => {
      for (let tries = 0; ; tries++) {
        if (membership.isDead(holder)) { reports.push({ node: holder, dead: true }); return }
        if (membership.fenced !== undefined || membership.closed) throw new FsError('EIO', `this node stopped serving while it asked node ${holder} to reclaim`)
        const giveBack = plan.giveBack?.node === holder
        try {
          const reply = await membership.client(holder).reclaim({ generation: membership.generation, node: membership.node, vc: plan.vc, giveBack, offsets: giveBack ? [...(plan.giveBack!.offsets ?? [])] : [] }, membership.handshakeRequest())
          // Ids from a peer's message: the layout both nodes share (the handshake checked its hash) numbers them.
          const returnedFile = reply.returned?.file as FileId | undefined
          if (reply.returned != null) returned = { file: returnedFile!, bytes: reply.returned.data }
          reports.push({ node: holder, held: reply.held as FileId[], lastBatch: reply.lastBatch, returned: returnedFile, givenBackBefore: reply.givenBackBefore as GivenBack[] })
          return
        } catch (err) {
          const later = err instanceof PeerCallError ? refusedFor(err) : undefined
          if (later !== undefined) {
            // The holder is in a later generation: this node starts it (its ledgers are then empty), and the holder holds nothing of this one.
            membership.observe(later)
            reports.push({ node: holder, held: [], lastBatch: 0 })
            return
          }
          if (err instanceof PeerCallError && err.takenForDead !== undefined) membership.refusedAsDead(holder, err)
          else if (err instanceof PeerCallError && err.unreachable) membership.checkGone(holder)
          if (tries === 0) log.warn({ holder, vc: plan.vc, err: (err as Error).message }, 'a holder did not answer a reclaim; asking again until it does, or is taken for dead')
          await sleep(ASK_AGAIN_MS)
        }
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
  /** Runs of other nodes already said to read beside this node's (each is said once). */
  private readonly runsElsewhere = new Set<string>()
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
    membership.onFence(() => this.fenced())
    membership.onOwnersChanged(() => this.remote.wakeAll(allVcs(layout)))
    membership.reading = () => options.readingRuns?.() ?? []
    membership.onPeerRuns((peer, theirs) => this.compareRuns(peer, theirs))
  }

  /**
   * Two jobs at once across the cluster: a peer's trainers read a run (named
   * by a launcher) that none of this node's reads while they read another.
   * Said once per run (runs only a process names cannot be told apart).
   */
  private compareRuns (peer: NodeId, theirs: readonly string[]): void {
    const mine = this.options.readingRuns?.() ?? []
    if (mine.length === 0) return
    for (const run of theirs) {
      if (mine.includes(run) || this.runsElsewhere.has(run)) continue
      this.runsElsewhere.add(run)
      this.options.runElsewhere?.(peer, run)
    }
  }

  /**
   * This node was taken for dead: it drops every epoch state, mirror and
   * ownership (its VCs are its successors' now), and its next run begins a
   * generation (membership.ts rejoins it).
   */
  private fenced (): void {
    const droppedHere = this.engine.reset()
    this.engine.setOwnership(() => false)
    const droppedMirrors = this.remote.reset()
    this.takeover.newGeneration()
    this.sync.newGeneration()
    this.remote.wakeAll(allVcs(this.layout))
    this.readHere = true
    this.log.info({ droppedHere, droppedMirrors }, 'fenced: epoch state, mirrors and ownership dropped')
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
    this.runsElsewhere.clear()
    this.log.info({ generation: this.membership.generation.number, droppedHere, droppedMirrors }, 'new generation: epoch state, mirrors and ledgers reset')
  }

  /** Listens, then handshakes with every peer; throws a one-line reason on any mismatch. */
  async start (): Promise<void> {
    const { credentials, token } = this.membership.options
    this.server = await startPeerServer(this.options.listen, credentials, token, this.service, this.log, this.layout.files.length, this.options.dataPort)
    try {
      await this.membership.handshakeAll()
    } catch (err) {
      if (err instanceof UsageError) await this.tellPeersWhy(err.message)
      throw err
    }
    // Mounted again after it died: its VCs stay with their adopters until the next generation.
    if (this.membership.isRejoining(this.membership.node)) this.engine.setOwnership(vc => this.membership.ownerOf(vc) === this.membership.node)
    // Peers that died while this node started: their chunks are taken over now.
    void this.takeover.adoptOrphans().catch(err => this.takeover.failed(err))
    this.sync.start()
  }

  /**
   * A node that cannot join answers every handshake with why, until each
   * peer has heard it (or for a while at most): a peer started a moment
   * later learns it instead of waiting --peer-wait for a node gone.
   */
  private async tellPeersWhy (why: string): Promise<void> {
    this.service.cannotJoin = why
    const until = performance.now() + Math.min(TELL_PEERS_MS, this.membership.options.startupTimeoutMs)
    const peers = this.membership.livePeers()
    while (performance.now() < until && !peers.every(peer => this.service.handshakesFrom.has(peer))) await sleep(ASK_AGAIN_MS)
  }

  /**
   * An open by this node's trainer, answered only while this node holds a
   * quorum of leases: from a VC it owns (checked again once the answer is
   * decided, a load may take long), from its mirror, or by the owner.
   * `exact` (the file itself) is honoured for VCs this node answers for; a
   * remote VC's home cannot be asked for it yet, so such an open is
   * answered as any other (and logged once).
   */
  async open (file: FileId, options: OpenOptions = {}): Promise<ServedFile> {
    this.readHere = true
    const deadline = performance.now() + OPEN_WAIT_MS
    for (;;) {
      if (!this.membership.mayServe()) await this.membership.untilServing(deadline)
      const vc = this.vcOf(file)
      if (this.engine.owns(vc)) {
        const served = await this.engine.open(file, options).catch((err: unknown) => {
          if (err instanceof NotOwnedHere) return undefined // the VC moved while the open waited: decided again
          throw err
        })
        if (served === undefined) continue
        if (this.membership.mayServe() && this.engine.owns(vc)) return served
        this.giveBack(served)
        continue
      }
      if (options.exact === true && !this.warnedExact) {
        this.warnedExact = true
        this.log.warn({ file: this.layout.files[file].path }, 'a loader stats sample paths before opening them; in a cluster only files whose home is this node are served exactly')
      }
      const opened = await this.remote.open(file, () => this.membership.mayServe())
      if (opened.kind === 'served') return opened.served
      // Otherwise a takeover made this node the owner while the open was asking elsewhere, or it lost its quorum: decide it again.
    }
  }

  private vcOf (file: FileId): VcId { return vcOfFile(this.layout, file) }

  /**
   * Sends a remote open to the VC's owner, following deaths and takeovers.
   * An owner that does not answer, or says to ask again (it lost its
   * quorum, or does not take itself for the owner yet), is asked again
   * until it answers or the cluster takes it for dead: an open never fails
   * for a death or a race that the cluster gets over. An answer from an
   * owner taken for dead meanwhile is dropped: its successor counts on the
   * files it did not report.
   */
  private async askOwner (request: RemoteRequest): Promise<OwnerReply> {
    const deadline = performance.now() + OPEN_WAIT_MS
    for (let tries = 0; ; tries++) {
      if (this.membership.fenced !== undefined || this.membership.closed) await this.membership.untilServing(deadline)
      const owner = this.membership.ownerOf(request.vc)
      const home = this.layout.vcs[request.vc].home
      if (owner === undefined) {
        if (this.membership.storage === 'sharded') throw new FsError('EIO', `node ${home} (${this.membership.addressOf(home)}) is gone and its chunks are only in its pack shard`)
        // This node may take over whatever has no other owner, unless it rejoins: then every node alive does.
        throw new FsError('EIO', `virtual chunk ${request.vc} has no owner: every node alive rejoins after it was taken for dead or mounted again, and none answers for chunks until the next training run starts`)
      }
      if (owner === this.membership.node) {
        // A takeover that did not end with the VC here (a new generation overtook it, a survivor's refusal fenced
        // this node, a call failed) is no answer: the open asks again, as of an owner that does not answer yet.
        const failed = await this.takeover.adoptOrphans().then(() => undefined, (err: Error) => err.message)
        if (this.engine.owns(request.vc)) return { kind: 'owner-is-here' }
        if (performance.now() > deadline) throw new FsError('EIO', `this node could not take over virtual chunk ${request.vc} of dead node ${home} for ${OPEN_WAIT_MS / 1000}s${failed !== undefined ? ` (${failed})` : ''}`)
        await sleep(ASK_AGAIN_MS)
        continue
      }
      const incarnation = this.membership.incarnationOf(owner)
      // As the mirror stands now: a try after a reset (a new generation, a fencing) names no batch of the mirror before it.
      const { lastBatch, givenBackBefore } = this.remote.current(request)
      const gaveUp = new AbortController()
      const unwatch = this.membership.whenDead(owner, () => gaveUp.abort())
      try {
        const reply = await this.membership.client(owner).read({
          generation: this.membership.generation,
          node: this.membership.node,
          file: request.file,
          emptyOffsets: encodeOffsets(request.emptyOffsets, this.layout.chunkSize),
          freeBytes: Math.floor(request.freeBytes),
          lastBatch,
          givenBackFiles: givenBackBefore.map(g => g.file),
          givenBackBatches: givenBackBefore.map(g => g.batch)
        }, this.membership.handshakeRequest(), gaveUp.signal)
        // A later generation the owner is in starts here; an answer of one this node has left is not kept (its files were that generation's).
        this.membership.observe(reply.generation)
        if (compareGenerations(reply.generation, this.membership.generation) !== 0 || this.membership.isDead(owner) || this.membership.incarnationOf(owner) !== incarnation) {
          this.drop(reply)
          continue
        }
        return { kind: 'answered', answer: decodeReadReply(reply) }
      } catch (err) {
        if (!(err instanceof PeerCallError)) throw err
        const later = refusedFor(err)
        if (later !== undefined) {
          this.membership.observe(later)
          continue
        }
        if (err.takenForDead !== undefined) {
          this.membership.refusedAsDead(owner, err)
          continue
        }
        if (!err.unreachable && !err.askAgain) throw new FsError('EIO', `node ${owner} could not answer for file ${request.file}: ${err.details}`)
        if (err.unreachable) this.membership.checkGone(owner)
        if (tries === 0) this.log.info({ owner, vc: request.vc, err: err.details }, 'an owner did not answer a read; asking again until it does, or is taken for dead')
        if (performance.now() > deadline) {
          throw new FsError('EIO', `node ${owner} (${this.membership.addressOf(owner)}) did not answer for file ${request.file} for ${OPEN_WAIT_MS / 1000}s, and a majority of the cluster does not take it for dead (${err.details})`)
        }
        await sleep(ASK_AGAIN_MS)
      } finally {
        unwatch()
      }
    }
  }

  /** A failed open of this node's trainer that must not count: its file is charged to another open (a VC this node answers for). */
  uncharge (file: FileId, generation?: number): void {
    if (this.engine.owns(this.vcOf(file))) this.engine.uncharge(file, generation)
  }

  /** An answer that never reached this node's trainer: a file of a VC this node answers for waits for another open; a peer's is dropped (its home counts it served). */
  giveBack (served: ServedFile): void {
    if (this.membership.fenced !== undefined) { this.buffers.give(served.bytes); return }
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
      quorum: this.membership.mayServe(),
      ownedVirtualChunks: allVcs(this.layout).filter(vc => this.engine.owns(vc)).length,
      generation: { ...this.membership.generation },
      ...this.membership.counters,
      ...this.service.counters,
      takeovers: this.engine.takeovers,
      unsynced: this.sync.pending(),
      ...this.remote.counters
    }
  }

  /** Stops serving before the port closes: a peer may take a refused connection for this node's death, and take its chunks over. */
  async close (): Promise<void> {
    this.membership.stopServing()
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
