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
 * answered and what a load reads and places: each is a policy (modes.ts)
 * over this core, which keeps the slots, consumed bits, rollover,
 * readahead admission and counters they share.
 *
 * In a cluster the node answers opens of the VCs it owns, for its own
 * trainer and for other nodes' (`requester`); what that takes beyond the
 * slots (the ledger of batches shipped into mirrors, reclaims, epochs,
 * ownership, the standby copy) is the home side (home.ts, `home`).
 */
import { countAnswer, noteMemory, zeroCounters, type ProtocolCounters } from './counters'
import { allVcs, pcOfFile, vcOfFile, type FileId, type Layout, type NodeId, type PcId, type VcId } from './layout'
import { HomeSide } from './home'
import { policyFor, type ModePolicy, type ProtocolCore } from './modes'
import type { LoadPiece } from './pieces'
import { SeededRandom } from './random'
import { SlotTable } from './slots'
import type { StandbyEntry } from './takeover'

export type RedirectMode = 'strict' | 'pool' | 'mix' | 'off'
export const REDIRECT_MODES: readonly RedirectMode[] = ['strict', 'pool', 'mix', 'off']

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
  /** Bytes the load brings into the budget: every file but an exact load's own (that one goes to its opener). */
  readonly bytes: number
  /** An exact load's own file: bound for its opener's handle, and held as an open file's bytes are while it is read. */
  readonly openerBytes: number
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

/** A file a holder gave back to a reclaim, and the batch it had come in. */
export interface GivenBack { readonly file: FileId, readonly batch: number }

/**
 * What one holder answered to a reclaim: the files it holds now, the last
 * batch of the VC it received, and the file it gave back; `dead` when it
 * did not answer.
 */
export type ReclaimReport =
  | { readonly node: NodeId, readonly dead: true }
  | { readonly node: NodeId, readonly dead?: false, readonly held: readonly FileId[], readonly lastBatch: number, readonly returned?: FileId, readonly givenBackBefore?: readonly GivenBack[] }

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
  /** Files the requester gave back to reclaims of this VC, not yet known to have arrived (mirror.ts, `givenBack`). */
  readonly givenBackBefore?: readonly GivenBack[]
}

export interface LoadOutcome {
  /** Files now in memory (the caller keeps their bytes). */
  readonly placed: readonly FileId[]
  /** For a demand load: the file its open is answered with, or undefined when that file could not be read. */
  readonly served?: FileId
  /** When it could not be read: the unreadable file its open was charged with (consumed for it), if one was. */
  readonly charged?: FileId
}

