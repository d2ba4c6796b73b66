/**
 * The redirection protocol over shared chunks (shared-layout.ts), for one
 * node, as a pure state machine (docs/design.md, "Shared chunks").
 *
 * Memory holds, per class, a stock of files read and not yet served. An
 * open of a file is answered with a random file of its class's stock; an
 * empty stock waits for a load that brings one, or starts one. A load reads
 * one whole chunk, and its files join the stocks of their own classes:
 * there are no slots and no virtual chunks, and redirection never leaves
 * the class, so labels stay right.
 *
 * Each class has an epoch of its own. A file is taken (read into memory) at
 * most once per epoch of its class, and served exactly once: the class's
 * epoch ends when an open finds every file of it served, and the files
 * become loadable again. A chunk read at the end of an epoch may hold files
 * whose class has not ended its epoch yet but has served them already:
 * they are taken for that class's next epoch and wait in a second stock,
 * which becomes the stock when the class rolls over. So a chunk is read
 * once per epoch even where classes end their epochs at different times.
 *
 * A load reads a chunk's worth of files as blocks (shared-layout.ts), each
 * one read, each from its own chunk: blocks smaller than a chunk change
 * which files arrive together from load to load and epoch to epoch, as mix
 * mode does. Readahead keeps memory full of the blocks that feed the
 * classes closest to running dry: each block, of a few drawn at random,
 * the one whose files matter most (a class's files matter more the more of
 * its epoch is left and the fewer it has in stock). A demand load, for an
 * open whose class has nothing in stock or on the way, starts with a block
 * holding a file of that class. Readahead leaves a share of the memory to
 * demand loads, which place only what fits: memory never holds more than
 * its budget, and an open never waits for memory only another open can
 * free.
 */
import { countAnswer, noteMemory, zeroCounters, type ProtocolCounters } from './counters'
import type { FileId } from './layout'
import { SeededRandom } from './random'
import type { SharedLayout } from './shared-layout'

/** Blocks drawn at random for each block a load reads: the best of them is read. */
const CHOICES = 32
/** Share of the memory readahead leaves to demand loads. */
const DEMAND_SHARE = 0.1

/** A block of the shared layout (`SharedLayout.blocks`): what one read brings. */
export type BlockId = number & { readonly block: unique symbol }

export interface SharedLoadPlan {
  readonly id: number
  /** One read each. */
  readonly blocks: readonly BlockId[]
  /** The files it takes; each block's read runs from the first taken of it to the last. */
  readonly files: readonly FileId[]
  /** Bytes it adds to memory: its files, but for `answer`, which goes to its opener. */
  readonly bytes: number
  /** The opened file whose open asked for this load; absent for readahead. */
  readonly requester?: FileId
  /** The file of the requester's class that answers it. */
  readonly answer?: FileId
  /** Every file it places waits for its class's next epoch. */
  readonly forNextEpoch: boolean
  /** An exact open's file read again for its opener alone (it was served, or sat out, this epoch): its state does not change. */
  readonly reread?: boolean
}

export type SharedOpenDecision =
  | { readonly kind: 'serve', readonly file: FileId }
  | { readonly kind: 'load', readonly plan: SharedLoadPlan }
  /** Wait for a load that brings a file of this class; retry when it ends. */
  | { readonly kind: 'wait', readonly group: number }

export interface SharedLoadOutcome {
  /** Files now in stock for their class's epoch, and for its next one. */
  readonly placed: readonly FileId[]
  readonly placedForNextEpoch: readonly FileId[]
  /** For a demand load: the file its open is answered with, or undefined when it could not be read (charged to that open). */
  readonly served?: FileId
  /** The classes whose waiting opens may now be answered. */
  readonly wakes: readonly number[]
}

export interface SharedProtocolOptions {
  /** Resident plus in-flight bytes never exceed this; readahead also leaves room for those held by opens. */
  memoryBytes: number
  /**
   * Bytes of samples served and still held by open files (the FUSE layer's
   * handles): out of the stocks, yet in memory until released. Readahead
   * leaves room for them. None when absent.
   */
  heldByOpens?: () => number
  seed: number
}

/** Where a file is: idle (loadable, or served, by its epoch), on its way into memory, or in a stock. */
const IDLE = 0
const IN_FLIGHT = 1
const RESIDENT = 2

