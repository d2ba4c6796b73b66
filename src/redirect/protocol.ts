/**
 * The redirection protocol for one node, as a pure state machine.
 *
 * An open of a sample file is answered by `open`, which either serves a
 * file that is already in memory, asks the caller to load a chunk, or asks
 * it to wait for the load already in flight for that VC (a VC never has two
 * loads at once). When a load ends, `finishLoad` fills the slots and hands
 * the open that asked for it its file directly, so no concurrent open can
 * take the slot that load was for. The caller owns all I/O, timing and
 * bytes; this module decides only which file ids go where.
 *
 * The modes (docs/design.md, "The protocol") differ only in how an open is
 * answered and what a load reads and places; they share slots, consumed
 * bits, rollover, readahead admission and counters, all of which live here.
 *
 * In a cluster this is the home side: the node answers opens of the VCs it
 * owns, for its own trainer and for other nodes' (`requester`), ships
 * opportunistic batches of valid slots into the requesters' mirrors and
 * records them in its ledger, and before it ends a VC's epoch while files
 * of that VC sit in mirrors it asks for a *reclaim* (see ledger.ts). A
 * reclaim, like a load, is carried out by the caller and keeps its VC busy.
 */
import { zeroCounters, type ProtocolCounters } from './counters'
import type { FileId, Layout, NodeId, PcId, VcId } from './layout'
import { ShippedLedger } from './ledger'
import type { ServedNotice } from './mirror'
import type { Adoption } from './takeover'
import { SeededRandom } from './random'
import { chooseRefill } from './refill'
import { chooseMixPieces, chooseNextEpochPieces, choosePoolPc, servedOutPcs, type LoadPiece } from './pieces'
import { SlotTable } from './slots'

export type RedirectMode = 'strict' | 'pool' | 'mix' | 'off'
export const REDIRECT_MODES: readonly RedirectMode[] = ['strict', 'pool', 'mix', 'off']
/** A VC still serving may read for its next epoch once this share of its PCs, and this many, are served out (see mayStageEarly). */
const EARLY_STAGE_SHARE = 0.5
const EARLY_STAGE_CHOICES = 3

export type { LoadPiece } from './pieces'

export interface LoadPlan {
  readonly id: number
  /** The requester asked for its own file (`OpenOptions.exact`): it is served that file, not placed. */
  readonly exact?: boolean
  readonly vc: VcId
  /** What to read: one whole PC, or in mix mode a block of each of several PCs. */
  readonly pieces: readonly LoadPiece[]
  /** The files the load must deliver, all pieces together (a whole-chunk reader may read more). */
  readonly files: readonly FileId[]
  readonly bytes: number
  /** The opened file whose open asked for this load; absent for readahead. */
  readonly requester?: FileId
  /** The node that open came from, when not this one. */
  readonly forNode?: NodeId
  /** Readahead of files already served this epoch, to be staged for the VC's next one. */
  readonly forNextEpoch?: boolean
}

/**
 * Ask the nodes that hold files of `vc` in their mirrors what they still
 * hold; `giveBack.node` is also asked to return one file at one of
 * `giveBack.offsets` (any offset when absent), for the open waiting on it.
 */
export interface ReclaimPlan {
  readonly vc: VcId
  readonly holders: readonly NodeId[]
  readonly giveBack?: { readonly node: NodeId, readonly offsets?: readonly number[] }
  /** The node the waiting open came from, when not this one. */
  readonly forNode?: NodeId
}

/**
 * What one holder answered to a reclaim: the files it holds now, the last
 * batch of the VC it received, and the file it gave back; `dead` when it
 * did not answer.
 */
export type ReclaimReport =
  | { readonly node: NodeId, readonly dead: true }
  | { readonly node: NodeId, readonly dead?: false, readonly held: readonly FileId[], readonly lastBatch: number, readonly returned?: FileId }

export type OpenDecision =
  | { readonly kind: 'serve', readonly file: FileId }
  | { readonly kind: 'load', readonly plan: LoadPlan }
  | { readonly kind: 'wait', readonly vc: VcId }
  | { readonly kind: 'reclaim', readonly plan: ReclaimPlan }

/** What a requester tells the home about its mirror of a VC, with each request. */
export interface MirrorReport {
  readonly node: NodeId
  /** Offsets of the requester's mirror of this VC that are empty. */
  readonly emptyOffsets: ReadonlySet<number>
  /** Bytes the requester can still take into its mirrors. */
  readonly freeBytes: number
  /** The last batch of this VC the requester received (0: none). */
  readonly lastBatch: number
}