export interface StandbyUpdate {
  readonly vc: VcId
  readonly epoch: number
  /** Files this home sent out in that epoch (answers and batches, and files carried into it in mirrors). */
  readonly served: readonly StandbyEntry[]
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
export interface Asking {
  /** The node whose open is being decided (undefined: this node's trainer). */
  readonly forNode: NodeId | undefined
  readonly holdersConfirmed: boolean
}

/** What a load is for: the open that asked (if any) and whether it wants its own file. */
export interface LoadFor {
  readonly requester?: FileId
  readonly exact?: boolean
  readonly forNode?: NodeId
  readonly forNextEpoch?: boolean
}

export interface ProtocolOptions {
  mode: RedirectMode
  /** Readahead is started only while resident plus in-flight bytes, and those held by opens, stay within this. */
  memoryBytes: number
  /**
   * Bytes of samples served and still held by open files (the FUSE layer's
   * handles): out of the slots, yet in memory until released. Readahead
   * leaves room for them. None when absent.
   */
  heldByOpens?: () => number
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

/**
 * An open of a file whose VC this node stopped answering for while the
 * open waited (a fence dropped its VCs, a new generation gave the VC to
 * another node): not an error of the file, the open is decided again
 * where the VC is now (a remote read, or told to ask again). Not an
 * FsError on purpose: the engine's `serveRequest` answers an FsError as
 * an unreadable file, which this is not.
 */
export class NotOwnedHere extends Error {
  constructor (readonly vc: VcId) { super(`this node no longer answers for virtual chunk ${vc}`) }
}

export class Protocol {
  readonly counters: ProtocolCounters = zeroCounters()
  readonly slots: SlotTable
  private readonly random: SeededRandom
  private readonly policy: ModePolicy
  private nextPlanId = 1
  /** Bytes of exact loads' own files being read: bound for their openers, so readahead leaves room for them. */
  private openerBytesInFlight = 0
  /**
   * PCs whose last load lost files. Readahead skips them (retrying a broken
   * chunk ahead of need would only fail again, and keep the VC busy); a
   * demand load may still take one, which charges a lost file to its open.
   */
  private readonly failedPcs = new Set<PcId>()
  /** VCs whose staged chunk was read for their next epoch: it waits for the rollover. */
  private readonly stagedForNextEpoch = new Set<VcId>()
  /** VCs whose load in flight reads for their next epoch, and those of them whose chunk is no longer wanted (`giveUpNextEpoch`). */
  private readonly loadingForNextEpoch = new Set<VcId>()
  private readonly nextEpochGivenUp = new Set<VcId>()
  /** Files let go out of memory outside a load, reset or new run: the caller frees their bytes (`takeDropped`). */
  private dropped: FileId[] = []
  /** Per VC, exact repeats this epoch that no file could sit out for (`sitOut`, `exactMayEndEpoch`). */
  private readonly unmatchedRepeats: Uint32Array
  /** Files that sit their VC's epoch out, one for each exact repeat (`sitOut`): consumed, never served. */
  private readonly satOut = new Set<FileId>()
  readonly node: NodeId
  /** What this node keeps as the home of the VCs it answers for: ledger, reclaims, batches, epochs, ownership, standby copy. */
  readonly home: HomeSide

  constructor (readonly layout: Layout, readonly options: ProtocolOptions) {
    this.slots = new SlotTable(layout)
    this.unmatchedRepeats = new Uint32Array(layout.vcs.length)
    this.random = new SeededRandom(options.seed ^ 0x5eed ^ ((options.node ?? 0) * 0x9e3779b1))
    this.node = options.node ?? 0 as NodeId
    this.policy = policyFor(options.mode, this.core(), Math.max(1, options.mixBlock ?? 1))
    this.home = new HomeSide({
      layout,
      slots: this.slots,
      random: this.random,
      counters: this.counters,
      node: this.node,
      shipsBatches: this.policy.shipsBatches && options.prefetch !== false,
      noteMemory: () => this.noteMemory(),
      reopen: file => this.reopen(file)
    })
  }

  /** What the mode's policy may use: this protocol's state and steps, the steps kept private to everyone else. */
  private core (): ProtocolCore {
    return {
      layout: this.layout,
      slots: this.slots,
      random: this.random,
      failedPcs: this.failedPcs,
      offsetOf: file => this.offsetOf(file),
      vcOf: file => this.vcOf(file),
      rollOver: vc => this.rollOver(vc),
      installStagedWhenEmpty: vc => this.installStagedWhenEmpty(vc),
      takeRandom: vc => this.takeRandom(vc),
      planReclaim: (vc, offsets, asking) => this.home.planReclaim(vc, offsets, asking),
      planLoad: (vc, pc, load) => this.planLoad(vc, pc, load),
      startLoad: (vc, pieces, load) => this.startLoad(vc, pieces, load),
      decideExact: (file, asking) => this.decideExact(file, asking),
      loadOwnFile: (file, asking) => this.loadOwnFile(file, asking),
      readaheadFits: pieces => this.fitsInMemory(pieces, { readahead: true }),
      servedThisEpoch: vc => this.servedThisEpoch(vc)
    }
  }

  vcOf (file: FileId): VcId { return vcOfFile(this.layout, file) }
  offsetOf (file: FileId): number { return this.layout.fileOffset[file] }
  owns (vc: VcId): boolean { return this.home.owns(vc) }
  epochOf (vc: VcId): number { return this.home.epochOf(vc) }