export class SharedProtocol {
  readonly counters: ProtocolCounters = zeroCounters()
  private readonly random: SeededRandom
  private nextPlanId = 1
  /** Blocks one load reads (a chunk's worth), and a block's mean size. */
  private readonly blocksPerLoad: number
  private readonly meanBlockBytes: number

  /** Per class: its epoch, files served in it, files loadable in it, and its stocks and files on the way, this epoch's and the next's. */
  private readonly epochOfClass: Uint32Array
  private readonly servedOf: Uint32Array
  private readonly loadableOf: Uint32Array
  private readonly stockOf: FileId[][]
  private readonly nextStockOf: FileId[][]
  private readonly inFlightOf: Uint32Array
  private readonly nextInFlightOf: Uint32Array

  /** Per file: the epoch of its class it was last taken for (-1: never), and where it is. */
  private readonly takenFor: Int32Array
  private readonly where: Uint8Array

  /** Per block: whether a read of it is out, its files loadable now, and its files served and idle. */
  private readonly blockInFlight: Uint8Array
  private readonly loadableIn: Uint32Array
  private readonly servedIn: Uint32Array
  /**
   * Blocks whose last read lost files: readahead skips them until a class
   * of theirs rolls over (reading them ahead of need would only fail
   * again); a demand load may still take one, which charges a lost file
   * to its open.
   */
  private readonly failedBlocks = new Set<BlockId>()
  /** Blocks with files to read for this epoch, and blocks whose files are all served (readable for the next). */
  private readonly readableNow: BlockSet
  private readonly readableForNext: BlockSet
  /** Files that sit their class's epoch out, one for each exact repeat (`sitOut`): counted served, never served. */
  private readonly satOut = new Set<FileId>()
  /** Per class, repeats whose file to sit out is still on its way: the next to land for this epoch sits out. */
  private readonly owedSitOuts: Uint32Array
  /** Files let go out of memory outside a load (a stock's file that sat out): the caller frees their bytes (`takeDropped`). */
  private dropped: FileId[] = []
  residentBytes = 0

  constructor (readonly layout: SharedLayout, readonly options: SharedProtocolOptions) {
    const groups = layout.groups.length
    const blocks = layout.blocks.length
    this.random = new SeededRandom(options.seed ^ 0x5eed)
    this.blocksPerLoad = Math.max(1, Math.round(layout.chunkSize / layout.blockSize))
    this.meanBlockBytes = layout.totalBytes / Math.max(1, blocks)
    this.epochOfClass = new Uint32Array(groups)
    this.servedOf = new Uint32Array(groups)
    this.loadableOf = Uint32Array.from(layout.filesOfGroup, files => files.length)
    this.stockOf = layout.groups.map(() => [])
    this.nextStockOf = layout.groups.map(() => [])
    this.inFlightOf = new Uint32Array(groups)
    this.nextInFlightOf = new Uint32Array(groups)
    this.takenFor = new Int32Array(layout.files.length).fill(-1)
    this.where = new Uint8Array(layout.files.length)
    this.blockInFlight = new Uint8Array(blocks)
    this.loadableIn = Uint32Array.from(layout.blocks, block => block.files.length)
    this.servedIn = new Uint32Array(blocks)
    this.owedSitOuts = new Uint32Array(groups)
    this.readableNow = new BlockSet(blocks)
    this.readableForNext = new BlockSet(blocks)
    for (let block = 0; block < blocks; block++) this.readableNow.add(block as BlockId)
  }

  groupOf (file: FileId): number { return this.layout.groupOf[file] }
  /** The epoch a class is in: how many times it has rolled over. */
  epochOf (group: number): number { return this.epochOfClass[group] }
  private blockOf (file: FileId): BlockId { return this.layout.fileBlock[file] as BlockId }

  /**
   * Answers an open of `file`: a file of its class from the stock, a load,
   * or a wait; `exact`: the file itself (a loader that stat()ed the path
   * and trusts its size, `decideExact`).
   */
  open (file: FileId, { retry = false, exact = false }: { retry?: boolean, exact?: boolean } = {}): SharedOpenDecision {
    if (!retry) {
      this.counters.opens++
      if (exact) this.counters.exactOpens++
    }
    const decision = exact ? this.decideExact(file) : this.decide(this.groupOf(file), file)
    if (decision.kind === 'serve') this.noteMemory()
    countAnswer(this.counters, file, decision.kind === 'serve' ? decision.file : undefined, retry)
    return decision
  }

