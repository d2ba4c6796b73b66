/**
 * The peer service: what this node answers to the others' calls. It checks
 * each request (a bad one is refused with INVALID_ARGUMENT, a call this
 * node must not answer with FAILED_PRECONDITION, counted) and hands the
 * work to the engine (home side), the remote reader (mirrors), the
 * takeover and the sync. Every call that depends on epoch state carries
 * the caller's generation: a later one is started here first; an earlier
 * one is refused (ABORTED, naming this node's), never answered from
 * another generation's state (generations.ts). A caller this node takes
 * for dead, or suspects, is refused so that it learns it (membership.ts);
 * a read is answered only while this node holds a quorum of leases, and
 * one it cannot answer now (no quorum, or the VC's owner is another) is
 * refused with UNAVAILABLE: the caller asks again.
 */
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import { NotOwnedHere, type Engine, type ServedFile } from '../engine/engine'
import type { RemoteReader } from '../engine/remote-reader'
import { vcOfFile, type FileId, type Layout, type NodeId, type VcId } from '../redirect/layout'
import type { Membership } from './membership'
import { askAgain, PeerRefusal } from './call-error'
import type { PeerHandler } from './peer-server'
import type { Sync } from './sync'
import type { Takeover } from './takeover'
import { generationOf, staleGeneration } from './generations'
import type { Death } from './liveness'
import { decodeOffsets, PROTOCOL_VERSION, type Generation, type FileData, type HandshakeReply, type HandshakeRequest, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type RenewReply, type RenewRequest, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest } from './wire'

export interface PeerServiceParts {
  readonly layout: Layout
  readonly membership: Membership
  readonly engine: Engine
  readonly remote: RemoteReader
  readonly takeover: Takeover
  readonly sync: Sync
  /** The node's stats as JSON, for the Stats call. */
  readonly statsJson: () => string
  /** The node's sample buffers: shipped answers' bytes go back to them. */
  readonly buffers: SampleBuffers
  readonly log: Logger
}

const data = (f: ServedFile): FileData => ({ file: f.file, data: f.bytes })

/** How long a read waits for this node to hold a quorum of leases before the caller is told to ask again. */
const QUORUM_WAIT_MS = 1000

export class PeerService implements PeerHandler {
  readonly counters = { refusedRequests: 0 }
  /** Why this node cannot join the cluster, once its start-up failed: every handshake is told, so that no peer waits for it. */
  cannotJoin?: string
  /** Peers whose handshake reached this node (answered or refused). */
  readonly handshakesFrom = new Set<NodeId>()
  /**
   * Per VC and requesting node, the read being answered now. Its answer is
   * kept by the engine until the node's next read of the VC says whether
   * it came (redirect/home.ts, `sentAnswers`); a read the node replaced
   * before it was answered gives its answer back instead.
   */
  private readonly latestRead = new Map<string, object>()

  constructor (private readonly parts: PeerServiceParts) {}

  private get node (): NodeId { return this.parts.membership.node }

