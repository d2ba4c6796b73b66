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
 * The three modes (DESIGN §3) differ only in how an open is answered and
 * how a load is placed; they share slots, consumed bits, rollover,
 * readahead admission and counters, all of which live here.
 */
import { zeroCounters, type ProtocolCounters } from './counters'
import type { FileId, Layout, PcId, VcId } from './layout'
import { SeededRandom } from './random'
import { chooseRefill } from './refill'
import { SlotTable } from './slots'

export type RedirectMode = 'strict' | 'pool' | 'off'
export const REDIRECT_MODES: readonly RedirectMode[] = ['strict', 'pool', 'off']

export interface LoadPlan {
  readonly id: number
  readonly vc: VcId
  readonly pc: PcId
  /** The files the load must deliver (a whole-chunk reader may read more). */
  readonly files: readonly FileId[]
  readonly bytes: number
  /** The opened file whose open asked for this load; absent for readahead. */
  readonly requester?: FileId
}

export type OpenDecision =
  | { readonly kind: 'serve', readonly file: FileId }
  | { readonly kind: 'load', readonly plan: LoadPlan }
  | { readonly kind: 'wait', readonly vc: VcId }

export interface LoadOutcome {
  /** Files now in memory (the caller keeps their bytes). */
  readonly placed: readonly FileId[]
  /** For a demand load: the file its open is answered with, or undefined when that file could not be read. */
  readonly served?: FileId
}

export interface ProtocolOptions {
  mode: RedirectMode
  /** Readahead is started only while resident plus in-flight bytes stay within this. */
  memoryBytes: number
  /** Seeds the runtime choices (refill ties, pool picks). */
  seed: number
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

  constructor (readonly layout: Layout, readonly options: ProtocolOptions) {
    this.slots = new SlotTable(layout)
    this.random = new SeededRandom(options.seed ^ 0x5eed)
  }

  vcOf (file: FileId): VcId { return this.layout.pcs[this.layout.filePc[file]].vc }
  offsetOf (file: FileId): number { return this.layout.fileOffset[file] }

  /**
   * Answers an open of `file`. Call again with `retry` after a wait or a
   * failed load; only the first call counts as an open.
   */
  open (file: FileId, retry = false): OpenDecision {
    if (!retry) this.counters.opens++
    const decision = this.decide(file)
    if (decision.kind === 'serve') {
      if (!retry) this.counters.memoryHits++
      if (decision.file !== file) this.counters.redirects++
      this.noteMemory()
    } else if (!retry) {
      this.counters.waitedOpens++
    }
    return decision
  }

  private decide (file: FileId): OpenDecision {
    switch (this.options.mode) {
      case 'strict': return this.decideStrict(file)
      case 'pool': return this.decidePool(file)
      case 'off': return this.decideOff(file)
    }
  }

  /**
   * strict: the slot answers whatever it holds; an empty slot needs the PC
   * that fills the most empty slots among those that can fill this one.
   */
  private decideStrict (file: FileId): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (!this.slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    let pc = chooseRefill(this.layout, this.slots, this.random, vc, offset)
    if (pc === undefined) {
      this.rollOver(vc)
      pc = chooseRefill(this.layout, this.slots, this.random, vc, offset)!
    }
    return { kind: 'load', plan: this.planLoad(vc, pc, file) }
  }