  private decide (group: number, file: FileId): SharedOpenDecision {
    if (this.stockOf[group].length > 0) return { kind: 'serve', file: this.takeFromStock(group) }
    if (this.inFlightOf[group] > 0) return { kind: 'wait', group }
    if (this.loadableOf[group] === 0) {
      // Every file of this class's epoch is served: this open is its next epoch's.
      this.rollOver(group)
      if (this.stockOf[group].length > 0) return { kind: 'serve', file: this.takeFromStock(group) }
      if (this.inFlightOf[group] > 0) return { kind: 'wait', group }
    }
    const first = this.chooseBlockFor(group)
    // Its loadable files all sit in blocks being read (taken there for another class's next epoch): wait for one.
    if (first === undefined) return { kind: 'wait', group }
    return { kind: 'load', plan: this.planLoad(first, this.options.memoryBytes, file) }
  }

  /**
   * The file itself: from its class's stock, or by a load of its block
   * that answers with it (the rest of the block placed as any load's).
   * One served this epoch already (to an open of another path) is served
   * again, read for its opener alone, and counted: exactness of the bytes
   * comes first for such a loader. It is one of the class's opens this
   * epoch, so another file of the class sits the epoch out (`sitOut`),
   * and the class's epoch still ends with the trainer's. An open of a
   * file whose class has served its whole epoch is the next epoch's.
   */
  private decideExact (file: FileId): SharedOpenDecision {
    const group = this.groupOf(file)
    const block = this.blockOf(file)
    if (this.where[file] === IN_FLIGHT) return { kind: 'wait', group }
    const forNextEpoch = this.where[file] === RESIDENT && this.takenFor[file] > this.epochOfClass[group]
    if ((this.isServed(file) || forNextEpoch) && this.epochIsOver(group)) {
      this.rollOver(group)
      return this.decideExact(file)
    }
    if (this.where[file] === RESIDENT) {
      const stock = forNextEpoch ? this.nextStockOf[group] : this.stockOf[group]
      stock.splice(stock.indexOf(file), 1)
      if (!forNextEpoch) {
        this.serve(file)
        return { kind: 'serve', file }
      }
      // Taken for the next epoch, so served in this one: a repeat. Its bytes serve it; the next epoch reads it anew.
      this.where[file] = IDLE
      this.residentBytes -= this.layout.files[file].size
      this.takenFor[file] = this.epochOfClass[group]
      this.servedIn[block]++
      this.refresh(block)
      this.repeat(group, file)
      return { kind: 'serve', file }
    }
    // Not while its block is being read: one read of a block at a time.
    if (this.blockInFlight[block] === 1) return { kind: 'wait', group }
    if (this.isLoadable(file)) return { kind: 'load', plan: this.planLoad(block, this.options.memoryBytes, file, file) }
    this.repeat(group, file)
    this.blockInFlight[block] = 1
    this.refresh(block)
    return { kind: 'load', plan: { id: this.nextPlanId++, blocks: [block], files: [file], bytes: 0, requester: file, answer: file, forNextEpoch: false, reread: true } }
  }

  /** An exact open of a file served (or sat out) this epoch: counted unless it sat out, and another file sits out for it. */
  private repeat (group: number, file: FileId): void {
    if (!this.satOut.delete(file)) this.counters.exactRepeats++
    this.sitOut(group)
  }

  /**
   * One file of the class's epoch is counted served without being served:
   * an exact repeat took its place among the trainer's opens. Left to
   * serve, it would answer the trainer's next pass, which would then end a
   * file later, and so every pass after it. A file not read yet if there
   * is one (no read wasted), else one in the stock (its bytes go); none
   * when all that is left is on its way.
   */
  private sitOut (group: number): void {
    const members = this.layout.filesOfGroup[group]
    const start = this.random.below(members.length)
    for (let i = 0; i < members.length; i++) {
      const member = members[(start + i) % members.length]
      if (this.isLoadable(member)) {
        this.sitOutLoadable(member)
        return
      }
    }
    const stock = this.stockOf[group]
    if (stock.length > 0) {
      const file = stock.splice(this.random.below(stock.length), 1)[0]
      this.serve(file)
      this.dropped.push(file)
      this.satOut.add(file)
    } else if (this.inFlightOf[group] > 0) {
      // All that is left is on its way: the first of it to land for this epoch sits out (`finishLoad`).
      this.owedSitOuts[group]++
    }
  }

