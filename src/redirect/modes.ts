/**
 * The redirect modes (docs/design.md, "The protocol") as policies of the
 * protocol core: how an open is answered, what a load reads, how a load's
 * opener is answered, and what is read ahead. Everything they share
 * (slots, consumed bits, rollover, reclaims, readahead admission,
 * counters) is the core's (protocol.ts); a policy only decides, through
 * the core's steps.
 *
 * - strict: an open is answered by its own slot; a load refills the VC's
 *   empty slots (refill.ts).
 * - pool: any valid slot of the VC answers; a load reads a whole random
 *   PC, and one read ahead waits staged, whole (pieces.ts).
 * - mix: pool's answers; a load reads blocks of several PCs.
 * - off: the file itself, loaded with its chunk.
 */
import type { FileId, Layout, PcId, VcId } from './layout'
import { chooseMixPieces, chooseNextEpochPieces, choosePoolPc, servedOutPcs, type LoadPiece } from './pieces'
import type { Asking, LoadFor, LoadPlan, OpenDecision, RedirectMode } from './protocol'
import type { SeededRandom } from './random'
import { chooseRefill } from './refill'
import type { SlotTable } from './slots'

/** A VC still serving may read for its next epoch once this share of its PCs, and this many, are served out (see mayStageEarly). */
const EARLY_STAGE_SHARE = 0.5
const EARLY_STAGE_CHOICES = 3

/** What a policy may use of the protocol core: its state, read-only, and the steps that change it. */
export interface ProtocolCore {
  readonly layout: Layout
  readonly slots: SlotTable
  readonly random: SeededRandom
  /** PCs whose last load lost files: readahead skips them. */
  readonly failedPcs: ReadonlySet<PcId>
  offsetOf (file: FileId): number
  vcOf (file: FileId): VcId
  /** Ends the VC's epoch. */
  rollOver (vc: VcId): void
  /** Moves the staged chunk into an empty VC, unless it waits for the VC's next epoch. */
  installStagedWhenEmpty (vc: VcId): void
  takeRandom (vc: VcId): FileId
  /** A reclaim before the VC's epoch may end; undefined when it may end now. */
  planReclaim (vc: VcId, offsets: readonly number[] | undefined, asking: Asking): OpenDecision | undefined
  /** A load of the placeable files of one PC. */
  planLoad (vc: VcId, pc: PcId, load?: LoadFor): LoadPlan
  startLoad (vc: VcId, pieces: readonly LoadPiece[], load?: LoadFor): LoadPlan
  /** An exact open in a mode that redirects: the file itself, from its slot or a staged chunk when there. */
  decideExact (file: FileId, asking: Asking): OpenDecision
  /** The file itself, from memory if its chunk brought it there, else by loading its chunk. */
  loadOwnFile (file: FileId, asking: Asking): OpenDecision
  /** Whether a readahead of these pieces fits the memory budget beside the bytes resident, in flight and bound to open files. */
  readaheadFits (pieces: readonly LoadPiece[]): boolean
  /** Files of the VC served this epoch that nothing can serve again before its rollover. */
  servedThisEpoch (vc: VcId): (file: FileId) => boolean
}

export interface ModePolicy {
  /** A chunk that arrives while the VC still serves is kept staged, whole (pool, mix). */
  readonly stagesWhole: boolean
  /** Opportunistic batches go to requesters (all but off, which serves only the file asked for). */
  readonly shipsBatches: boolean
  /** Answers an open of `file`. */
  decide (file: FileId, asking: Asking): OpenDecision
  /** Answers an open that must get `file` itself (`OpenOptions.exact`). */
  decideExact (file: FileId, asking: Asking): OpenDecision
  /** The file a finished demand load (not exact) answers its opener with; undefined when it could not be read, charged to that open. */
  answerRequester (plan: LoadPlan, delivered: ReadonlySet<FileId>): FileId | undefined
  /** A load to start ahead of need for `vc` (no load of it in flight), if one is worth it and fits in memory. */
  readahead (vc: VcId): LoadPlan | undefined
}

export function policyFor (mode: RedirectMode, core: ProtocolCore, mixBlock: number): ModePolicy {
  switch (mode) {
    case 'strict': return new StrictPolicy(core)
    case 'pool': return new PoolPolicy(core)
    case 'mix': return new MixPolicy(core, mixBlock)
    case 'off': return new OffPolicy(core)
  }
}