  /** Answers an open of `file` (of a VC this node owns); see `OpenOptions`. */
  open (file: FileId, options: OpenOptions = {}): OpenDecision {
    const { retry = false, requester, exact = false, holdersConfirmed = false } = options
    if (!this.owns(this.vcOf(file))) throw new NotOwnedHere(this.vcOf(file))
    if (!retry) {
      this.counters.opens++
      if (requester !== undefined) this.counters.remoteOpens++
      if (exact) this.counters.exactOpens++
    }
    if (requester !== undefined) this.home.reconcile(this.vcOf(file), requester)
    const asking: Asking = { forNode: requester?.node, holdersConfirmed }
    const decision = exact ? this.policy.decideExact(file, asking) : this.policy.decide(file, asking)
    if (decision.kind === 'serve') {
      this.home.noteServed(decision.file, requester?.node)
      this.noteMemory()
    }
    countAnswer(this.counters, file, decision.kind === 'serve' ? decision.file : undefined, retry)
    return decision
  }

  /**
   * The file itself, from memory if its chunk brought it there, else by
   * loading its chunk (off, and any exact open). Off ends the VC's epoch
   * when nothing of it is left to load; an exact open has decided that
   * already (`decideExact`).
   */
  private loadOwnFile (file: FileId, asking: Asking, endsEpoch = (vc: VcId): boolean => this.slots.allConsumed(vc)): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (this.slots.fileAt(vc, offset) === file) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    if (endsEpoch(vc)) this.rollOver(vc)
    return { kind: 'load', plan: this.planLoad(vc, pcOfFile(this.layout, file), { requester: file, exact: true, forNode: asking.forNode }) }
  }

  /**
   * An exact open in strict, pool or mix: the file itself, as off serves
   * it, from its slot or a staged chunk when it is there. A file that was
   * already served this epoch (to an open of another path) is served again
   * and counted: exactness of the bytes comes first for such a loader. It
   * stands in for a file the epoch has left (`sitOut`).
   */
  private decideExact (file: FileId, asking: Asking): OpenDecision {
    const vc = this.vcOf(file)
    // Only from a chunk staged for this epoch: one staged for the next waits for the rollover.
    const fromStaged = (): boolean => !this.stagedForNextEpoch.has(vc) && this.slots.takeStaged(vc, file)
    if (fromStaged()) return { kind: 'serve', file }
    if (this.slots.fileAt(vc, this.offsetOf(file)) !== file && !this.slots.isLoading(vc) && this.slots.isConsumed(file)) {
      if (this.exactMayEndEpoch(vc)) {
        this.rollOver(vc)
        if (fromStaged()) return { kind: 'serve', file }
      }
      // A file that sat out was never served: not a repeat, but another file sits out in its place.
      const satOut = this.satOut.delete(file)
      if (!satOut && this.slots.isConsumed(file)) this.counters.exactRepeats++
      if ((satOut || this.slots.isConsumed(file)) && !this.sitOut(vc, this.offsetOf(file))) this.unmatchedRepeats[vc]++
    }
    return this.loadOwnFile(file, asking, () => false)
  }

  /**
   * An exact repeat is one of the trainer's opens of this VC's files this
   * pass, so one file the epoch has left sits it out: the VC's epoch then
   * ends with the trainer's pass, not a file after it. Left to serve, that
   * file would open the next pass, every later pass would begin with the
   * one before's last file, and none would be exact again. The pass that
   * repeated a file misses one, as a failed open does. A file at the
   * repeat's own offset if there is one (strict answers an offset's opens
   * with that offset's files, so each offset keeps in step), preferably
   * one not read yet (no read is wasted), else one waiting in memory (its
   * bytes go); a file held in another node's mirror cannot be withdrawn.
   * Whether one did.
   */
  private sitOut (vc: VcId, offset: number): boolean {
    for (const at of [offset, undefined]) {
      const here = (file: FileId): boolean => at === undefined || this.offsetOf(file) === at
      const unread = this.layout.vcs[vc].pcs.flatMap(pc => this.slots.unconsumedFilesOf(pc)).filter(here)
      const waiting = this.slots.validOffsets(vc).filter(o => at === undefined || o === at)
      const staged = (this.stagedForNextEpoch.has(vc) ? [] : this.slots.staged(vc) ?? []).filter(here)
      let file: FileId
      if (unread.length > 0) {
        file = unread[this.random.below(unread.length)]
        this.slots.consume(file)
      } else if (waiting.length > 0) {
        file = this.slots.take(vc, waiting[this.random.below(waiting.length)])
        this.dropped.push(file)
      } else if (staged.length > 0) {
        file = staged[this.random.below(staged.length)]
        this.slots.takeStaged(vc, file)
        this.dropped.push(file)
      } else {
        continue
      }
      this.satOut.add(file)
      // Served as far as the standby copy goes: a node that takes the VC over must not serve it this epoch either.
      this.home.noteServed(file, undefined)
      return true
    }
    return false
  }