  /**
   * Repeats that found all their class had left on its way: each takes a
   * file that came since (landed in the stock, given back, or loadable
   * again after a failed read).
   */
  private payOwedSitOuts (group: number): void {
    while (this.owedSitOuts[group] > 0) {
      const stock = this.stockOf[group]
      if (stock.length > 0) {
        const file = stock.splice(this.random.below(stock.length), 1)[0]
        this.serve(file)
        this.satOut.add(file)
        this.dropped.push(file)
      } else {
        const file = this.layout.filesOfGroup[group].find(member => this.isLoadable(member))
        if (file === undefined) return
        this.sitOutLoadable(file)
      }
      this.owedSitOuts[group]--
    }
  }

  /** A loadable file is counted served, never read. */
  private sitOutLoadable (file: FileId): void {
    const group = this.groupOf(file)
    const block = this.blockOf(file)
    this.takenFor[file] = this.epochOfClass[group]
    this.loadableOf[group]--
    this.loadableIn[block]--
    this.servedIn[block]++
    this.servedOf[group]++
    this.satOut.add(file)
    this.refresh(block)
  }

  /** Every file of the class's epoch is served (or failed, or sat out), and nothing of it is on its way. */
  private epochIsOver (group: number): boolean {
    return this.loadableOf[group] === 0 && this.stockOf[group].length === 0 && this.inFlightOf[group] === 0
  }

  /**
   * A load to start ahead of need, if memory has room for it: blocks for
   * this epoch while some have unread files, else for the next.
   */
  readahead (): SharedLoadPlan | undefined {
    const limit = this.options.memoryBytes * (1 - DEMAND_SHARE)
    const held = this.options.heldByOpens?.() ?? 0
    const free = limit - this.residentBytes - this.counters.inflightBytes
    const room = free - held
    // Not before a chunk's worth fits (or half the memory, when that is less), read as one load: loads of one
    // block each, started as soon as one fitted, made the served order less random (docs/design.md, "Shared chunks").
    const worthALoad = Math.min(this.meanBlockBytes * this.blocksPerLoad, limit / 2)
    if (room <= 0 || room < worthALoad) {
      // Held back by open files alone: a loader that keeps many open reads ahead less, and this says so.
      if (held > 0 && free >= worthALoad) this.counters.readaheadHeldBack++
      return undefined
    }
    const first = this.chooseBlock()
    if (first === undefined || this.placeableBytes(first) > room) return undefined
    this.counters.readaheadLoads++
    return this.planLoad(first, limit - held)
  }

  /**
   * Of a few blocks not being read and not failed, drawn from those with
   * files to read now (else for the next epoch): the one worth most, if
   * it is worth anything.
   */
  private chooseBlock (): BlockId | undefined {
    for (const pool of [this.readableNow, this.readableForNext]) {
      let best: BlockId | undefined
      let bestScore = 0
      for (let i = 0; i < CHOICES && pool.size > 0; i++) {
        const block = pool.sample(this.random)
        if (this.failedBlocks.has(block)) continue
        const score = this.worth(block)
        if (score > bestScore) { best = block; bestScore = score }
      }
      if (best !== undefined) return best
    }
    return undefined
  }

  /** Of a few blocks holding a loadable file of `group`, not being read: the one worth most. */
  private chooseBlockFor (group: number): BlockId | undefined {
    const members = this.layout.filesOfGroup[group]
    const start = this.random.below(members.length)
    let best: BlockId | undefined
    let bestScore = -1
    let seen = 0
    for (let i = 0; i < members.length && seen < CHOICES; i++) {
      const file = members[(start + i) % members.length]
      const block = this.blockOf(file)
      if (!this.isLoadable(file) || this.blockInFlight[block] === 1) continue
      seen++
      const score = this.worth(block)
      if (score > bestScore) { best = block; bestScore = score }
    }
    return best
  }

