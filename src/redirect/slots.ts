/**
 * Slot state: what each VC slot holds, and the consumed bit of every file.
 *
 * A slot (v, O) holds at most one file, always a file stored at offset O of
 * some PC in PCS(v). A file's consumed bit is set when its bytes enter
 * memory and cleared only by a rollover, which is how a file is loaded at
 * most once per epoch (docs/design.md, "Invariants", 3). Pool mode may also hold one *staged*
 * chunk per VC: loaded ahead of need, installed when the VC runs empty.
 */
import { allVcs, vcOfFile, type FileId, type Layout, type PcId, type VcId } from './layout'

const EMPTY = -1

export class SlotTable {
  private readonly slots: Int32Array
  private readonly validCount: Uint32Array
  private readonly unconsumedCount: Uint32Array
  private readonly consumedBits: Uint8Array
  private readonly loadingBits: Uint8Array
  private readonly stagedFiles = new Map<VcId, FileId[]>()
  /** Slots a VC can use: the longest PC in its set. */
  readonly capacity: Uint32Array
  residentBytes = 0

  constructor (private readonly layout: Layout) {
    const K = layout.chunkSize
    this.slots = new Int32Array(layout.vcs.length * K).fill(EMPTY)
    this.validCount = new Uint32Array(layout.vcs.length)
    this.unconsumedCount = new Uint32Array(layout.vcs.length)
    this.capacity = new Uint32Array(layout.vcs.length)
    this.consumedBits = new Uint8Array(layout.files.length)
    this.loadingBits = new Uint8Array(layout.vcs.length)
    layout.vcs.forEach((vc, v) => {
      for (const pc of vc.pcs) {
        const length = layout.pcs[pc].files.length
        this.unconsumedCount[v] += length
        this.capacity[v] = Math.max(this.capacity[v], length)
      }
    })
  }

  fileAt (vc: VcId, offset: number): FileId | undefined {
    const file = this.slots[vc * this.layout.chunkSize + offset]
    return file === EMPTY ? undefined : file as FileId
  }

  isSlotEmpty (vc: VcId, offset: number): boolean {
    return this.slots[vc * this.layout.chunkSize + offset] === EMPTY
  }

  place (vc: VcId, offset: number, file: FileId): void {
    this.slots[vc * this.layout.chunkSize + offset] = file
    this.validCount[vc]++
    this.residentBytes += this.layout.files[file].size
  }

  /** Empties slot (v, O) and returns what it held (the open now owns those bytes). */
  take (vc: VcId, offset: number): FileId {
    const index = vc * this.layout.chunkSize + offset
    const file = this.slots[index]
    if (file === EMPTY) throw new Error(`slot (${vc}, ${offset}) is empty`)
    this.slots[index] = EMPTY
    this.validCount[vc]--
    this.residentBytes -= this.layout.files[file].size
    return file as FileId
  }

  validSlots (vc: VcId): number { return this.validCount[vc] }
  emptySlots (vc: VcId): number { return this.capacity[vc] - this.validCount[vc] }

  validOffsets (vc: VcId): number[] {
    const offsets: number[] = []
    for (let offset = 0; offset < this.capacity[vc]; offset++) {
      if (!this.isSlotEmpty(vc, offset)) offsets.push(offset)
    }
    return offsets
  }

  isConsumed (file: FileId): boolean { return this.consumedBits[file] === 1 }

  consume (file: FileId): void {
    if (this.consumedBits[file] === 1) return
    this.consumedBits[file] = 1
    this.unconsumedCount[vcOfFile(this.layout, file)]--
  }

  /** No file of PCS(v) is left to load this epoch. */
  allConsumed (vc: VcId): boolean { return this.unconsumedCount[vc] === 0 }

  /** Makes a consumed file loadable again (its bytes were lost before any trainer got them). */
  unconsume (file: FileId): void {
    if (this.consumedBits[file] === 0) return
    this.consumedBits[file] = 0
    this.unconsumedCount[vcOfFile(this.layout, file)]++
  }

