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
import { EpochEngine, OrphanedOpen, UnreadableSample, type ServedFile } from './epoch-engine'
import { Waiters } from './memory'

/** Readahead loads out at once: enough to keep a directory's file-by-file reads busy, few enough to keep the choice of blocks fresh. */
const READAHEAD_LOADS = 4

export class SharedEngine extends EpochEngine {
  /** Opens parked per class. */
  private readonly waiters = new Waiters<number>()
  private readaheadOut = 0

  constructor (private readonly protocol: SharedProtocol, source: ChunkSource, buffers: SampleBuffers, log: Logger) {
    super(protocol, protocol.layout.files.length, 'class stocks', source, buffers, log)
  }

  protected wakeFor (file: FileId): void { this.waiters.wake(this.protocol.groupOf(file)) }

  protected async answer (file: FileId, exact: boolean, wanted?: () => boolean): Promise<ServedFile> {
    for (let retry = false; ; retry = true) {
      // An opener gone (a worker of a run that ended) decides nothing more: its retry would count in the new run's epoch.
      if (retry && wanted !== undefined && !wanted()) throw new OrphanedOpen()
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
      this.track(this.runLoad(plan)
        .catch(err => this.log.error({ err: (err as Error).message }, 'readahead failed'))
        .finally(() => { this.readaheadOut-- }))
    }
  }
}