export interface LoadOutcome {
  /** Files now in memory (the caller keeps their bytes). */
  readonly placed: readonly FileId[]
  /** For a demand load: the file its open is answered with, or undefined when that file could not be read. */
  readonly served?: FileId
}

export interface StandbyUpdate {
  readonly vc: VcId
  readonly epoch: number
  /** Files this home sent out in that epoch (answers and batches), and to which node. */
  readonly served: readonly { readonly file: FileId, readonly node: NodeId }[]
}

export interface OpenOptions {
  /** A second call for the same open, after a wait, a reclaim or a failed load (only the first call counts as an open). */
  readonly retry?: boolean
  /** Set when another node asks, with what it reports of its mirror. */
  readonly requester?: MirrorReport
  /**
   * Serve the opened file itself, as `off` does, in any mode: the opener
   * already saw that file's size (a loader that stats a path before opening
   * it and reads exactly that many bytes).
   */
  readonly exact?: boolean
  /**
   * A retry at once after a reclaim that got nothing back: every holder of
   * the VC has just said what it holds, so the VC's epoch may end now.
   */
  readonly holdersConfirmed?: boolean
}

/** Who a decision is for, and what its holders just confirmed: passed down, never kept. */
interface Asking {
  /** The node whose open is being decided (undefined: this node's trainer). */
  readonly forNode: NodeId | undefined
  readonly holdersConfirmed: boolean
}

/** What a load is for: the open that asked (if any) and whether it wants its own file. */
interface LoadFor {
  readonly requester?: FileId
  readonly exact?: boolean
  readonly forNode?: NodeId
  readonly forNextEpoch?: boolean
}

export interface ProtocolOptions {
  mode: RedirectMode
  /** Readahead is started only while resident plus in-flight bytes stay within this. */
  memoryBytes: number
  /** Seeds the runtime choices (refill ties, pool picks). */
  seed: number
  /** This node's id in a cluster (default 0); it owns the VCs it is home to. */
  node?: NodeId
  /** Ship opportunistic batches to requesters (default true). */
  prefetch?: boolean
  /**
   * mix: how many consecutive files of one PC a load takes together (one
   * read). 1 over a directory, whose loads read files one by one anyway;
   * larger over a pack, so that a load stays a few large reads. Default 1.
   */
  mixBlock?: number
}

export class Protocol {
  readonly counters: ProtocolCounters = zeroCounters()
  readonly slots: SlotTable
  private readonly random: SeededRandom
  private nextPlanId = 1
  /**
   * PCs whose last load lost files. Readahead skips them (retrying a broken
   * chunk ahead of need would only fail again, and keep the VC busy); a
   * demand load may still take one, which charges a lost file to its open.
   */
  private readonly failedPcs = new Set<PcId>()
  /** Files this node shipped into other nodes' mirrors. */
  readonly ledger = new ShippedLedger()
  /** VCs whose staged chunk was read for their next epoch: it waits for the rollover. */
  private readonly stagedForNextEpoch = new Set<VcId>()
  /** VCs this node answers for: its own, and any it took over from a dead home. */
  private readonly owned: Uint8Array
  /** Sequence number of the last batch shipped. */
  private lastBatch = 0
  readonly node: NodeId
  /** Per VC, how many times its epoch ended; requesters learn it with every answer. */
  private readonly vcEpochs: Uint32Array
  /**
   * Per file, the node this node sent it to in its VC's current epoch (an
   * answer to an open, or a batch), plus one (0: none; its own trainer is
   * this node). For the standby copy.
   */
  private readonly servedTo: Uint16Array
  /** Owned VCs whose standby copy (epoch, `servedTo`) changed since the last update. */
  private readonly standbyDirty = new Set<VcId>()

  constructor (readonly layout: Layout, readonly options: ProtocolOptions) {
    this.slots = new SlotTable(layout)
    this.random = new SeededRandom(options.seed ^ 0x5eed ^ ((options.node ?? 0) * 0x9e3779b1))
    this.node = options.node ?? 0
    this.owned = new Uint8Array(layout.vcs.length)
    this.vcEpochs = new Uint32Array(layout.vcs.length)
    this.servedTo = new Uint16Array(layout.files.length)
    layout.vcs.forEach((vc, v) => { if (vc.home === this.node) this.owned[v] = 1 })
  }