  /** Forgets which of the VC's files sat this epoch out: they are the next epoch's to serve. */
  private forgetSatOut (vc: VcId): void {
    for (const file of this.satOut) if (this.vcOf(file) === vc) this.satOut.delete(file)
  }

  /**
   * Whether an exact open that needs a load may end the VC's epoch: nothing
   * of it is left to load, and nothing it loaded waits to be served (in a
   * slot, a chunk staged for this epoch, a mirror). Ended while files
   * wait, the epoch would lose them and the next serve them as its own:
   * the exact open is a repeat within this epoch (a trainer mixing exact
   * and other opens), and a file waiting sits out for it. A trainer that
   * never opens some files (a subset, drop_last) leaves them waiting for
   * good; each of its repeats lets one go, until none waits. Files in
   * other nodes' mirrors cannot sit out: once this epoch's repeats that
   * found none outnumber them, the epoch ends anyway, carrying them into
   * the next, or each later exact open would read its file alone.
   */
  private exactMayEndEpoch (vc: VcId): boolean {
    if (!this.slots.allConsumed(vc)) return false
    const staged = this.stagedForNextEpoch.has(vc) ? 0 : this.slots.staged(vc)?.length ?? 0
    const waiting = this.slots.validSlots(vc) + staged + this.home.filesHeld(vc).length
    return this.unmatchedRepeats[vc] >= waiting
  }

  /**
   * A VC's epoch ends when an open needs a load and no file of PCS(v) is
   * left to load. Files that mirrors still hold (confirmed by a reclaim,
   * unless exact opens end the epoch) stay consumed: they will be served
   * in the epoch that starts, from those mirrors.
   */
  private rollOver (vc: VcId): void {
    this.unmatchedRepeats[vc] = 0
    this.forgetSatOut(vc)
    this.home.endEpoch(vc)
    // A chunk staged for this epoch holds files served in the one ending; they stay consumed below, now as this epoch's.
    this.stagedForNextEpoch.delete(vc)
    this.slots.clearConsumed(vc, this.home.filesHeld(vc))
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
    const inMirrors = new Set(this.home.filesHeld(vc))
    return file => this.slots.isConsumed(file) && this.slots.fileAt(vc, this.offsetOf(file)) !== file && !inMirrors.has(file)
  }

  /**
   * The files a load must deliver: those of the PC that can be placed
   * (unconsumed, and for slot modes landing on an empty slot), plus the
   * requested file itself in an exact load. An exact load places its PC's
   * files in their empty slots, as strict does (finishLoad), so the next
   * exact opens find them there; in pool and mix only when they fit in the
   * budget, for there a VC's slots otherwise refill only from a chunk
   * staged within it, and filling them besides would put them on top of
   * it: then it reads its own file only.
   */
  private planLoad (vc: VcId, pc: PcId, load: LoadFor = {}): LoadPlan {
    const exact = load.exact === true
    const wanted = this.layout.pcs[pc].files.filter((file, offset) =>
      file === load.requester && exact ? true : !this.slots.isConsumed(file) && ((this.policy.stagesWhole && !exact) || this.slots.isSlotEmpty(vc, offset)))
    // The others fit beside the load's own file, for which readahead leaves room too (openerBytesInFlight).
    const files = exact && this.policy.stagesWhole && !this.fitsInMemory([{ pc, files: wanted }]) ? [load.requester!] : wanted
    return this.startLoad(vc, [{ pc, files }], load)
  }

