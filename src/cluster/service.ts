/**
 * The peer service: what this node answers to the others' calls. It checks
 * each request (a bad one is refused with INVALID_ARGUMENT, a call this
 * node must not answer with FAILED_PRECONDITION, counted) and hands the
 * work to the engine (home side), the remote reader (mirrors), the
 * takeover and the sync. Every call that depends on epoch state carries
 * the caller's generation: a later one is started here first; an earlier
 * one is refused (ABORTED, naming this node's), never answered from
 * another generation's state (generations.ts).
 */
import * as grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { Engine, ServedFile } from '../engine/engine'
import type { RemoteReader } from '../engine/remote-reader'
import { vcOfFile, type FileId, type Layout, type NodeId, type VcId } from '../redirect/layout'
import type { Membership } from './membership'
import { PeerRefusal, type PeerHandler } from './peer-server'
import type { Sync } from './sync'
import type { Takeover } from './takeover'
import { generationOf, staleGeneration } from './generations'
import { decodeOffsets, PROTOCOL_VERSION, type Generation, type FileData, type HandshakeReply, type HandshakeRequest, type ReadReply, type ReadRequest, type ReclaimReply, type ReclaimRequest, type SyncReply, type SyncRequest, type TakeoverStateReply, type TakeoverStateRequest } from './wire'

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

export class PeerService implements PeerHandler {
  readonly counters = { refusedRequests: 0 }

  constructor (private readonly parts: PeerServiceParts) {}

  private get node (): NodeId { return this.parts.membership.node }

  handshake (request: HandshakeRequest): Omit<HandshakeReply, 'dataPort'> {
    const { membership } = this.parts
    const problem = membership.refusalOf(request)
    if (problem !== undefined) {
      this.parts.log.warn({ peer: request.node, problem }, 'refused a peer handshake')
      throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node}: ${problem}`)
    }
    const rejoining = membership.admit(request.node as NodeId, Number(request.incarnation))
    membership.observe(generationOf(request))
    return { protocolVersion: PROTOCOL_VERSION, node: this.node, layoutHash: this.parts.layout.hash, generation: membership.generation, rejoining, dead: membership.deadNodes() }
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

  /** Another node's open of a file of a VC this node answers for (or must now: a takeover). */
  async read (request: ReadRequest): Promise<ReadReply> {
    const { layout, engine, takeover } = this.parts
    this.invalid(this.parts.membership.checkNode(request.node))
    this.invalid(request.file < layout.files.length ? undefined : `file ${request.file} is not in the layout (it has ${layout.files.length})`)
    this.sameGeneration(request)
    // Checked above: ids of the layout both nodes share.
    const [file, node] = [request.file as FileId, request.node as NodeId]
    const vc = vcOfFile(layout, file)
    if (!engine.owns(vc)) {
      const why = await takeover.claim(vc, node)
      if (why !== undefined) this.refuse(vc, node, why)
    }
    const answer = await engine.serveRequest(file, {
      node,
      emptyOffsets: decodeOffsets(request.emptyOffsets),
      freeBytes: request.freeBytes,
      lastBatch: request.lastBatch
    })
    return { served: answer.served === undefined ? null : data(answer.served), batch: answer.batch.map(data), batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch, generation: this.parts.membership.generation }
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
    if (this.parts.membership.isDead(request.node as NodeId)) throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, `node ${this.node} takes node ${request.node} for dead`)
    this.invalid(request.vc < this.parts.layout.vcs.length ? undefined : `virtual chunk ${request.vc} is not in the layout`)
    this.sameGeneration(request)
    const { held, lastBatch, returned } = this.parts.remote.reclaim(request.vc as VcId, request.giveBack, request.offsets)
    return { held, lastBatch, returned: returned === undefined ? null : data(returned) }
  }

  /** A node taking over a dead node's VCs asks for this node's part. */
  async takeoverState (request: TakeoverStateRequest): Promise<TakeoverStateReply> {
    const { layout, membership } = this.parts
    this.invalid(membership.checkNode(request.node) ?? membership.checkNode(request.dead))
    this.invalid(request.vcs.every(vc => vc < layout.vcs.length && layout.vcs[vc].home === request.dead) ? undefined : 'the virtual chunks asked for are not all the dead node\'s')
    this.sameGeneration(request)
    const reply = this.parts.takeover.reportFor(request.vcs as VcId[])
    const dead = request.dead as NodeId
    // The taking-over node found it dead: stop asking it, and take over our share (unless it is back already: another incarnation).
    if (!membership.isRejoining(dead)) membership.markDead(dead, `node ${request.node} is taking over its chunks`)
    return reply
  }

  sync (request: SyncRequest): SyncReply {
    this.invalid(this.parts.membership.checkNode(request.node))
    for (const update of request.standby) {
      this.invalid(update.vc < this.parts.layout.vcs.length && update.servedFiles.length === update.servedNodes.length ? undefined : `bad standby update for virtual chunk ${update.vc}`)
    }
    for (const notice of request.served) {
      this.invalid(notice.vc < this.parts.layout.vcs.length && notice.file < this.parts.layout.files.length ? undefined : `bad served notice: file ${notice.file} of virtual chunk ${notice.vc}`)
    }
    this.sameGeneration(request)
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