  vcOf (file: FileId): VcId { return this.layout.pcs[this.layout.filePc[file]].vc }
  offsetOf (file: FileId): number { return this.layout.fileOffset[file] }
  owns (vc: VcId): boolean { return this.owned[vc] === 1 }
  epochOf (vc: VcId): number { return this.vcEpochs[vc] }

  /** Answers an open of `file` (of a VC this node owns); see `OpenOptions`. */
  open (file: FileId, options: OpenOptions = {}): OpenDecision {
    const { retry = false, requester, exact = false, holdersConfirmed = false } = options
    if (!this.owns(this.vcOf(file))) throw new Error(`node ${this.node} does not own the VC of file ${file}`)
    if (!retry) {
      this.counters.opens++
      if (requester !== undefined) this.counters.remoteOpens++
      if (exact) this.counters.exactOpens++
    }
    if (requester !== undefined) this.reconcile(this.vcOf(file), requester)
    const asking: Asking = { forNode: requester?.node, holdersConfirmed }
    const decision = exact ? this.decideExact(file, asking) : this.decide(file, asking)
    if (decision.kind === 'serve') this.noteServed(decision.file, requester?.node)
    if (decision.kind === 'serve') {
      if (!retry) this.counters.memoryHits++
      if (decision.file !== file) this.counters.redirects++
      this.noteMemory()
    } else if (!retry) {
      this.counters.waitedOpens++
    }
    return decision
  }

  private decide (file: FileId, asking: Asking): OpenDecision {
    switch (this.options.mode) {
      case 'strict': return this.decideStrict(file, asking)
      case 'pool':
      case 'mix': return this.decidePool(file, asking)
      case 'off': return this.decideOff(file, asking)
    }
  }

  /**
   * strict: the slot answers whatever it holds; an empty slot needs the PC
   * that fills the most empty slots among those that can fill this one.
   */
  private decideStrict (file: FileId, asking: Asking): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (!this.slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    let pc = chooseRefill(this.layout, this.slots, this.random, vc, offset)
    if (pc === undefined) {
      const reclaim = this.planReclaim(vc, [offset], asking)
      if (reclaim !== undefined) return reclaim
      this.rollOver(vc)
      pc = chooseRefill(this.layout, this.slots, this.random, vc, offset)!
    }
    return { kind: 'load', plan: this.planLoad(vc, pc, { requester: file, forNode: asking.forNode }) }
  }

  /**
   * pool: the slot if valid, else any valid slot of the VC; only an empty
   * VC loads, and then a whole random unconsumed PC. mix answers the same
   * way; its loads take each block of slots from its own random PC.
   */
  private decidePool (file: FileId, asking: Asking): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    this.installStagedWhenEmpty(vc)
    if (!this.slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.validSlots(vc) > 0) return { kind: 'serve', file: this.takeRandom(vc) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    if (this.slots.allConsumed(vc)) {
      const reclaim = this.planReclaim(vc, undefined, asking)
      if (reclaim !== undefined) return reclaim
      this.rollOver(vc)
      // A chunk read ahead for this new epoch answers at once.
      this.installStagedWhenEmpty(vc)
      if (!this.slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: this.slots.take(vc, offset) }
      if (this.slots.validSlots(vc) > 0) return { kind: 'serve', file: this.takeRandom(vc) }
    }
    const plan = this.options.mode === 'mix'
      ? this.startLoad(vc, this.mixPieces(vc)!, { requester: file, forNode: asking.forNode })
      : this.planLoad(vc, choosePoolPc(this.layout, this.slots, this.random, vc)!, { requester: file, forNode: asking.forNode })
    return { kind: 'load', plan }
  }