  /**
   * What reading a block is worth: per file it would place, how soon its
   * class runs dry (the part of its epoch still to serve over what it has
   * in stock or on the way). A file for a next epoch is worth little, but
   * more than nothing.
   */
  private worth (block: BlockId): number {
    let score = 0
    for (const file of this.layout.blocks[block].files) {
      const group = this.groupOf(file)
      if (this.isLoadable(file)) score += (this.layout.filesOfGroup[group].length - this.servedOf[group]) / (1 + this.stockOf[group].length + this.inFlightOf[group])
      else if (this.readableForNextEpoch(file)) score += 1 / (1 + this.nextStockOf[group].length + this.nextInFlightOf[group])
    }
    return score
  }

  private isLoadable (file: FileId): boolean {
    return this.where[file] === IDLE && this.takenFor[file] < this.epochOfClass[this.groupOf(file)]
  }

  private isServed (file: FileId): boolean {
    return this.where[file] === IDLE && this.takenFor[file] === this.epochOfClass[this.groupOf(file)]
  }

  /**
   * A served file is taken for its class's next epoch only once nothing of
   * the class is left to read in this one: taken earlier, it would hold
   * memory for the rest of the epoch, memory the classes still reading need.
   */
  private readableForNextEpoch (file: FileId): boolean {
    return this.isServed(file) && this.loadableOf[this.groupOf(file)] === 0
  }

  private placeableBytes (block: BlockId): number {
    let bytes = 0
    for (const file of this.layout.blocks[block].files) if (this.isLoadable(file) || this.readableForNextEpoch(file)) bytes += this.layout.files[file].size
    return bytes
  }

  /**
   * A load of `first` and as many more blocks (best of a few each) as make
   * a chunk's worth and fit: each block's loadable files for this epoch of
   * their class, its served ones for the next, as long as memory stays
   * within `limit`. A demand load's answer (a loadable file of the
   * requester's class in `first`) is always taken: it goes to its opener,
   * outside the budget.
   */
  private planLoad (first: BlockId, limit: number, requester?: FileId, exactAnswer?: FileId): SharedLoadPlan {
    let room = limit - this.residentBytes - this.counters.inflightBytes
    const requesterGroup = requester === undefined ? undefined : this.groupOf(requester)
    const answer = exactAnswer ?? (requesterGroup === undefined ? undefined : this.layout.blocks[first].files.find(file => this.groupOf(file) === requesterGroup && this.isLoadable(file)))
    const blocks: BlockId[] = []
    const files: FileId[] = []
    let bytes = 0
    let allNext = true
    for (let block: BlockId | undefined = first; block !== undefined; block = blocks.length < this.blocksPerLoad ? this.chooseBlock() : undefined) {
      if (blocks.length > 0 && this.placeableBytes(block) > room) break
      blocks.push(block)
      for (const file of this.filesToTake(block, room, answer)) {
        if (file !== answer) {
          room -= this.layout.files[file].size
          bytes += this.layout.files[file].size
        }
        const group = this.groupOf(file)
        if (this.isLoadable(file)) {
          allNext = false
          this.takenFor[file] = this.epochOfClass[group]
          this.loadableOf[group]--
          this.loadableIn[block]--
          this.inFlightOf[group]++
        } else {
          this.takenFor[file] = this.epochOfClass[group] + 1
          this.servedIn[block]--
          this.nextInFlightOf[group]++
        }
        this.where[file] = IN_FLIGHT
        files.push(file)
      }
      this.blockInFlight[block] = 1
      this.refresh(block)
    }
    this.counters.inflightBytes += bytes
    return { id: this.nextPlanId++, blocks, files, bytes, requester, answer, forNextEpoch: allNext && files.length > 0 }
  }

