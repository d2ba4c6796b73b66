/**
 * The home side of a node's protocol: what it keeps about the VCs it
 * answers for, for the cluster's sake.
 *
 * A node answers opens of the VCs it owns, for its own trainer and for
 * other nodes' (`MirrorReport`); it ships opportunistic batches of valid
 * slots into the requesters' mirrors and records them in its ledger, and
 * before it ends a VC's epoch while files of that VC sit in mirrors it
 * asks for a *reclaim* (see ledger.ts). An answer to another node's open
 * goes out numbered as a batch is, and is kept until that node's next
 * request for the VC says whether it arrived (`sentAnswers`). A reclaim, like a load, is carried
 * out by the caller and keeps its VC busy. It keeps each VC's epoch number
 * (requesters learn it with every answer) and, for the standby copy at the
 * next node of each VC's owner order, whom it served each file to in that
 * epoch (see takeover.ts). On a single node the ledger stays empty and
 * nothing of the standby copy is kept.
 *
 * The protocol core (protocol.ts) calls in when an epoch ends or a VC is
 * reset, and when it serves a file.
 */
import type { ProtocolCounters } from './counters'
import { allVcs, vcOfFile, type FileId, type Layout, type NodeId, type VcId } from './layout'
import { ShippedLedger } from './ledger'
import type { ServedNotice } from './mirror'
import type { Asking, GivenBack, MirrorReport, OpenDecision, ReclaimPlan, ReclaimReport, StandbyUpdate } from './protocol'
import type { SeededRandom } from './random'
import type { SlotTable } from './slots'
import type { Adoption, StandbyEntry } from './takeover'

/** What the home side shares with the protocol core that owns it. */
export interface HomeParts {
  readonly layout: Layout
  readonly slots: SlotTable
  readonly random: SeededRandom
  readonly counters: ProtocolCounters
  readonly node: NodeId
  /** Whether batches go to requesters at all (not in off mode, nor with prefetch off). */
  readonly shipsBatches: boolean
  /** Updates the memory counters after slots changed. */
  noteMemory (): void
  /** A file of this epoch that reached no trainer: this epoch's to serve again (Protocol.reopen). */
  reopen (file: FileId): void
}

/** An answer to another node's open that went out: the file, its batch number, and the VC's epoch then. */
interface SentAnswer { readonly file: FileId, readonly batch: number, readonly epoch: number }

export class HomeSide {
  /** Files this node shipped into other nodes' mirrors. */
  private readonly ledger = new ShippedLedger()
  /** VCs this node answers for: its own, and any it took over from a dead home. */
  private readonly owned: Uint8Array
  /** Sequence number of the last batch shipped. */
  private lastBatch = 0
  /** Per VC, how many times its epoch ended; requesters learn it with every answer. */
  private readonly vcEpochs: Uint32Array
  /**
   * Per file, the node this node sent it to in its VC's current epoch (an
   * answer to an open, or a batch), plus one (0: none; its own trainer is
   * this node). For the standby copy.
   */
  private readonly servedTo: Uint16Array
  /**
   * Per file sent to a mirror in a batch, that batch's number (0: an
   * answer to an open, or none). A file carried into a new epoch while a
   * mirror held it keeps its holder and batch here: only the holder can
   * say whether its trainer got it, and it names it by that batch.
   */
  private readonly shippedIn: Float64Array
  /** Owned VCs whose standby copy (epoch, `servedTo`) changed since the last update. */
  private readonly standbyDirty = new Set<VcId>()
  /**
   * Per VC and requester, the last answer sent to its open and not yet
   * known to have arrived. A requester has one request per VC out at a
   * time, and its next one names the last batch it received: an answer of
   * a later batch never came (its connection broke on the way), so its
   * file reached no trainer and is this epoch's to serve again.
   */
  private readonly sentAnswers = new Map<VcId, Map<NodeId, SentAnswer>>()

  constructor (private readonly parts: HomeParts) {
    const { layout } = parts
    this.owned = new Uint8Array(layout.vcs.length)
    this.vcEpochs = new Uint32Array(layout.vcs.length)
    this.servedTo = new Uint16Array(layout.files.length)
    this.shippedIn = new Float64Array(layout.files.length)
    layout.vcs.forEach((vc, v) => { if (vc.home === parts.node) this.owned[v] = 1 })
  }

  owns (vc: VcId): boolean { return this.owned[vc] === 1 }
  epochOf (vc: VcId): number { return this.vcEpochs[vc] }

  /** Files of `vc` that mirrors hold: they stay consumed across its rollover. */
  filesHeld (vc: VcId): FileId[] { return this.ledger.files(vc) }