  /** off: the file itself, from memory if its chunk brought it there, else by loading its chunk. */
  private decideOff (file: FileId, asking: Asking): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (this.slots.fileAt(vc, offset) === file) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    if (this.slots.allConsumed(vc)) this.rollOver(vc)
    return { kind: 'load', plan: this.planLoad(vc, this.layout.filePc[file], { requester: file, exact: true, forNode: asking.forNode }) }
  }

  /**
   * An exact open in strict or pool: the file itself, as off serves it,
   * from its slot or pool's staged chunk when it is there. A file that was
   * already served this epoch (to an open of another path) is served again
   * and counted: exactness of the bytes comes first for such a loader.
   */
  private decideExact (file: FileId, asking: Asking): OpenDecision {
    if (this.options.mode === 'off') return this.decideOff(file, asking)
    const vc = this.vcOf(file)
    // Only from a chunk staged for this epoch: one staged for the next waits for the rollover.
    const fromStaged = (): boolean => !this.stagedForNextEpoch.has(vc) && this.slots.takeStaged(vc, file)
    if (fromStaged()) return { kind: 'serve', file }
    if (this.slots.fileAt(vc, this.offsetOf(file)) !== file && !this.slots.isLoading(vc) && this.slots.isConsumed(file)) {
      if (this.slots.allConsumed(vc)) {
        this.rollOver(vc)
        if (fromStaged()) return { kind: 'serve', file }
      }
      if (this.slots.isConsumed(file)) this.counters.exactRepeats++
    }
    return this.decideOff(file, asking)
  }

  /**
   * A VC's epoch ends when an open needs a load and no file of PCS(v) is
   * left to load. Files that mirrors still hold (just confirmed by a
   * reclaim) stay consumed: they will be served in the epoch that starts.
   */
  private rollOver (vc: VcId): void {
    this.vcEpochs[vc]++
    // A chunk staged for this epoch holds files served in the one ending; they stay consumed below, now as this epoch's.
    this.stagedForNextEpoch.delete(vc)
    this.slots.clearConsumed(vc, this.ledger.files(vc))
    for (const pc of this.layout.vcs[vc].pcs) for (const file of this.layout.pcs[pc].files) this.servedTo[file] = 0
    this.standbyDirty.add(vc)
    for (const pc of this.layout.vcs[vc].pcs) this.failedPcs.delete(pc)
    this.counters.rollovers++
  }

  /** Moves the staged chunk into an empty VC, unless it waits for the VC's next epoch. */
  private installStagedWhenEmpty (vc: VcId): void {
    if (this.slots.validSlots(vc) === 0 && !this.stagedForNextEpoch.has(vc)) this.slots.installStaged(vc)
  }

  private takeRandom (vc: VcId): FileId {
    const offsets = this.slots.validOffsets(vc)
    return this.slots.take(vc, offsets[this.random.below(offsets.length)])
  }

  /**
   * Whether a file of a VC with nothing left to read can be read now for its
   * next epoch: served in this one already (consumed, not in a slot waiting
   * to be served, not in a mirror), so nothing can serve it again before the
   * rollover, which keeps it consumed as the new epoch's
   * (slots.clearConsumed keeps staged files). A file still in a slot would
   * need a second copy of its bytes: the engine holds one per file.
   */
  private servedThisEpoch (vc: VcId): (file: FileId) => boolean {
    const inMirrors = new Set(this.ledger.files(vc))
    return file => this.slots.isConsumed(file) && this.slots.fileAt(vc, this.offsetOf(file)) !== file && !inMirrors.has(file)
  }

  /**
   * Whether a VC still serving its last files may read for its next epoch
   * already: only once most of its PCs are served out (EARLY_STAGE_SHARE,
   * and at least EARLY_STAGE_CHOICES of them), so the next epoch's first
   * load still has many PCs to be drawn from. With fewer, every epoch would
   * start with the PCs served earliest in the one before.
   */
  private mayStageEarly (vc: VcId, served: (file: FileId) => boolean): boolean {
    const servedOut = servedOutPcs(this.layout, vc, this.failedPcs, served).length
    return servedOut >= EARLY_STAGE_CHOICES && servedOut >= this.layout.vcs[vc].pcs.length * EARLY_STAGE_SHARE
  }

  /**
   * The files a load must deliver: those of the PC that can be placed
   * (unconsumed, and for slot modes landing on an empty slot), plus the
   * requested file itself in off mode.
   */
  private planLoad (vc: VcId, pc: PcId, load: LoadFor = {}): LoadPlan {
    const files = this.layout.pcs[pc].files.filter((file, offset) =>
      file === load.requester && load.exact === true
        ? true
        : !this.slots.isConsumed(file) && (this.stagesWhole() || this.slots.isSlotEmpty(vc, offset)))
    return this.startLoad(vc, [{ pc, files }], load)
  }

  private startLoad (vc: VcId, pieces: readonly LoadPiece[], { requester, exact = false, forNode, forNextEpoch = false }: LoadFor = {}): LoadPlan {
    const files = pieces.flatMap(piece => piece.files)
    let bytes = 0
    for (const file of files) bytes += this.layout.files[file].size
    this.slots.setLoading(vc, true)
    this.counters.inflightBytes += bytes
    return { id: this.nextPlanId++, vc, pieces, files, bytes, requester, exact, forNode, forNextEpoch }
  }

  /** pool and mix keep a chunk that arrives while the VC still serves staged, whole. */
  private stagesWhole (): boolean { return this.options.mode === 'pool' || this.options.mode === 'mix' }

  /** mix: blocks of this epoch's unconsumed files, each from a PC outside `exclude` (pieces.ts). */
  private mixPieces (vc: VcId, exclude?: ReadonlySet<PcId>): LoadPiece[] | undefined {
    return chooseMixPieces(this.layout, this.slots, this.random, vc, this.mixBlock(), exclude)
  }

  private mixBlock (): number { return Math.max(1, this.options.mixBlock ?? 1) }

  /**
   * pool and mix: what to read for the VC's next epoch once it has served
   * this one's files (its slots are empty): a whole PC (pool) or whole blocks (mix) every file of
   * which was served this epoch (none still in a mirror), so that the next
   * epoch still reads each of them once, in one piece.
   */
  private nextEpochPieces (vc: VcId, served: (file: FileId) => boolean): LoadPiece[] | undefined {
    const mixBlock = this.options.mode === 'mix' ? this.mixBlock() : undefined
    return chooseNextEpochPieces(this.layout, this.slots, this.random, vc, mixBlock, this.failedPcs, served)
  }

  /**
   * Places a finished load. `delivered` holds the plan's files the source
   * could read; the others stay unconsumed (a later load retries them)
   * unless the open that asked for this load would have been given one of
   * them: that open is answered with an error and the file counts as
   * consumed, so every readable file is still served exactly once.
   */
  finishLoad (plan: LoadPlan, delivered: ReadonlySet<FileId>): LoadOutcome {
    const { vc } = plan
    this.slots.setLoading(vc, false)
    this.counters.inflightBytes -= plan.bytes
    this.counters.chunkLoads++
    if (plan.requester === undefined) this.counters.readaheadLoads++
    const lost = plan.files.filter(file => !delivered.has(file)).length
    this.counters.failedFiles += lost
    for (const piece of plan.pieces) {
      if (piece.files.some(file => !delivered.has(file))) this.failedPcs.add(piece.pc)
      else this.failedPcs.delete(piece.pc)
    }

    const placed: FileId[] = []
    let served: FileId | undefined
    const arrived = plan.files.filter(file => delivered.has(file))

    if (plan.forNextEpoch === true) {
      // Staged even into an empty VC: these files were served this epoch, so they wait for the rollover. A file
      // a reset made unconsumed meanwhile is this epoch's again and is left for a load of this epoch.
      const served = arrived.filter(file => this.slots.isConsumed(file))
      if (served.length > 0) {
        this.slots.stage(vc, served)
        this.stagedForNextEpoch.add(vc)
        placed.push(...served)
      }
    } else if (this.stagesWhole() && (plan.requester === undefined && this.slots.validSlots(vc) > 0)) {
      // Readahead while the VC still serves: keep the chunk staged.
      for (const file of arrived) this.slots.consume(file)
      this.slots.stage(vc, arrived)
      placed.push(...arrived)
    } else {
      for (const file of arrived) {
        if (plan.exact === true && file === plan.requester) continue
        const offset = this.offsetOf(file)
        if (!this.slots.isSlotEmpty(vc, offset)) continue
        this.slots.place(vc, offset, file)
        this.slots.consume(file)
        placed.push(file)
      }
    }
    this.counters.filesLoaded += placed.length
    for (const file of this.filesRead(plan)) {
      if (!placed.includes(file) && file !== plan.requester) {
        this.counters.wastedFiles++
        this.counters.wastedBytes += this.layout.files[file].size
      }
    }

    if (plan.requester !== undefined) {
      served = this.answerRequester(plan, delivered)
      if (served === undefined) this.counters.failedOpens++
      else if (served !== plan.requester) this.counters.redirects++
      if (served !== undefined) this.noteServed(served, plan.forNode)
    }
    this.noteMemory()
    return { placed, served }
  }

  /**
   * The files a reader goes through for a plan: each piece is one read,
   * from its first file to its last (a pack's reader; a directory's reads
   * only the files asked for).
   */
  private filesRead (plan: LoadPlan): FileId[] {
    return plan.pieces.flatMap(piece => {
      const files = this.layout.pcs[piece.pc].files
      if (piece.files.length === 0) return []
      return files.slice(files.indexOf(piece.files[0]), files.indexOf(piece.files[piece.files.length - 1]) + 1)
    })
  }

  private answerRequester (plan: LoadPlan, delivered: ReadonlySet<FileId>): FileId | undefined {
    const requester = plan.requester!
    const { vc } = plan
    const offset = this.offsetOf(requester)
    if (plan.exact === true) {
      this.slots.consume(requester)
      return delivered.has(requester) ? requester : undefined
    }
    switch (this.options.mode) {
      case 'off':
        throw new Error('an off-mode load is always exact')
      case 'strict': {
        if (!this.slots.isSlotEmpty(vc, offset)) return this.slots.take(vc, offset)
        // The file this open would have been given is unreadable: charge it to this open.
        this.slots.consume(this.layout.pcs[plan.pieces[0].pc].files[offset])
        return undefined
      }
      case 'pool':
      case 'mix': {
        if (!this.slots.isSlotEmpty(vc, offset)) return this.slots.take(vc, offset)
        if (this.slots.validSlots(vc) > 0) return this.takeRandom(vc)
        const unreadable = plan.files.find(file => !delivered.has(file))
        if (unreadable !== undefined) this.slots.consume(unreadable)
        return undefined
      }
    }
  }

  /**
   * Called when an open finds nothing left to load for it. While a mirror
   * holds a file this open could be given (at `offsets`; any, when
   * undefined), that holder gives one back. Otherwise, before the VC's epoch
   * may end, every holder must have just said what it still holds
   * (`holdersConfirmed`), so that only files really still held are carried
   * into the next epoch. Undefined when the epoch may end now.
   */
  private planReclaim (vc: VcId, offsets: readonly number[] | undefined, { forNode, holdersConfirmed }: Asking): OpenDecision | undefined {
    const entries = this.ledger.entries(vc)
    const wanted = entries.filter(([file]) => offsets === undefined || offsets.includes(this.offsetOf(file)))
    if (wanted.length === 0 && (holdersConfirmed || entries.length === 0)) return undefined
    const giveBack = wanted.length === 0 ? undefined : { node: wanted[this.random.below(wanted.length)][1].node, offsets }
    this.slots.setLoading(vc, true)
    this.counters.reclaims++
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
    const { vc } = plan
    this.slots.setLoading(vc, false)
    let returned: FileId | undefined
    for (const report of reports) {
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
      this.slots.consume(returned)
      this.counters.reclaimedFiles++
      this.noteServed(returned, plan.forNode)
      this.noteMemory()
    }
    return returned
  }

  /**
   * A requester's report on its mirror of `vc` (it has no other request for
   * `vc` out): entries at offsets it shows empty were served there, and
   * entries of batches it never received were lost on the way.
   */
  private reconcile (vc: VcId, requester: MirrorReport): void {
    for (const [file, holding] of this.ledger.heldBy(vc, requester.node)) {
      if (holding.batch > requester.lastBatch) this.lose(vc, file)
      else if (requester.emptyOffsets.has(this.offsetOf(file))) this.ledger.remove(vc, file)
    }
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
    this.slots.unconsume(file)
    this.servedTo[file] = 0
    this.standbyDirty.add(vc)
    this.counters.lostHeldFiles++
  }

  /**
   * The opportunistic batch for a requester just answered: valid slots of
   * `vc` that land on empty slots of its mirror, within the bytes it can
   * take. Only what is already in memory goes; the files leave this node's
   * slots, stay consumed, and are recorded as held by the requester.
   */
  shipBatch (vc: VcId, requester: MirrorReport): { files: FileId[], batch: number } {
    if (this.options.mode === 'off' || this.options.prefetch === false) return { files: [], batch: 0 }
    const offsets = this.random.shuffle(this.slots.validOffsets(vc).filter(offset => requester.emptyOffsets.has(offset)))
    const files: FileId[] = []
    let bytes = 0
    const batch = ++this.lastBatch
    for (const offset of offsets) {
      const size = this.layout.files[this.slots.fileAt(vc, offset)!].size
      if (bytes + size > requester.freeBytes) continue
      bytes += size
      const file = this.slots.take(vc, offset)
      this.ledger.add(vc, file, { node: requester.node, batch })
      this.noteServed(file, requester.node)
      files.push(file)
    }
    this.counters.prefetchShipped += files.length
    if (files.length > 0) this.noteMemory()
    return { files, batch: files.length > 0 ? batch : 0 }
  }

  /**
   * A node is gone: files it held in its mirror never reached a trainer,
   * so they become loadable again. Returns the VCs affected.
   */
  forgetNode (node: NodeId): VcId[] {
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
    for (let vc = 0; vc < this.layout.vcs.length; vc++) {
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
    this.owned[vc] = 1
    this.vcEpochs[vc] = adoption.epoch
    for (const file of adoption.consumed) this.slots.consume(file)
    // What this node's trainer got from the VC before it owned it: its standby copy must say so.
    for (const file of adoption.servedHere) this.noteServed(file, undefined)
    for (const { file, node, batch } of adoption.heldElsewhere) {
      this.slots.consume(file)
      this.ledger.add(vc, file, { node, batch })
      // Our own batches must number after every batch the holders know of.
      this.lastBatch = Math.max(this.lastBatch, batch)
    }
    for (const file of heldHere) {
      this.slots.consume(file)
      this.slots.place(vc, this.offsetOf(file), file)
    }
    this.standbyDirty.add(vc)
    this.counters.takeovers++
    this.noteMemory()
  }

  /**
   * The standby copy a home keeps at the next node in each VC's owner order:
   * for the owned VCs that changed since the last call, the epoch and every
   * file this node sent out in it (answers and batches), with the node.
   * If this node dies, those opens' nodes that are dead too can report
   * nothing; the standby copy speaks for them (see takeover.ts).
   */
  takeStandbyUpdates (): StandbyUpdate[] {
    const changed = [...this.standbyDirty].filter(vc => this.owns(vc))
    this.standbyDirty.clear()
    return changed.map(vc => {
      const served: { file: FileId, node: NodeId }[] = []
      for (const pc of this.layout.vcs[vc].pcs) {
        for (const file of this.layout.pcs[pc].files) if (this.servedTo[file] !== 0) served.push({ file, node: this.servedTo[file] - 1 })
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

  private noteServed (file: FileId, node: NodeId | undefined): void {
    if (this.layout.nodes === 1) return // no standby copy without a cluster: keep the single-node open path as it was
    this.servedTo[file] = (node ?? this.node) + 1
    this.standbyDirty.add(this.vcOf(file))
  }

  /**
   * A load to start ahead of need for `vc`, if one is worth it and fits in
   * memory: strict refills a VC once three quarters of its slots are empty
   * (earlier refills land on more occupied slots and cost loads); pool stages
   * the next chunk once a quarter or less is left. Readahead never rolls an
   * epoch over (that would hand this epoch's opens next epoch's files).
   */
  readahead (vc: VcId): LoadPlan | undefined {
    if (this.slots.isLoading(vc)) return undefined
    const capacity = this.slots.capacity[vc]
    let pieces: LoadPiece[] | undefined
    if (this.options.mode === 'strict') {
      if (this.slots.emptySlots(vc) * 4 < capacity * 3) return undefined
      const pc = chooseRefill(this.layout, this.slots, this.random, vc, undefined, this.failedPcs)
      if (pc !== undefined) pieces = [{ pc, files: this.slots.unconsumedFilesOf(pc) }]
    } else if (this.stagesWhole()) {
      if (this.slots.staged(vc) !== undefined || this.slots.validSlots(vc) * 4 > capacity) return undefined
      if (this.slots.allConsumed(vc)) {
        // Nothing left to read this epoch: read for the next one while this one's last files are served, so
        // the next epoch's first opens find chunks in memory. While the VC still holds files to serve, only
        // once most of its PCs are served out (mayStageEarly); else once it has served its last file, with
        // every PC of PCS(v) to choose from, as at any epoch's first load.
        const served = this.servedThisEpoch(vc)
        if (this.slots.validSlots(vc) > 0 && !this.mayStageEarly(vc, served)) return undefined
        const next = this.nextEpochPieces(vc, served)
        if (next === undefined || !this.fitsInMemory(next)) return undefined
        return this.startLoad(vc, next, { forNextEpoch: true })
      }
      if (this.options.mode === 'mix') {
        pieces = this.mixPieces(vc, this.failedPcs)
      } else {
        const pc = choosePoolPc(this.layout, this.slots, this.random, vc, this.failedPcs)
        if (pc !== undefined) pieces = [{ pc, files: this.slots.unconsumedFilesOf(pc) }]
      }
    }
    if (pieces === undefined || !this.fitsInMemory(pieces)) return undefined
    return this.options.mode === 'mix' ? this.startLoad(vc, pieces) : this.planLoad(vc, pieces[0].pc)
  }

  private fitsInMemory (pieces: readonly LoadPiece[]): boolean {
    let bytes = 0
    for (const piece of pieces) for (const file of piece.files) bytes += this.layout.files[file].size
    return this.slots.residentBytes + this.counters.inflightBytes + bytes <= this.options.memoryBytes
  }

  /**
   * A new training run begins (src/runs): every VC starts a fresh epoch. A
   * VC whose epoch is over (every file served, none waiting in memory or in
   * a mirror, no load out) just rolls over, as its next open would have
   * made it, keeping what it read ahead for its next epoch: a run that
   * ended cleanly costs the next one nothing. Any other VC was left
   * mid-epoch by the run that ended, and is reset. Returns the files
   * dropped from memory (the caller frees their bytes).
   */
  startNewRun (): FileId[] {
    const dropped: FileId[] = []
    for (let vc = 0; vc < this.layout.vcs.length; vc++) {
      if (!this.owns(vc)) continue
      if (this.epochIsOver(vc)) this.rollOver(vc)
      else dropped.push(...this.resetVc(vc))
    }
    this.counters.newRuns++
    this.noteMemory()
    return dropped
  }

  /** Every file of the VC's epoch was served, and nothing of it waits anywhere. */
  private epochIsOver (vc: VcId): boolean {
    const staged = this.slots.staged(vc)
    return this.slots.allConsumed(vc) && this.slots.validSlots(vc) === 0 && !this.slots.isLoading(vc) &&
      this.ledger.files(vc).length === 0 && (staged === undefined || this.stagedForNextEpoch.has(vc))
  }

  /** One VC starts afresh: nothing in memory, every file loadable. Returns the files dropped. */
  private resetVc (vc: VcId): FileId[] {
    const dropped = this.slots.resetVc(vc)
    this.vcEpochs[vc]++
    this.stagedForNextEpoch.delete(vc)
    for (const file of this.ledger.files(vc)) this.ledger.remove(vc, file)
    for (const pc of this.layout.vcs[vc].pcs) {
      this.failedPcs.delete(pc)
      for (const file of this.layout.pcs[pc].files) this.servedTo[file] = 0
    }
    this.standbyDirty.add(vc)
    return dropped
  }

  /**
   * An open was answered with `file`, but its opener went away before the
   * answer reached it (a trainer killed in the middle of an open): the file
   * goes back to wait in its slot, so the epoch still serves it once.
   * 'placed': the caller keeps its bytes in memory again; 'dropped': it is
   * loadable again (its slot was taken meanwhile, or a new run began).
   */
  returnUnserved (file: FileId): 'placed' | 'dropped' {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (!this.owns(vc) || !this.slots.isConsumed(file)) return 'dropped'
    this.counters.returnedFiles++
    this.servedTo[file] = 0
    if (this.slots.isSlotEmpty(vc, offset)) {
      this.slots.place(vc, offset, file)
      this.noteMemory()
      return 'placed'
    }
    this.slots.unconsume(file)
    return 'dropped'
  }

  /**
   * Starts a fresh epoch everywhere, for when the trainer's epochs no longer
   * line up with the VCs' (a run stopped mid-epoch). Files in memory are
   * dropped (the caller frees their bytes); loads in flight complete into
   * the new epoch.
   */
  reset (): FileId[] {
    const dropped = this.slots.reset()
    this.stagedForNextEpoch.clear()
    this.failedPcs.clear()
    this.ledger.clear()
    this.servedTo.fill(0)
    for (let vc = 0; vc < this.layout.vcs.length; vc++) this.standbyDirty.add(vc)
    this.counters.resets++
    this.noteMemory()
    return dropped
  }

  private noteMemory (): void {
    this.counters.residentBytes = this.slots.residentBytes
    const inMemory = this.slots.residentBytes + this.counters.inflightBytes
    if (inMemory > this.counters.peakResidentBytes) this.counters.peakResidentBytes = inMemory
  }
}