  /**
   * The files of `block` a load takes with `room` bytes to spare: one run of
   * its files placeable now, each that fits, from the answer on in the
   * answer's block (the answer is always taken: it goes to its opener).
   * A block is one read from the first file taken to the last, so the run
   * ends at the first file not taken: a file inside it would be read for
   * nothing.
   */
  private filesToTake (block: BlockId, room: number, answer?: FileId): FileId[] {
    const members = this.layout.blocks[block].files
    const from = answer === undefined ? -1 : members.indexOf(answer)
    const taken: FileId[] = []
    for (const file of members.slice(Math.max(0, from))) {
      const size = this.layout.files[file].size
      const takes = (this.isLoadable(file) || this.readableForNextEpoch(file)) && (file === answer || size <= room)
      if (!takes) {
        if (taken.length > 0) break
        continue
      }
      if (file !== answer) room -= size
      taken.push(file)
    }
    return taken
  }

  /**
   * Places a finished load. `delivered` holds the plan's files the source
   * could read; the others are loadable again (or served, if taken for a
   * next epoch), unless it is the answer to the open that asked: that open
   * gets an error and the file counts as served, so every readable file is
   * still served exactly once per epoch.
   */
  finishLoad (plan: SharedLoadPlan, delivered: ReadonlySet<FileId>): SharedLoadOutcome {
    this.counters.inflightBytes -= plan.bytes
    this.counters.chunkLoads++
    if (plan.reread === true) return this.finishReread(plan, delivered)
    // Every class of the blocks read: an open may wait on a block for a file this load did not take (see `decide`).
    const wakes = new Set<number>()
    for (const block of plan.blocks) {
      this.blockInFlight[block] = 0
      for (const file of this.layout.blocks[block].files) wakes.add(this.groupOf(file))
      if (plan.files.some(file => this.blockOf(file) === block && !delivered.has(file))) this.failedBlocks.add(block)
      else this.failedBlocks.delete(block)
    }
    const placed: FileId[] = []
    const placedForNextEpoch: FileId[] = []
    for (const file of plan.files) {
      const group = this.groupOf(file)
      const block = this.blockOf(file)
      // Taken before its class was reset (`resetClass`): this epoch's now.
      if (this.takenFor[file] < this.epochOfClass[group]) this.takenFor[file] = this.epochOfClass[group]
      const forThisEpoch = this.takenFor[file] === this.epochOfClass[group]
      if (forThisEpoch) this.inFlightOf[group]--
      else this.nextInFlightOf[group]--
      if (!delivered.has(file)) {
        this.counters.failedFiles++
        this.where[file] = IDLE
        this.takenFor[file]--
        if (this.isLoadable(file)) { this.loadableOf[group]++; this.loadableIn[block]++ } else this.servedIn[block]++
        continue
      }
      this.where[file] = RESIDENT
      this.residentBytes += this.layout.files[file].size
      if (file === plan.answer) continue
      ;(forThisEpoch ? this.stockOf : this.nextStockOf)[group].push(file)
      ;(forThisEpoch ? placed : placedForNextEpoch).push(file)
    }
    this.counters.filesLoaded += placed.length + placedForNextEpoch.length
    // A block is one read, from the first file taken of it to the last: what lies between and is not taken is read for nothing.
    const taken = new Set(plan.files)
    for (const block of plan.blocks) {
      const files = this.layout.blocks[block].files
      const at = files.map(file => taken.has(file))
      for (let i = at.indexOf(true); i >= 0 && i <= at.lastIndexOf(true); i++) {
        if (at[i]) continue
        this.counters.wastedFiles++
        this.counters.wastedBytes += this.layout.files[files[i]].size
      }
    }

    let served: FileId | undefined
    const { answer } = plan
    if (answer !== undefined && delivered.has(answer)) {
      this.serve(answer)
      served = answer
      if (answer !== plan.requester) this.counters.redirects++
    } else if (answer !== undefined) {
      // Charged to this open: it counts as served, and the open gets an error.
      const group = this.groupOf(answer)
      const block = this.blockOf(answer)
      this.takenFor[answer] = this.epochOfClass[group]
      this.loadableOf[group]--
      this.loadableIn[block]--
      this.servedIn[block]++
      this.servedOf[group]++
      this.counters.failedOpens++
    }
    for (const block of plan.blocks) this.refresh(block)
    for (const group of wakes) this.payOwedSitOuts(group)
    this.noteMemory()
    return { placed: placed.filter(file => !this.satOut.has(file)), placedForNextEpoch, served, wakes: [...wakes] }
  }