  private startLoad (vc: VcId, pieces: readonly LoadPiece[], { requester, exact = false, forNode, forNextEpoch = false }: LoadFor = {}): LoadPlan {
    const files = pieces.flatMap(piece => piece.files)
    let bytes = 0
    let openerBytes = 0
    // An exact load's own file goes to its opener's handle, as a served file does: handles are not the budget's
    // (docs/design.md, "Invariants"), but readahead leaves room for it as for a file held open, from its read on.
    for (const file of files) {
      if (exact && file === requester) openerBytes += this.layout.files[file].size
      else bytes += this.layout.files[file].size
    }
    this.slots.setLoading(vc, true)
    if (forNextEpoch) this.loadingForNextEpoch.add(vc)
    this.counters.inflightBytes += bytes
    this.openerBytesInFlight += openerBytes
    return { id: this.nextPlanId++, vc, pieces, files, bytes, openerBytes, requester, exact, forNode, forNextEpoch }
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
    const givenUp = this.nextEpochGivenUp.delete(vc)
    this.loadingForNextEpoch.delete(vc)
    this.counters.inflightBytes -= plan.bytes
    this.openerBytesInFlight -= plan.openerBytes
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
      // Given up while it was read (a file of this epoch came back to the VC): nothing is staged, its bytes go.
      const served = givenUp ? [] : arrived.filter(file => this.slots.isConsumed(file))
      if (served.length > 0) {
        this.slots.stage(vc, served)
        this.stagedForNextEpoch.add(vc)
        placed.push(...served)
      }
    } else if (this.policy.stagesWhole && (plan.requester === undefined && this.slots.validSlots(vc) > 0)) {
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

    let charged: FileId | undefined
    if (plan.requester !== undefined) {
      // Which file a failed answer is charged with: the one it consumes (only a load that lost files can fail).
      const unconsumed = delivered.size < plan.files.length ? this.filesRead(plan).concat(plan.files).filter(file => !this.slots.isConsumed(file)) : []
      served = this.answerRequester(plan, delivered)
      if (served === undefined) charged = unconsumed.find(file => this.slots.isConsumed(file))
      if (served === undefined) this.counters.failedOpens++
      else if (served !== plan.requester) this.counters.redirects++
      if (served !== undefined) this.home.noteServed(served, plan.forNode)
    }
    this.noteMemory()
    return { placed, served, charged }
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
    if (plan.exact === true) {
      this.slots.consume(plan.requester!)
      return delivered.has(plan.requester!) ? plan.requester : undefined
    }
    return this.policy.answerRequester(plan, delivered)
  }

  /**
   * A load to start ahead of need for `vc`, if one is worth it and fits in
   * memory (the mode's policy says which). Readahead never rolls an epoch
   * over (that would hand this epoch's opens next epoch's files).
   */
  readahead (vc: VcId): LoadPlan | undefined {
    if (this.slots.isLoading(vc)) return undefined
    return this.policy.readahead(vc)
  }