  // ---------------------------------------------------------------- the core's calls

  /**
   * The VC's epoch ended: the next one starts with nothing served but the
   * files mirrors still hold (they stay consumed, and are the new epoch's
   * to serve there).
   */
  endEpoch (vc: VcId): void {
    this.vcEpochs[vc]++
    this.forgetServed(vc)
    for (const [file, { node, batch }] of this.ledger.entries(vc)) this.noteServed(file, node, batch)
    // An answer of an ended epoch was served in it, as far as anyone can tell: that epoch is gone.
    this.sentAnswers.delete(vc)
  }

  /** The VC starts afresh (a new run): a new epoch, and nothing in mirrors counts any more. */
  resetVc (vc: VcId): void {
    this.vcEpochs[vc]++
    for (const file of this.ledger.files(vc)) this.ledger.remove(vc, file)
    this.forgetServed(vc)
    this.sentAnswers.delete(vc)
  }

  /** Every VC starts afresh (`redirfs reset`). */
  reset (): void {
    this.ledger.clear()
    this.sentAnswers.clear()
    this.servedTo.fill(0)
    for (const vc of allVcs(this.parts.layout)) this.standbyDirty.add(vc)
  }

  /** A file served went back unserved (its opener went away). */
  unserve (file: FileId): void { this.servedTo[file] = 0 }

  /** `file` went to `node`'s trainer (undefined: this node's), or into its mirror in batch `batch`. */
  noteServed (file: FileId, node: NodeId | undefined, batch = 0): void {
    if (this.parts.layout.nodes === 1) return // no standby copy without a cluster: keep the single-node open path as it was
    this.servedTo[file] = (node ?? this.parts.node) + 1
    this.shippedIn[file] = batch
    this.standbyDirty.add(vcOfFile(this.parts.layout, file))
  }

  private forgetServed (vc: VcId): void {
    const { layout } = this.parts
    for (const pc of layout.vcs[vc].pcs) for (const file of layout.pcs[pc].files) this.servedTo[file] = 0
    this.standbyDirty.add(vc)
  }

  // ---------------------------------------------------------------- reclaims

  /**
   * Called when an open finds nothing left to load for it. While a mirror
   * holds a file this open could be given (at `offsets`; any, when
   * undefined), that holder gives one back. Otherwise, before the VC's epoch
   * may end, every holder must have just said what it still holds
   * (`holdersConfirmed`), so that only files really still held are carried
   * into the next epoch. Undefined when the epoch may end now.
   */
  planReclaim (vc: VcId, offsets: readonly number[] | undefined, { forNode, holdersConfirmed }: Asking): OpenDecision | undefined {
    const { layout, slots, random, counters } = this.parts
    const entries = this.ledger.entries(vc)
    const wanted = entries.filter(([file]) => offsets === undefined || offsets.includes(layout.fileOffset[file]))
    if (wanted.length === 0 && (holdersConfirmed || entries.length === 0)) return undefined
    const giveBack = wanted.length === 0 ? undefined : { node: wanted[random.below(wanted.length)][1].node, offsets }
    slots.setLoading(vc, true)
    counters.reclaims++
    return { kind: 'reclaim', plan: { vc, holders: this.ledger.holders(vc), giveBack, forNode } }
  }

  /**
   * Applies the holders' answers: what a holder no longer holds it served,
   * what a dead holder held never reached a trainer (so it may be loaded
   * again), and a returned file answers the open that asked. Returns that
   * file, or undefined: then the open asks again at once, in the same
   * turn (nothing else may decide for the VC in between), as a retry with
   * `holdersConfirmed`, and this time may end the VC's epoch.
   */
  finishReclaim (plan: ReclaimPlan, reports: readonly ReclaimReport[]): FileId | undefined {
    const { slots, counters } = this.parts
    const { vc } = plan
    slots.setLoading(vc, false)
    let returned: FileId | undefined
    for (const report of reports) {
      // A file the holder gave back to an earlier reclaim, still on the ledger as held there in the batch it came in:
      // that answer never arrived (its connection broke), so the file went nowhere and may be loaded again.
      if (report.dead !== true) for (const givenBack of report.givenBackBefore ?? []) this.loseIfGivenBackLost(vc, report.node, givenBack)
      // A returned file is in hand, whatever the ledger says meanwhile (the
      // holder's own request may have reconciled its entry away).
      if (report.dead !== true && report.returned !== undefined) {
        this.ledger.remove(vc, report.returned)
        returned = report.returned
      }
      for (const [file, holding] of this.ledger.heldBy(vc, report.node)) {
        if (report.dead === true) {
          this.lose(vc, file)
        } else if (holding.batch <= report.lastBatch && !report.held.includes(file)) {
          this.ledger.remove(vc, file)
        }
        // Otherwise still held, or in transit to it: it stays on the ledger.
      }
    }
    if (returned !== undefined) {
      // Being served, so consumed, even if its holder was declared dead meanwhile (which made it loadable).
      slots.consume(returned)
      counters.reclaimedFiles++
      this.noteServed(returned, plan.forNode)
      this.parts.noteMemory()
    }
    return returned
  }