  /** An exact repeat's read: its file goes to its opener, or the open fails; nothing else changes. */
  private finishReread (plan: SharedLoadPlan, delivered: ReadonlySet<FileId>): SharedLoadOutcome {
    const block = plan.blocks[0]
    this.blockInFlight[block] = 0
    const readable = delivered.has(plan.answer!)
    if (readable) this.failedBlocks.delete(block)
    else { this.failedBlocks.add(block); this.counters.failedFiles++; this.counters.failedOpens++ }
    this.refresh(block)
    const wakes = [...new Set(this.layout.blocks[block].files.map(file => this.groupOf(file)))]
    return { placed: [], placedForNextEpoch: [], served: readable ? plan.answer : undefined, wakes }
  }

  /**
   * A file served this epoch whose opener went away before it got it (a
   * trainer killed mid-open): back to its class's stock, so the epoch still
   * serves it once. 'placed': the caller keeps its bytes in memory again;
   * 'dropped': its bytes go, because its class has moved on (a new epoch,
   * run or reset: the file is that epoch's to load like any other), or
   * because they do not fit the budget beside what memory holds (a demand
   * load's answer is its opener's, outside it): it is loadable again.
   */
  returnUnserved (file: FileId): 'placed' | 'dropped' {
    const group = this.groupOf(file)
    if (this.where[file] !== IDLE || this.takenFor[file] !== this.epochOfClass[group] || this.satOut.has(file)) return 'dropped'
    this.counters.returnedFiles++
    const block = this.blockOf(file)
    const size = this.layout.files[file].size
    if (this.residentBytes + this.counters.inflightBytes + size > this.options.memoryBytes) {
      this.takenFor[file]--
      this.servedOf[group]--
      this.servedIn[block]--
      this.loadableOf[group]++
      this.loadableIn[block]++
      this.refresh(block)
      this.payOwedSitOuts(group)
      return 'dropped'
    }
    if (this.owedSitOuts[group] > 0) {
      // A repeat is owed a file that sits out: this one, which nobody got.
      this.owedSitOuts[group]--
      this.satOut.add(file)
      return 'dropped'
    }
    this.where[file] = RESIDENT
    this.residentBytes += this.layout.files[file].size
    this.servedOf[group]--
    this.servedIn[block]--
    this.stockOf[group].push(file)
    this.refresh(block)
    this.noteMemory()
    return 'placed'
  }

  /**
   * A failed open was charged with an unreadable file (a demand load's
   * answer), but its opener must not count (an orphaned worker): the file
   * is this epoch's to load, or charge to another open, again.
   */
  uncharge (file: FileId): void {
    const group = this.groupOf(file)
    if (!this.isServed(file) || this.satOut.has(file)) return
    const block = this.blockOf(file)
    this.takenFor[file]--
    this.servedOf[group]--
    this.servedIn[block]--
    this.loadableOf[group]++
    this.loadableIn[block]++
    this.counters.failedOpens--
    this.refresh(block)
    this.payOwedSitOuts(group)
  }

  /**
   * A new training run begins: every class starts a fresh epoch. A class
   * whose epoch is over just rolls over, as its next open would have made
   * it, keeping what was read ahead for its next epoch; any other was left
   * mid-epoch by the run that ended, and is reset. Gives the files dropped
   * from memory (the caller frees their bytes).
   */
  startNewRun (): FileId[] {
    const dropped: FileId[] = []
    for (let group = 0; group < this.layout.groups.length; group++) {
      if (this.epochIsOver(group)) this.rollOver(group)
      else dropped.push(...this.resetClass(group))
    }
    this.counters.newRuns++
    this.noteMemory()
    return dropped
  }

  /** Starts a fresh epoch for every class (`redirfs reset`); gives the files dropped from memory. */
  reset (): FileId[] {
    const dropped: FileId[] = []
    for (let group = 0; group < this.layout.groups.length; group++) dropped.push(...this.resetClass(group))
    this.counters.resets++
    this.noteMemory()
    return dropped
  }