  /** Whether these pieces' bytes fit the budget beside those resident, in flight and bound (or being read) for open files. */
  private fitsInMemory (pieces: readonly LoadPiece[], { readahead = false } = {}): boolean {
    let bytes = 0
    for (const piece of pieces) for (const file of piece.files) bytes += this.layout.files[file].size
    const unbound = this.slots.residentBytes + this.counters.inflightBytes + bytes
    const held = (this.options.heldByOpens?.() ?? 0) + this.openerBytesInFlight
    if (unbound + held <= this.options.memoryBytes) return true
    // Held back by open files alone: a loader that keeps many open reads ahead less, and this says so.
    if (readahead && unbound <= this.options.memoryBytes) this.counters.readaheadHeldBack++
    return false
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
    for (const vc of allVcs(this.layout)) {
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
      this.home.filesHeld(vc).length === 0 && (staged === undefined || this.stagedForNextEpoch.has(vc))
  }

  /** One VC starts afresh: nothing in memory, every file loadable. Returns the files dropped. */
  private resetVc (vc: VcId): FileId[] {
    this.unmatchedRepeats[vc] = 0
    this.forgetSatOut(vc)
    const dropped = this.slots.resetVc(vc)
    this.home.resetVc(vc)
    this.stagedForNextEpoch.delete(vc)
    for (const pc of this.layout.vcs[vc].pcs) this.failedPcs.delete(pc)
    return dropped
  }

  /**
   * A file of this epoch that reached no trainer after all (an answer or a
   * shipment lost on its way): this epoch's to serve again. Its VC may
   * have a chunk staged for its next epoch with this very file in it, its
   * bytes in memory: were the file only made loadable, this epoch's load of
   * it would put a second copy in memory, and the rollover would install a
   * slot whose bytes the first copy's open took. So it leaves the staged
   * chunk and serves this epoch from its slot; or, that slot taken (or a
   * load in flight, see `returnUnserved`), it is loaded again and the next
   * epoch loads it anew.
   */
  reopen (file: FileId): void {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (this.stagedForNextEpoch.has(vc) && this.slots.takeStaged(vc, file)) {
      if (this.slots.isSlotEmpty(vc, offset) && !this.slots.isLoading(vc)) {
        this.slots.place(vc, offset, file)
        this.noteMemory()
        return
      }
      this.dropped.push(file)
    }
    this.slots.unconsume(file)
    this.giveUpNextEpoch(vc)
    this.noteMemory()
  }

  /**
   * A file of this epoch came back to a VC after the room it had left was
   * given to a chunk read ahead for the VC's next epoch: that chunk gives
   * the room back, or the file's return (or this epoch's load of it) would
   * come on top of it, past --memory. Its files were served this epoch, so
   * they stay consumed, and the rollover makes them loadable again: the
   * next epoch reads them anew.
   */
  private giveUpNextEpoch (vc: VcId): void {
    if (this.loadingForNextEpoch.has(vc)) this.nextEpochGivenUp.add(vc)
    if (!this.stagedForNextEpoch.delete(vc)) return
    this.dropped.push(...this.slots.dropStaged(vc))
  }

  /** The files let go out of memory since the last call, outside a load, reset or new run: the caller frees their bytes. */
  takeDropped (): FileId[] {
    const dropped = this.dropped
    this.dropped = []
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
    // A file that sat this epoch out was served in an earlier one: its late return is not this epoch's to serve.
    if (!this.owns(vc) || !this.slots.isConsumed(file) || this.satOut.has(file)) return 'dropped'
    this.counters.returnedFiles++
    this.home.unserve(file)
    // Not while a load of its VC is in flight: that load was planned with the slot empty and the file
    // consumed, and would fill the slot again (strict) or stage a second copy of it (pool, mix).
    if (this.slots.isSlotEmpty(vc, offset) && !this.slots.isLoading(vc)) {
      // Out of a chunk staged for the next epoch, if there (see `reopen`): the bytes given back serve this one. Else that chunk makes room for them.
      if (!(this.stagedForNextEpoch.has(vc) && this.slots.takeStaged(vc, file))) this.giveUpNextEpoch(vc)
      this.slots.place(vc, offset, file)
      this.noteMemory()
      return 'placed'
    }
    this.reopen(file)
    return 'dropped'
  }

  /**
   * A failed open was charged with an unreadable file (LoadOutcome.charged)
   * but its opener must not count (an orphaned worker, refused after its
   * answer): the file is this epoch's to charge to another open again.
   */
  uncharge (file: FileId): void {
    const vc = this.vcOf(file)
    if (!this.owns(vc) || !this.slots.isConsumed(file) || this.slots.fileAt(vc, this.offsetOf(file)) === file || this.satOut.has(file)) return
    this.slots.unconsume(file)
    this.counters.failedOpens--
  }

  /**
   * Starts a fresh epoch everywhere, for when the trainer's epochs no longer
   * line up with the VCs' (a run stopped mid-epoch). Files in memory are
   * dropped (the caller frees their bytes); loads in flight complete into
   * the new epoch.
   */
  reset (): FileId[] {
    this.unmatchedRepeats.fill(0)
    this.satOut.clear()
    const dropped = this.slots.reset()
    this.stagedForNextEpoch.clear()
    this.failedPcs.clear()
    this.home.reset()
    this.counters.resets++
    this.noteMemory()
    return dropped
  }

  private noteMemory (): void { noteMemory(this.counters, this.slots.residentBytes) }
}