  /**
   * pool: the slot if valid, else any valid slot of the VC; only an empty
   * VC loads, and then a whole random unconsumed PC.
   */
  private decidePool (file: FileId): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (this.slots.validSlots(vc) === 0) this.slots.installStaged(vc)
    if (!this.slots.isSlotEmpty(vc, offset)) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.validSlots(vc) > 0) return { kind: 'serve', file: this.takeRandom(vc) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    if (this.slots.allConsumed(vc)) this.rollOver(vc)
    return { kind: 'load', plan: this.planLoad(vc, this.randomUnconsumedPc(vc)!, file) }
  }

  /** off: the file itself, from memory if its chunk brought it there, else by loading its chunk. */
  private decideOff (file: FileId): OpenDecision {
    const vc = this.vcOf(file)
    const offset = this.offsetOf(file)
    if (this.slots.fileAt(vc, offset) === file) return { kind: 'serve', file: this.slots.take(vc, offset) }
    if (this.slots.isLoading(vc)) return { kind: 'wait', vc }
    if (this.slots.allConsumed(vc)) this.rollOver(vc)
    return { kind: 'load', plan: this.planLoad(vc, this.layout.filePc[file], file) }
  }

  /** A VC's epoch ends when an open needs a load and no file of PCS(v) is left to load. */
  private rollOver (vc: VcId): void {
    this.slots.clearConsumed(vc)
    for (const pc of this.layout.vcs[vc].pcs) this.failedPcs.delete(pc)
    this.counters.rollovers++
  }

  private takeRandom (vc: VcId): FileId {
    const offsets = this.slots.validOffsets(vc)
    return this.slots.take(vc, offsets[this.random.below(offsets.length)])
  }

  private randomUnconsumedPc (vc: VcId, exclude?: ReadonlySet<PcId>): PcId | undefined {
    const candidates = this.layout.vcs[vc].pcs.filter(pc => exclude?.has(pc) !== true && this.slots.unconsumedFilesOf(pc).length > 0)
    return candidates.length === 0 ? undefined : candidates[this.random.below(candidates.length)]
  }

  /**
   * The files a load must deliver: those of the PC that can be placed
   * (unconsumed, and for slot modes landing on an empty slot), plus the
   * requested file itself in off mode.
   */
  private planLoad (vc: VcId, pc: PcId, requester?: FileId): LoadPlan {
    const stagesWhole = this.options.mode === 'pool'
    const files = this.layout.pcs[pc].files.filter((file, offset) =>
      file === requester && this.options.mode === 'off'
        ? true
        : !this.slots.isConsumed(file) && (stagesWhole || this.slots.isSlotEmpty(vc, offset)))
    let bytes = 0
    for (const file of files) bytes += this.layout.files[file].size
    this.slots.setLoading(vc, true)
    this.counters.inflightBytes += bytes
    return { id: this.nextPlanId++, vc, pc, files, bytes, requester }
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
    if (lost > 0) this.failedPcs.add(plan.pc)
    else this.failedPcs.delete(plan.pc)

    const placed: FileId[] = []
    let served: FileId | undefined
    const mode = this.options.mode
    const arrived = plan.files.filter(file => delivered.has(file))

    if (mode === 'pool' && (plan.requester === undefined && this.slots.validSlots(vc) > 0)) {
      // Readahead while the VC still serves: keep the chunk staged.
      for (const file of arrived) this.slots.consume(file)
      this.slots.stage(vc, arrived)
      placed.push(...arrived)
    } else {
      for (const file of arrived) {
        if (mode === 'off' && file === plan.requester) continue
        const offset = this.offsetOf(file)
        if (!this.slots.isSlotEmpty(vc, offset)) continue
        this.slots.place(vc, offset, file)
        this.slots.consume(file)
        placed.push(file)
      }
    }
    this.counters.filesLoaded += placed.length
    const pcFiles = this.layout.pcs[plan.pc].files
    for (const file of pcFiles) {
      if (!placed.includes(file) && file !== plan.requester) {
        this.counters.wastedFiles++
        this.counters.wastedBytes += this.layout.files[file].size
      }
    }

    if (plan.requester !== undefined) {
      served = this.answerRequester(plan, delivered)
      if (served === undefined) this.counters.failedOpens++
      else if (served !== plan.requester) this.counters.redirects++
    }
    this.noteMemory()
    return { placed, served }
  }

  private answerRequester (plan: LoadPlan, delivered: ReadonlySet<FileId>): FileId | undefined {
    const requester = plan.requester!
    const { vc } = plan
    const offset = this.offsetOf(requester)
    switch (this.options.mode) {
      case 'off':
        this.slots.consume(requester)
        return delivered.has(requester) ? requester : undefined
      case 'strict': {
        if (!this.slots.isSlotEmpty(vc, offset)) return this.slots.take(vc, offset)
        // The file this open would have been given is unreadable: charge it to this open.
        this.slots.consume(this.layout.pcs[plan.pc].files[offset])
        return undefined
      }
      case 'pool': {
        if (!this.slots.isSlotEmpty(vc, offset)) return this.slots.take(vc, offset)
        if (this.slots.validSlots(vc) > 0) return this.takeRandom(vc)
        const unreadable = plan.files.find(file => !delivered.has(file))
        if (unreadable !== undefined) this.slots.consume(unreadable)
        return undefined
      }
    }
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
    let pc: PcId | undefined
    if (this.options.mode === 'strict') {
      if (this.slots.emptySlots(vc) * 4 < capacity * 3) return undefined
      pc = chooseRefill(this.layout, this.slots, this.random, vc, undefined, this.failedPcs)
    } else if (this.options.mode === 'pool') {
      if (this.slots.staged(vc) !== undefined || this.slots.validSlots(vc) * 4 > capacity) return undefined
      pc = this.randomUnconsumedPc(vc, this.failedPcs)
    }
    if (pc === undefined) return undefined
    const bytes = this.slots.unconsumedFilesOf(pc).reduce((sum, file) => sum + this.layout.files[file].size, 0)
    if (this.slots.residentBytes + this.counters.inflightBytes + bytes > this.options.memoryBytes) return undefined
    return this.planLoad(vc, pc)
  }

  /**
   * Starts a fresh epoch everywhere, for when the trainer's epochs no longer
   * line up with the VCs' (a run stopped mid-epoch). Files in memory are
   * dropped (the caller frees their bytes); loads in flight complete into
   * the new epoch.
   */
  reset (): FileId[] {
    const dropped = this.slots.reset()
    this.failedPcs.clear()
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