  /**
   * Starts a new epoch for one VC: every file of PCS(v) becomes loadable
   * again, except those still sitting in memory (they were loaded in the
   * epoch that is ending and will be served in the one that starts),
   * here or, in a cluster, in another node's mirror (`heldElsewhere`).
   */
  clearConsumed (vc: VcId, heldElsewhere: Iterable<FileId> = []): void {
    const inMemory = new Set<FileId>([...(this.stagedFiles.get(vc) ?? []), ...heldElsewhere])
    for (const offset of this.validOffsets(vc)) inMemory.add(this.fileAt(vc, offset)!)
    for (const pc of this.layout.vcs[vc].pcs) {
      for (const file of this.layout.pcs[pc].files) {
        if (this.consumedBits[file] === 1 && !inMemory.has(file)) {
          this.consumedBits[file] = 0
          this.unconsumedCount[vc]++
        }
      }
    }
  }

  unconsumedFilesOf (pc: PcId): FileId[] {
    return this.layout.pcs[pc].files.filter(file => !this.isConsumed(file))
  }

  /**
   * Forgets every epoch: empties all slots and staged chunks and clears
   * every consumed bit. Returns the files dropped from memory.
   */
  reset (): FileId[] {
    const dropped: FileId[] = []
    for (const vc of allVcs(this.layout)) {
      for (const offset of this.validOffsets(vc)) dropped.push(this.take(vc, offset))
    }
    for (const files of this.stagedFiles.values()) {
      for (const file of files) { dropped.push(file); this.residentBytes -= this.layout.files[file].size }
    }
    this.stagedFiles.clear()
    this.consumedBits.fill(0)
    this.layout.vcs.forEach((vc, v) => {
      this.unconsumedCount[v] = vc.pcs.reduce((sum, pc) => sum + this.layout.pcs[pc].files.length, 0)
    })
    return dropped
  }

  /**
   * Forgets one VC's epoch: empties its slots and staged chunk and clears
   * the consumed bits of its files. Returns the files dropped from memory.
   */
  resetVc (vc: VcId): FileId[] {
    const dropped: FileId[] = []
    for (const offset of this.validOffsets(vc)) dropped.push(this.take(vc, offset))
    dropped.push(...this.dropStaged(vc))
    let files = 0
    for (const pc of this.layout.vcs[vc].pcs) {
      for (const file of this.layout.pcs[pc].files) { this.consumedBits[file] = 0; files++ }
    }
    this.unconsumedCount[vc] = files
    return dropped
  }

  isLoading (vc: VcId): boolean { return this.loadingBits[vc] === 1 }
  setLoading (vc: VcId, loading: boolean): void { this.loadingBits[vc] = loading ? 1 : 0 }

  staged (vc: VcId): readonly FileId[] | undefined { return this.stagedFiles.get(vc) }

  stage (vc: VcId, files: FileId[]): void {
    this.stagedFiles.set(vc, files)
    for (const file of files) this.residentBytes += this.layout.files[file].size
  }

  /** Takes `file` out of the VC's staged chunk, if it is there (an exact open of it). */
  takeStaged (vc: VcId, file: FileId): boolean {
    const files = this.stagedFiles.get(vc)
    const index = files?.indexOf(file) ?? -1
    if (index < 0) return false
    files!.splice(index, 1)
    if (files!.length === 0) this.stagedFiles.delete(vc)
    this.residentBytes -= this.layout.files[file].size
    return true
  }

  /** Empties the VC's staged chunk, its files left as they are (consumed or not). Returns the files dropped from memory. */
  dropStaged (vc: VcId): FileId[] {
    const files = this.stagedFiles.get(vc) ?? []
    for (const file of files) this.residentBytes -= this.layout.files[file].size
    this.stagedFiles.delete(vc)
    return files
  }

  /** Moves the staged chunk into the (empty) slots of its VC. */
  installStaged (vc: VcId): void {
    const files = this.stagedFiles.get(vc)
    if (files === undefined) return
    this.stagedFiles.delete(vc)
    for (const file of files) {
      this.residentBytes -= this.layout.files[file].size
      this.place(vc, this.layout.fileOffset[file], file)
    }
  }
}
