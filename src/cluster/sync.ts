/**
 * The periodic sync, four times a second, both ways. To each live peer
 * this node sends the standby copies of the VCs that peer would take over
 * from it, and the files it served from its mirrors of that peer's VCs
 * (keeping the owner's ledger true). What cannot be delivered is sent
 * again next time, until the peer is found dead. A slow peer has one sync
 * call out at a time.
 */
import type { Logger } from 'pino'
import type { Engine } from '../engine/engine'
import type { RemoteReader } from '../engine/remote-reader'
import type { FileId, Layout, NodeId, VcId } from '../redirect/layout'
import type { ServedNotice } from '../redirect/mirror'
import { ownerOrder } from '../redirect/takeover'
import type { Membership } from './membership'
import type { Takeover } from './takeover'
import type { StandbyVc, SyncRequest } from './wire'
import { appendTo } from '../util/lists'

/** How often standby copies and served notices go out. */
const SYNC_PERIOD_MS = 250

export class Sync {
  /** Served notices not yet delivered, per owner. */
  private readonly unsentNotices = new Map<NodeId, ServedNotice[]>()
  /** Peers with a sync call out. */
  private readonly syncing = new Set<NodeId>()
  private timer?: NodeJS.Timeout

  constructor (
    private readonly layout: Layout,
    private readonly membership: Membership,
    private readonly engine: Engine,
    private readonly remote: RemoteReader,
    private readonly takeover: Takeover,
    private readonly log: Logger
  ) {}

  start (): void {
    this.timer = setInterval(() => { void this.syncPeers() }, SYNC_PERIOD_MS)
    this.timer.unref()
  }

  stop (): void { clearInterval(this.timer) }

  /** What has changed here and has not reached a peer yet: standby copies, served notices, sync calls out. Zero once the sync caught up. */
  pending (): number {
    let unsent = 0
    for (const notices of this.unsentNotices.values()) unsent += notices.length
    return this.engine.standbyPending + this.remote.servedNoticesPending + unsent + this.syncing.size
  }

  /** A new generation: what was not sent of the last one never will be. */
  newGeneration (): void { this.unsentNotices.clear() }

  /** A peer's sync: its standby copies for this node to keep, and what it served of VCs this node answers for. */
  receive (request: SyncRequest): void {
    // Ids from a peer's message: the layout both nodes share numbers them.
    const node = request.node as NodeId
    if (this.membership.isDead(node)) return
    for (const update of request.standby) {
      this.takeover.keepStandby(update.vc as VcId, { epoch: update.epoch, served: update.servedFiles.map((file, i) => ({ file: file as FileId, node: update.servedNodes[i] as NodeId, batch: update.servedBatches[i] })) })
    }
    this.engine.noteServedElsewhere(node, request.served as ServedNotice[])
  }

  private async syncPeers (): Promise<void> {
    const node = this.membership.node
    const standbyFor = new Map<NodeId, StandbyVc[]>()
    for (const update of this.engine.takeStandbyUpdates()) {
      const next = ownerOrder(this.layout, update.vc).find(peer => peer !== node && this.membership.mayOwn(peer))
      const wire = { vc: update.vc, epoch: update.epoch, servedFiles: update.served.map(s => s.file), servedNodes: update.served.map(s => s.node), servedBatches: update.served.map(s => s.batch) }
      if (next !== undefined) appendTo(standbyFor, next, wire)
    }
    for (const notice of this.remote.takeServedNotices()) {
      const owner = this.membership.ownerOf(notice.vc)
      if (owner !== undefined && owner !== node) appendTo(this.unsentNotices, owner, notice)
    }
    await Promise.all(this.membership.livePeers().map(async peer => {
      const standby = standbyFor.get(peer) ?? []
      if (this.syncing.has(peer)) {
        for (const update of standby) this.engine.resendStandby(update.vc as VcId)
        return
      }
      // As many notices as the layout has files at most, the rest at the next round: a peer takes
      // no request larger than its layout can need (wire.ts, requestLimit), and a peer out of reach
      // for epochs leaves more queued.
      const queued = this.unsentNotices.get(peer) ?? []
      const served = queued.slice(0, this.layout.files.length)
      if (standby.length === 0 && served.length === 0) return
      if (queued.length > served.length) this.unsentNotices.set(peer, queued.slice(served.length))
      else this.unsentNotices.delete(peer)
      this.syncing.add(peer)
      try {
        await this.membership.client(peer).sync({ generation: this.membership.generation, node, standby, served })
      } catch (err) {
        this.log.debug({ peer, err: (err as Error).message }, 'sync failed; will send again')
        for (const update of standby) this.engine.resendStandby(update.vc as VcId)
        // Oldest first: the failed call's notices, then any queued while it was out.
        this.unsentNotices.set(peer, served.concat(this.unsentNotices.get(peer) ?? []))
      } finally {
        this.syncing.delete(peer)
      }
    }))
  }
}