  /**
   * A requester's report on its mirror of `vc` (it has no other request for
   * `vc` out): entries at offsets it shows empty were served there, and
   * entries of batches it never received were lost on the way.
   */
  reconcile (vc: VcId, requester: MirrorReport): void {
    // First, as in finishReclaim: a file it gave back whose answer never came is not served there, though its slot is empty.
    for (const givenBack of requester.givenBackBefore ?? []) this.loseIfGivenBackLost(vc, requester.node, givenBack)
    for (const [file, holding] of this.ledger.heldBy(vc, requester.node)) {
      if (holding.batch > requester.lastBatch) this.lose(vc, file)
      else if (requester.emptyOffsets.has(this.parts.layout.fileOffset[file])) this.ledger.remove(vc, file)
    }
    const sent = this.sentAnswers.get(vc)
    const answer = sent?.get(requester.node)
    if (answer === undefined) return
    sent!.delete(requester.node)
    if (answer.batch > requester.lastBatch && answer.epoch === this.vcEpochs[vc]) this.unserveLost(vc, answer.file)
  }

  /**
   * The answer to `node`'s open of `vc` went out with batch number `batch`
   * (see `sentAnswers`); an answer not sent after all (taken back by the
   * caller) must not be noted.
   */
  noteAnswerSent (vc: VcId, node: NodeId, file: FileId, batch: number): void {
    if (batch === 0) return
    let sent = this.sentAnswers.get(vc)
    if (sent === undefined) this.sentAnswers.set(vc, sent = new Map())
    sent.set(node, { file, batch, epoch: this.vcEpochs[vc] })
  }

  /** A batch for `node` that was never sent after all: its files never reached it, and may be loaded again. */
  takeBack (vc: VcId, node: NodeId, files: readonly FileId[]): void {
    for (const file of files) if (this.ledger.get(vc, file)?.node === node) this.lose(vc, file)
  }

  /** An answer lost on its way: its file reached no trainer, and may be loaded and served again this epoch. */
  private unserveLost (vc: VcId, file: FileId): void {
    this.parts.reopen(file)
    this.servedTo[file] = 0
    this.standbyDirty.add(vc)
    this.parts.counters.lostAnswers++
  }

  /**
   * A file `holder` gave back to an earlier reclaim, still on the ledger as
   * held there from the batch it came in: that answer never arrived (its
   * connection broke), so the file went nowhere, and may be loaded again.
   */
  private loseIfGivenBackLost (vc: VcId, holder: NodeId, givenBack: GivenBack): void {
    const holding = this.ledger.get(vc, givenBack.file)
    if (holding?.node === holder && holding.batch === givenBack.batch) this.lose(vc, givenBack.file)
  }

  /** A holder's notice: it served these files from its mirror. */
  noteServedElsewhere (node: NodeId, served: readonly ServedNotice[]): void {
    for (const { vc, file, batch } of served) {
      const holding = this.ledger.get(vc, file)
      if (holding !== undefined && holding.node === node && holding.batch === batch) this.ledger.remove(vc, file)
    }
  }

  /** A shipped file that never reached a trainer: it may be loaded again. */
  private lose (vc: VcId, file: FileId): void {
    this.ledger.remove(vc, file)
    this.parts.reopen(file)
    this.servedTo[file] = 0
    this.standbyDirty.add(vc)
    this.parts.counters.lostHeldFiles++
  }

  // ---------------------------------------------------------------- batches

  /**
   * The opportunistic batch for a requester just answered: valid slots of
   * `vc` that land on empty slots of its mirror, within the bytes it can
   * take. Only what is already in memory goes; the files leave this node's
   * slots, stay consumed, and are recorded as held by the requester.
   */
  shipBatch (vc: VcId, requester: MirrorReport): { files: FileId[], batch: number } {
    const { layout, slots, random, counters } = this.parts
    // Numbered even when empty: the answer it goes with is acknowledged by its number (`sentAnswers`).
    if (!this.parts.shipsBatches) return { files: [], batch: ++this.lastBatch }
    const offsets = random.shuffle(slots.validOffsets(vc).filter(offset => requester.emptyOffsets.has(offset)))
    const files: FileId[] = []
    let bytes = 0
    const batch = ++this.lastBatch
    for (const offset of offsets) {
      const size = layout.files[slots.fileAt(vc, offset)!].size
      if (bytes + size > requester.freeBytes) continue
      bytes += size
      const file = slots.take(vc, offset)
      this.ledger.add(vc, file, { node: requester.node, batch })
      this.noteServed(file, requester.node, batch)
      files.push(file)
    }
    counters.prefetchShipped += files.length
    if (files.length > 0) this.parts.noteMemory()
    return { files, batch }
  }