  handshake (request: HandshakeRequest): Omit<HandshakeReply, 'dataPort'> {
    const { membership } = this.parts
    if (membership.checkNode(request.node) === undefined) this.handshakesFrom.add(request.node as NodeId)
    const problem = membership.refusalOf(request) ?? (this.cannotJoin !== undefined ? `it cannot join the cluster: ${this.cannotJoin}` : undefined)
    if (problem !== undefined) {
      this.parts.log.warn({ peer: request.node, problem }, 'refused a peer handshake')
      throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node}: ${problem}`)
    }
    const rejoining = membership.admit(request.node as NodeId, Number(request.incarnation))
    membership.observe(generationOf(request))
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, layoutHash: this.parts.layout.hash, generation: membership.generation, rejoining, samples: this.parts.layout.files.length, ...membership.handshakeNews() }
  }

  /** A peer renews its lease (and tells what it knows). */
  renew (request: RenewRequest): RenewReply {
    this.invalid(this.parts.membership.checkNode(request.node))
    return this.parts.membership.renewalFrom(request)
  }

  /** A peer began a generation: this node starts it too, unless it is in a later one. */
  newGeneration (request: Generation): Generation {
    this.parts.membership.observe(generationOf({ generation: request }))
    return this.parts.membership.generation
  }

  /** A call from an earlier generation than this node's is refused; a later one is started here first. */
  private sameGeneration (request: { generation?: Generation | null }): void {
    if (this.parts.membership.observe(generationOf(request)) < 0) throw staleGeneration(this.parts.membership.generation)
  }

  /**
   * Another node's open of a file of a VC this node answers for (or must
   * now: a takeover). Answered only while this node holds a quorum of
   * leases, checked again once the answer is decided (a load may have
   * taken long): an answer decided without one is put back, and the
   * caller asks again.
   */
  async read (request: ReadRequest): Promise<ReadReply> {
    const { layout, membership } = this.parts
    this.invalid(membership.checkNode(request.node))
    this.invalid(request.file < layout.files.length ? undefined : `file ${request.file} is not in the layout (it has ${layout.files.length})`)
    this.sameGeneration(request)
    // Checked above: ids of the layout both nodes share.
    const [file, node] = [request.file as FileId, request.node as NodeId]
    membership.checkAlive(node)
    const incarnation = membership.incarnationOf(node)
    const vc = vcOfFile(layout, file)
    // A node has one read of a VC out at a time: a new one means it gave up on the one before (see `latestRead`).
    const key = `${vc}:${node}`
    const token = {}
    this.latestRead.set(key, token)
    try {
      return await this.answerRead(file, vc, node, incarnation, request, () => this.latestRead.get(key) !== token)
    } finally {
      if (this.latestRead.get(key) === token) this.latestRead.delete(key)
    }
  }

  /** `replaced`: whether the node has asked again since (a newer read of the VC). */
  private async answerRead (file: FileId, vc: VcId, node: NodeId, incarnation: number | undefined, request: ReadRequest, replaced: () => boolean): Promise<ReadReply> {
    const { engine, takeover, membership } = this.parts
    await membership.untilServing(performance.now() + QUORUM_WAIT_MS).catch((err: Error) => { throw askAgain(`node ${this.node} cannot answer now: ${err.message}`) })
    if (!engine.owns(vc)) {
      const why = await takeover.claim(vc)
      if (why !== undefined) this.refuse(vc, node, why)
    }
    const answer = await engine.serveRequest(file, {
      node,
      emptyOffsets: decodeOffsets(request.emptyOffsets),
      freeBytes: request.freeBytes,
      lastBatch: request.lastBatch,
      // Looked up in the ledger only: an id it does not hold (a peer's mistake) changes nothing.
      givenBackBefore: request.givenBackFiles.map((file, i) => ({ file: file as FileId, batch: request.givenBackBatches[i] ?? 0 }))
    }).catch((err: unknown) => {
      // Fenced, or the VC moved to a new generation's owner, while the read waited: the requester asks its owner now.
      if (err instanceof NotOwnedHere) throw askAgain(`node ${this.node} stopped answering for virtual chunk ${vc} while it answered`)
      throw err
    })
    if (membership.isDead(node) || membership.incarnationOf(node) !== incarnation) {
      // The requester died while its answer was decided (a load can take long): its death already made what it held
      // loadable again, and what this answer would ship it must be too, or the ledger waits for it "in transit" for good.
      if (answer.served !== undefined) engine.giveBack(answer.served)
      engine.forgetNode(node)
      this.parts.log.info({ peer: node, vc, batch: answer.batch.length }, 'a peer was taken for dead while its read was answered: its answer and batch stay here')
      this.shipped(answer.batch.map(f => f.bytes))
      membership.checkAlive(node)
      throw askAgain(`node ${node} was taken for dead while node ${this.node} answered it`)
    }
    if (replaced() && engine.owns(vc)) {
      // The requester asked again meanwhile (this call failed on its side: a connection that broke, say), and would not
      // take this answer: it goes back to its slot, and the batch may be loaded again, before anything counts them sent.
      if (answer.served !== undefined) engine.giveBack(answer.served)
      engine.takeBackBatch(node, answer)
      this.shipped(answer.batch.map(f => f.bytes))
      throw askAgain(`node ${node} asked node ${this.node} again for virtual chunk ${vc} before this answer was ready`)
    }
    if (!membership.mayServe() || !engine.owns(vc)) {
      // Never sent: the answer goes back to its slot, and the batch counts as lost on the way (the caller's next request says it never came).
      if (answer.served !== undefined && engine.owns(vc)) engine.giveBack(answer.served)
      else if (answer.served !== undefined) this.parts.buffers.give(answer.served.bytes)
      this.shipped(answer.batch.map(f => f.bytes))
      throw askAgain(`node ${this.node} lost its quorum of leases, or the virtual chunk, while it answered`)
    }
    engine.answerSent(node, answer)
    return { served: answer.served === undefined ? null : data(answer.served), batch: answer.batch.map(data), batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch, generation: membership.generation }
  }

  /** A read's or reclaim's answer went out: its bytes left this node's memory for good (engine.serveRequest and the remote reader took them), so their buffers serve the next load. */
  shipped (bytes: Buffer[]): void {
    for (const b of bytes) this.parts.buffers.give(b)
  }

  /** The owner of a VC asks what this node's mirror holds of it, and maybe for one file back. */
  reclaim (request: ReclaimRequest): ReclaimReply {
    this.invalid(this.parts.membership.checkNode(request.node))
    // Once we reported our state for a takeover of that node, it is dead to us:
    // a late reclaim from it must not take a file that the new owner counts on.
    this.parts.membership.checkAlive(request.node as NodeId)
    this.invalid(request.vc < this.parts.layout.vcs.length ? undefined : `virtual chunk ${request.vc} is not in the layout`)
    this.sameGeneration(request)
    const { held, lastBatch, returned, givenBackBefore } = this.parts.remote.reclaim(request.vc as VcId, request.giveBack, request.offsets)
    return { held, lastBatch, returned: returned === undefined ? null : data(returned), givenBackBefore }
  }

  /** A node taking over a dead node's VCs asks for this node's part. */
  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> {
    const { layout, membership } = this.parts
    this.invalid(membership.checkNode(request.node) ?? membership.checkNode(request.dead))
    this.invalid(request.vcs.every(vc => vc < layout.vcs.length && layout.vcs[vc].home === request.dead) ? undefined : 'the virtual chunks asked for are not all the dead node\'s')
    this.sameGeneration(request)
    membership.checkAlive(request.node as NodeId)
    // What the taking-over node knows of deaths, this node learns before it reports: from now on it drops answers of the dead.
    membership.learn({ dead: request.deaths as Death[] }, `node ${request.node}`)
    return this.parts.takeover.reportFor(request.vcs as VcId[])
  }

  sync (request: SyncRequest): SyncReply {
    this.invalid(this.parts.membership.checkNode(request.node))
    for (const update of request.standby) {
      this.invalid(update.vc < this.parts.layout.vcs.length && update.servedFiles.length === update.servedNodes.length && update.servedFiles.length === update.servedBatches.length ? undefined : `bad standby update for virtual chunk ${update.vc}`)
    }
    for (const notice of request.served) {
      this.invalid(notice.vc < this.parts.layout.vcs.length && notice.file < this.parts.layout.files.length ? undefined : `bad served notice: file ${notice.file} of virtual chunk ${notice.vc}`)
    }
    this.sameGeneration(request)
    this.parts.membership.checkAlive(request.node as NodeId)
    this.parts.sync.receive(request)
    return {}
  }

  stats (): { json: string } { return { json: this.parts.statsJson() } }

  private refuse (vc: VcId, requester: NodeId, why: string): never {
    this.counters.refusedRequests++
    throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node} does not answer for virtual chunk ${vc} (asked by node ${requester}): ${why}`)
  }

  private invalid (problem: string | undefined): void {
    if (problem !== undefined) throw new PeerRefusal(grpc.status.INVALID_ARGUMENT, problem)
  }
}