/**
 * strict: the slot answers whatever it holds; an empty slot needs the PC
 * that fills the most empty slots among those that can fill this one.
 */
class StrictPolicy implements ModePolicy {
  readonly stagesWhole = false
  readonly shipsBatches = true

  constructor (private readonly core: ProtocolCore) {}

  decide (file: FileId, asking: Asking): OpenDecision {
    const { core } = this
    const { layout, slots, random } = core
    const vc = core.vcOf(file)
    const offset = core.offsetOf(file)
    if (!slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: slots.take(vc, offset) }
    if (slots.isLoading(vc)) return { kind: 'wait', vc }
    let pc = chooseRefill(layout, slots, random, vc, offset)
    if (pc === undefined) {
      const reclaim = core.planReclaim(vc, [offset], asking)
      if (reclaim !== undefined) return reclaim
      core.rollOver(vc)
      pc = chooseRefill(layout, slots, random, vc, offset)!
    }
    return { kind: 'load', plan: core.planLoad(vc, pc, { requester: file, forNode: asking.forNode }) }
  }

  decideExact (file: FileId, asking: Asking): OpenDecision { return this.core.decideExact(file, asking) }

  answerRequester (plan: LoadPlan, delivered: ReadonlySet<FileId>): FileId | undefined {
    const { core } = this
    const offset = core.offsetOf(plan.requester!)
    if (!core.slots.isSlotEmpty(plan.vc, offset)) return core.slots.take(plan.vc, offset)
    // The file this open would have been given is unreadable: charge it to this open.
    core.slots.consume(core.layout.pcs[plan.pieces[0].pc].files[offset])
    return undefined
  }

  /** Refills a VC once three quarters of its slots are empty: earlier refills land on more occupied slots and cost loads. */
  readahead (vc: VcId): LoadPlan | undefined {
    const { layout, slots, random, failedPcs } = this.core
    if (slots.emptySlots(vc) * 4 < slots.capacity[vc] * 3) return undefined
    const pc = chooseRefill(layout, slots, random, vc, undefined, failedPcs)
    if (pc === undefined || !this.core.readaheadFits([{ pc, files: slots.unconsumedFilesOf(pc) }])) return undefined
    return this.core.planLoad(vc, pc)
  }
}

/**
 * pool: the slot if valid, else any valid slot of the VC; only an empty VC
 * loads, and then a whole random unconsumed PC. The next chunk is read
 * ahead, staged, once a quarter or less of the VC is left.
 */
class PoolPolicy implements ModePolicy {
  readonly stagesWhole = true
  readonly shipsBatches = true

  constructor (protected readonly core: ProtocolCore) {}

  decide (file: FileId, asking: Asking): OpenDecision {
    const { core } = this
    const { slots } = core
    const vc = core.vcOf(file)
    const offset = core.offsetOf(file)
    core.installStagedWhenEmpty(vc)
    if (!slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: slots.take(vc, offset) }
    if (slots.validSlots(vc) > 0) return { kind: 'serve', file: core.takeRandom(vc) }
    if (slots.isLoading(vc)) return { kind: 'wait', vc }
    if (slots.allConsumed(vc)) {
      const reclaim = core.planReclaim(vc, undefined, asking)
      if (reclaim !== undefined) return reclaim
      core.rollOver(vc)
      // A chunk read ahead for this new epoch answers at once.
      core.installStagedWhenEmpty(vc)
      if (!slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: slots.take(vc, offset) }
      if (slots.validSlots(vc) > 0) return { kind: 'serve', file: core.takeRandom(vc) }
    }
    return { kind: 'load', plan: this.demandLoad(vc, { requester: file, forNode: asking.forNode }) }
  }

  decideExact (file: FileId, asking: Asking): OpenDecision { return this.core.decideExact(file, asking) }

  answerRequester (plan: LoadPlan, delivered: ReadonlySet<FileId>): FileId | undefined {
    const { core } = this
    const { vc } = plan
    const offset = core.offsetOf(plan.requester!)
    if (!core.slots.isSlotEmpty(vc, offset)) return core.slots.take(vc, offset)
    if (core.slots.validSlots(vc) > 0) return core.takeRandom(vc)
    const unreadable = plan.files.find(file => !delivered.has(file))
    if (unreadable !== undefined) core.slots.consume(unreadable)
    return undefined
  }