  /**
   * One class starts afresh: its stocks are dropped, and every file not on
   * its way is loadable. Its epoch moves two on, past what was taken for
   * its next one: a file still on its way lands as the new epoch's.
   */
  private resetClass (group: number): FileId[] {
    const dropped = [...this.stockOf[group], ...this.nextStockOf[group]]
    this.stockOf[group] = []
    this.nextStockOf[group] = []
    this.epochOfClass[group] += 2
    this.counters.rollovers++
    this.owedSitOuts[group] = 0
    this.servedOf[group] = 0
    this.inFlightOf[group] += this.nextInFlightOf[group]
    this.nextInFlightOf[group] = 0
    let loadable = 0
    for (const file of this.layout.filesOfGroup[group]) {
      const block = this.blockOf(file)
      this.satOut.delete(file)
      this.failedBlocks.delete(block)
      if (this.where[file] === IN_FLIGHT) continue
      if (this.where[file] === RESIDENT) {
        this.where[file] = IDLE
        this.residentBytes -= this.layout.files[file].size
        this.loadableIn[block]++
      } else if (this.takenFor[file] >= this.epochOfClass[group] - 2) {
        // Served (or charged, or sat out) in the epoch that ends.
        this.servedIn[block]--
        this.loadableIn[block]++
      }
      loadable++
      this.refresh(block)
    }
    this.loadableOf[group] = loadable
    return dropped
  }

  /** The files let go out of memory outside a load, reset or new run: the caller frees their bytes. */
  takeDropped (): FileId[] {
    const dropped = this.dropped
    this.dropped = []
    return dropped
  }

  /** A random file of the class's stock, served. */
  private takeFromStock (group: number): FileId {
    const stock = this.stockOf[group]
    const index = this.random.below(stock.length)
    const file = stock[index]
    stock[index] = stock[stock.length - 1]
    stock.pop()
    this.serve(file)
    return file
  }

  private serve (file: FileId): void {
    const block = this.blockOf(file)
    this.where[file] = IDLE
    this.residentBytes -= this.layout.files[file].size
    this.servedOf[this.groupOf(file)]++
    this.servedIn[block]++
    this.refresh(block)
  }

  /** Ends a class's epoch: its served files are loadable again, and what was taken for the next epoch is now this one's. */
  private rollOver (group: number): void {
    this.counters.rollovers++
    this.owedSitOuts[group] = 0
    for (const file of this.layout.filesOfGroup[group]) this.satOut.delete(file)
    this.epochOfClass[group]++
    this.servedOf[group] = 0
    const stock = this.stockOf[group]
    this.stockOf[group] = this.nextStockOf[group]
    this.nextStockOf[group] = stock
    this.inFlightOf[group] = this.nextInFlightOf[group]
    this.nextInFlightOf[group] = 0
    for (const file of this.layout.filesOfGroup[group]) {
      this.failedBlocks.delete(this.blockOf(file))
      if (!this.isLoadable(file)) continue
      const block = this.blockOf(file)
      this.loadableOf[group]++
      this.loadableIn[block]++
      this.servedIn[block]--
      this.refresh(block)
    }
  }

  /** Keeps the block's place in the sets readahead draws from. */
  private refresh (block: BlockId): void {
    const idle = this.blockInFlight[block] === 0
    this.readableNow.toggle(block, idle && this.loadableIn[block] > 0)
    this.readableForNext.toggle(block, idle && this.loadableIn[block] === 0 && this.servedIn[block] === this.layout.blocks[block].files.length)
  }

  private noteMemory (): void { noteMemory(this.counters, this.residentBytes) }
}

/** A set of block ids that can also draw one at random, in constant time. */
class BlockSet {
  private readonly items: BlockId[] = []
  private readonly position: Int32Array

  constructor (blocks: number) {
    this.position = new Int32Array(blocks).fill(-1)
  }

  get size (): number { return this.items.length }

  add (block: BlockId): void {
    if (this.position[block] !== -1) return
    this.position[block] = this.items.length
    this.items.push(block)
  }

  delete (block: BlockId): void {
    const at = this.position[block]
    if (at === -1) return
    const last = this.items.pop()!
    if (last !== block) { this.items[at] = last; this.position[last] = at }
    this.position[block] = -1
  }

  toggle (block: BlockId, member: boolean): void {
    if (member) this.add(block)
    else this.delete(block)
  }

  sample (random: SeededRandom): BlockId { return this.items[random.below(this.items.length)] }
}
