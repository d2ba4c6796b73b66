/**
 * The engine for the shared layout (docs/design.md, "Shared chunks"): it
 * runs the shared protocol's decisions against a chunk source, as
 * engine.ts does the class protocol's, on one node.
 *
 * An open asks the protocol; a 'wait' parks it until a load bringing a
 * file of its class ends, a 'load' runs one; after every answer and every
 * load it asks for readahead, which keeps memory full of the blocks that
 * feed the classes closest to running dry. Nothing here blocks the event
 * loop. A cluster mounts with the class layout (engine.ts): homes, mirrors
 * and takeover are not built for classes that share chunks.
 */
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { ChunkRequest, ChunkSource } from '../chunks/source'
import type { FileId } from '../redirect/layout'
import type { SharedLoadPlan, SharedOpenDecision, SharedProtocol } from '../redirect/shared-protocol'
import type { MountStats } from '../stats'
import { OrphanedOpen, UnreadableSample, type OpenOptions, type ServedFile } from './engine'
import { ResidentBytes, Waiters } from './memory'

/** Readahead loads out at once: enough to keep a directory's file-by-file reads busy, few enough to keep the choice of blocks fresh. */
const READAHEAD_LOADS = 4

export class SharedEngine {
  private readonly resident: ResidentBytes
  /** Opens parked per class. */
  private readonly waiters = new Waiters<number>()
  private readonly loadsInFlight = new Set<Promise<unknown>>()
  private readaheadOut = 0

  constructor (
    private readonly protocol: SharedProtocol,
    private readonly source: ChunkSource,
    /** The pool the source reads into: bytes nobody will be served go back to it. */
    private readonly buffers: SampleBuffers,
    private readonly log: Logger
  ) {
    this.resident = new ResidentBytes('class stocks', protocol.layout.files.length, buffers)
  }

  /** Answers an open of a sample file with the bytes it is bound to; `exact`: the file itself. */
  async open (file: FileId, options: OpenOptions = {}): Promise<ServedFile> {
    try {
      return { ...await this.answer(file, options.exact === true, options.wanted), generation: this.generation }
    } catch (err) {
      if (err instanceof UnreadableSample) throw new UnreadableSample(err.message, err.charged, this.generation)
      throw err
    }
  }

  /** Which epoch state this is: it moves on when a new run begins or a reset starts every class afresh (Engine.generation). */
  get generation (): number { return this.protocol.counters.newRuns + this.protocol.counters.resets }

  /** How many runs have begun a new epoch here: the adapter checks whether one began while an open waited. */
  get newRuns (): number { return this.protocol.counters.newRuns }

  private async answer (file: FileId, exact: boolean, wanted?: () => boolean): Promise<ServedFile> {
    for (let retry = false; ; retry = true) {
      let decision: SharedOpenDecision
      try {
        decision = this.protocol.open(file, { retry, exact })
      } finally {
        this.freeDropped()
      }
      if (decision.kind === 'serve') {
        const served = { file: decision.file, bytes: this.resident.take(decision.file) }
        if (wanted !== undefined && !wanted()) {
          this.giveBack(served)
          throw new OrphanedOpen()
        }
        this.startReadahead()
        return served
      }
      if (decision.kind === 'wait') {
        await this.waiters.wait(decision.group)
        continue
      }
      const outcome = await this.runLoad(decision.plan, wanted)
      if ('file' in outcome) return outcome
      if ('unwanted' in outcome) throw new OrphanedOpen()
      throw new UnreadableSample(`cannot read the data for ${this.protocol.layout.files[file].path}`, outcome.charged)
    }
  }