  readahead (vc: VcId): LoadPlan | undefined {
    const { core } = this
    const { slots } = core
    if (slots.staged(vc) !== undefined || slots.validSlots(vc) * 4 > slots.capacity[vc]) return undefined
    if (slots.allConsumed(vc)) {
      // Nothing left to read this epoch: read for the next one while this one's last files are served, so
      // the next epoch's first opens find chunks in memory. While the VC still holds files to serve, only
      // once most of its PCs are served out (mayStageEarly); else once it has served its last file, with
      // every PC of PCS(v) to choose from, as at any epoch's first load.
      const served = core.servedThisEpoch(vc)
      if (slots.validSlots(vc) > 0 && !this.mayStageEarly(vc, served)) return undefined
      const next = chooseNextEpochPieces(core.layout, slots, core.random, vc, this.nextEpochBlock(), core.failedPcs, served)
      if (next === undefined || !core.readaheadFits(next)) return undefined
      return core.startLoad(vc, next, { forNextEpoch: true })
    }
    return this.readaheadLoad(vc)
  }

  /** The load an open of an empty VC starts: a whole random PC with files left this epoch. */
  protected demandLoad (vc: VcId, load: LoadFor): LoadPlan {
    const { core } = this
    return core.planLoad(vc, choosePoolPc(core.layout, core.slots, core.random, vc)!, load)
  }

  /** A load of this epoch read ahead: as a demand load, but never of a PC whose last load failed. */
  protected readaheadLoad (vc: VcId): LoadPlan | undefined {
    const { core } = this
    const pc = choosePoolPc(core.layout, core.slots, core.random, vc, core.failedPcs)
    if (pc === undefined || !core.readaheadFits([{ pc, files: core.slots.unconsumedFilesOf(pc) }])) return undefined
    return core.planLoad(vc, pc)
  }

  /** What a read for the next epoch takes together: a whole PC (undefined) here, blocks in mix. */
  protected nextEpochBlock (): number | undefined { return undefined }

  /**
   * Whether a VC still serving its last files may read for its next epoch
   * already: only once most of its PCs are served out (EARLY_STAGE_SHARE,
   * and at least EARLY_STAGE_CHOICES of them), so the next epoch's first
   * load still has many PCs to be drawn from. With fewer, every epoch would
   * start with the PCs served earliest in the one before.
   */
  private mayStageEarly (vc: VcId, served: (file: FileId) => boolean): boolean {
    const { layout, failedPcs } = this.core
    const servedOut = servedOutPcs(layout, vc, failedPcs, served).length
    return servedOut >= EARLY_STAGE_CHOICES && servedOut >= layout.vcs[vc].pcs.length * EARLY_STAGE_SHARE
  }
}

/** mix: pool's answers; a load takes each block of slots from its own random PC. */
class MixPolicy extends PoolPolicy {
  /** Consecutive files of one PC a load takes together (one read): 1 over a directory, more over a pack. */
  constructor (core: ProtocolCore, private readonly block: number) {
    super(core)
  }

  protected override demandLoad (vc: VcId, load: LoadFor): LoadPlan {
    return this.core.startLoad(vc, this.pieces(vc)!, load)
  }

  protected override readaheadLoad (vc: VcId): LoadPlan | undefined {
    const pieces = this.pieces(vc, this.core.failedPcs)
    if (pieces === undefined || !this.core.readaheadFits(pieces)) return undefined
    return this.core.startLoad(vc, pieces)
  }

  protected override nextEpochBlock (): number { return this.block }

  /** Blocks of this epoch's unconsumed files, each from a PC outside `exclude` (pieces.ts). */
  private pieces (vc: VcId, exclude?: ReadonlySet<PcId>): LoadPiece[] | undefined {
    const { core } = this
    return chooseMixPieces(core.layout, core.slots, core.random, vc, this.block, exclude)
  }
}

/** off: every open gets its own file; nothing is redirected, shipped or read ahead. */
class OffPolicy implements ModePolicy {
  readonly stagesWhole = false
  readonly shipsBatches = false

  constructor (private readonly core: ProtocolCore) {}

  decide (file: FileId, asking: Asking): OpenDecision { return this.core.loadOwnFile(file, asking) }
  decideExact (file: FileId, asking: Asking): OpenDecision { return this.core.loadOwnFile(file, asking) }
  answerRequester (): FileId | undefined { throw new Error('an off-mode load is always exact') }
  readahead (): LoadPlan | undefined { return undefined }
}