  // ---------------------------------------------------------------- nodes that die and come back

  /**
   * A node is gone: files it held in its mirror never reached a trainer,
   * so they become loadable again. Returns the VCs affected.
   */
  forgetNode (node: NodeId): VcId[] {
    // Its last answers count as served, as they did while it lived: it can say nothing more of them.
    for (const sent of this.sentAnswers.values()) sent.delete(node)
    const vcs = this.ledger.vcsHeldBy(node)
    for (const vc of vcs) {
      for (const [file] of this.ledger.heldBy(vc, node)) this.lose(vc, file)
    }
    return vcs
  }

  /**
   * Which VCs this node answers for, from now on: at a new generation (each
   * VC's first live node, its state fresh after a reset) and on a node
   * mounted again after it died (none of its own until then).
   */
  setOwnership (owns: (vc: VcId) => boolean): void {
    for (const vc of allVcs(this.parts.layout)) {
      this.owned[vc] = owns(vc) ? 1 : 0
      if (this.owned[vc] === 1) this.standbyDirty.add(vc)
    }
  }

  /**
   * Takes over a VC whose home died (shared storage): from now on this node
   * answers for it, in the epoch and with the consumed files, holdings and
   * own trainer's files the adoption gives (see takeover.ts). `heldHere`
   * were in this node's own mirror of it: they move into the VC's slots.
   */
  adopt (vc: VcId, adoption: Adoption, heldHere: readonly FileId[]): void {
    const { layout, slots, counters } = this.parts
    this.owned[vc] = 1
    this.vcEpochs[vc] = adoption.epoch
    for (const file of adoption.consumed) slots.consume(file)
    for (const { file, node, batch } of adoption.standbyKept) this.noteServed(file, node, batch)
    // What this node's trainer got from the VC before it owned it: its standby copy must say so.
    for (const file of adoption.servedHere) this.noteServed(file, undefined)
    for (const { file, node, batch } of adoption.heldElsewhere) {
      slots.consume(file)
      this.ledger.add(vc, file, { node, batch })
      this.noteServed(file, node, batch)
    }
    // Our own batches must number after every batch the survivors received of the VC, whether or not they still hold
    // one: `reconcile` takes an answer numbered at or below a requester's last batch for one that arrived.
    this.lastBatch = Math.max(this.lastBatch, adoption.lastBatch)
    for (const file of heldHere) {
      slots.consume(file)
      slots.place(vc, layout.fileOffset[file], file)
    }
    this.standbyDirty.add(vc)
    counters.takeovers++
    this.parts.noteMemory()
  }

  // ---------------------------------------------------------------- the standby copy

  /**
   * The standby copy a home keeps at the next node in each VC's owner order:
   * for the owned VCs that changed since the last call, the epoch and every
   * file this node sent out in it (answers and batches, and files carried
   * into it in mirrors), with the node and the batch.
   * If this node dies, those opens' nodes that are dead too can report
   * nothing; the standby copy speaks for them (see takeover.ts).
   */
  takeStandbyUpdates (): StandbyUpdate[] {
    const { layout } = this.parts
    const changed = [...this.standbyDirty].filter(vc => this.owns(vc))
    this.standbyDirty.clear()
    return changed.map(vc => {
      const served: StandbyEntry[] = []
      for (const pc of layout.vcs[vc].pcs) {
        for (const file of layout.pcs[pc].files) if (this.servedTo[file] !== 0) served.push({ file, node: (this.servedTo[file] - 1) as NodeId, batch: this.shippedIn[file] })
      }
      return { vc, epoch: this.vcEpochs[vc], served }
    })
  }

  /** Marks `vc` for the next standby update (one that could not be delivered). */
  touch (vc: VcId): void { this.standbyDirty.add(vc) }

  /** VCs this node owns whose standby copy changed since the last `takeStandbyUpdates`. */
  get standbyPending (): number {
    let pending = 0
    for (const vc of this.standbyDirty) if (this.owns(vc)) pending++
    return pending
  }
}