  /**
   * Reads a load's files, places them, wakes the opens waiting on their
   * classes; for a demand load, its answer, or the file a failed one was
   * charged with, or that its opener no longer wanted it.
   */
  private async runLoad (plan: SharedLoadPlan, wanted?: () => boolean): Promise<ServedFile | { charged?: FileId } | { unwanted: true }> {
    const delivered = await this.read(plan)
    const outcome = this.protocol.finishLoad(plan, new Set(delivered.keys()))
    for (const file of [...outcome.placed, ...outcome.placedForNextEpoch]) {
      this.resident.set(file, delivered.get(file)!)
      delivered.delete(file)
    }
    let served: ServedFile | { charged?: FileId } | { unwanted: true } = { charged: plan.reread === true ? undefined : plan.answer }
    if (outcome.served !== undefined) {
      served = { file: outcome.served, bytes: delivered.get(outcome.served)! }
      delivered.delete(outcome.served)
    }
    if (plan.requester !== undefined && wanted !== undefined && !wanted()) {
      // Before the wakes below: an answer nobody wants goes back before the opens waiting on its class decide.
      if ('file' in served) this.giveBack(served)
      else if (plan.answer !== undefined && plan.reread !== true) this.protocol.uncharge(plan.answer)
      served = { unwanted: true }
    }
    // Read but neither placed nor served (a load overtaken by a reset): their buffers serve the next load.
    for (const bytes of delivered.values()) this.buffers.give(bytes)
    this.freeDropped()
    for (const group of outcome.wakes) this.waiters.wake(group)
    // Let the woken opens retry first: readahead must not take their files from under them.
    setImmediate(() => this.startReadahead())
    return served
  }

  /**
   * A load's files, from the source: a directory reads file by file,
   * whatever block a file is in, so one request; a pack reads each block
   * with one read of its chunk, from the first file taken to the last.
   */
  private async read (plan: SharedLoadPlan): Promise<Map<FileId, Buffer>> {
    const { layout } = this.protocol
    const requests: ChunkRequest[] = this.source.readsFileByFile
      ? [{ pc: plan.blocks[0], files: plan.files, forOpener: plan.answer }]
      : plan.blocks.map(block => {
        const files = plan.files.filter(file => layout.fileBlock[file] === block)
        return { pc: layout.filePc[layout.blocks[block].files[0]], files, forOpener: files.includes(plan.answer as FileId) ? plan.answer : undefined, load: plan.id }
      }).filter(request => request.files.length > 0)
    const delivered = new Map<FileId, Buffer>()
    await Promise.all(requests.map(async request => {
      try {
        for (const [file, bytes] of await this.source.fetch(request)) delivered.set(file, bytes)
      } catch (err) {
        this.log.error({ chunk: request.pc, err: (err as Error).message }, 'chunk load failed')
      }
    }))
    return delivered
  }

  private startReadahead (): void {
    while (this.readaheadOut < READAHEAD_LOADS) {
      const plan = this.protocol.readahead()
      if (plan === undefined) return
      this.readaheadOut++
      const load = this.runLoad(plan)
        .catch(err => this.log.error({ err: (err as Error).message }, 'readahead failed'))
        .finally(() => { this.readaheadOut-- })
      this.loadsInFlight.add(load)
      void load.finally(() => this.loadsInFlight.delete(load))
    }
  }

  /** A new training run begins: every class starts a fresh epoch (SharedProtocol.startNewRun); gives how many files waiting in memory were dropped. */
  startNewRun (): number {
    const dropped = this.protocol.startNewRun()
    for (const file of dropped) this.resident.drop(file)
    return dropped.length
  }

  /** Starts a fresh epoch for every class; frees the bytes of files that were waiting in memory. */
  reset (): number {
    const dropped = this.protocol.reset()
    for (const file of dropped) this.resident.drop(file)
    this.log.info({ dropped: dropped.length }, 'epoch state reset')
    return dropped.length
  }

  /** A failed answer whose opener must not count (UnreadableSample.charged): its file is charged to another open. */
  uncharge (file: FileId, generation?: number): void {
    if (generation === undefined || generation === this.generation) this.protocol.uncharge(file)
  }

  /** An answer whose opener went away before it got it: the file waits in its class's stock for another open. */
  giveBack (served: ServedFile): void {
    if (served.generation !== undefined && served.generation !== this.generation) {
      this.buffers.give(served.bytes)
      return
    }
    if (this.protocol.returnUnserved(served.file) === 'placed') {
      this.resident.set(served.file, served.bytes)
      this.waiters.wake(this.protocol.groupOf(served.file))
    } else {
      this.buffers.give(served.bytes)
    }
  }

  /** Frees the bytes of files the protocol let go outside a load (a stock's file that sat an epoch out). */
  private freeDropped (): void {
    for (const file of this.protocol.takeDropped()) this.resident.drop(file)
  }

  /** Waits for readahead loads to end (for a clean shutdown). */
  async drain (): Promise<void> {
    while (this.loadsInFlight.size > 0) await Promise.allSettled([...this.loadsInFlight])
  }

  stats (): Pick<MountStats, 'protocol' | 'source'> {
    return { protocol: { ...this.protocol.counters }, source: this.source.stats() }
  }
}
