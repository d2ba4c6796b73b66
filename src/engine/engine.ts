/**
 * The engine runs the protocol's decisions against a chunk source.
 *
 * It owns what the pure protocol leaves out: the bytes of files in memory,
 * the loads in flight, and the opens waiting on them. An open asks the
 * protocol; a 'wait' parks it until the VC's load ends, a 'load' runs one;
 * after every serve and every load the engine asks for readahead, so loads
 * run ahead of need without the trainer waiting. Nothing here blocks the
 * event loop: FUSE callbacks on the single JS thread depend on that.
 */
import type { Logger } from 'pino'
import type { ChunkSource } from '../chunks/source'
import { RedirfsError } from '../errors'
import type { FileId, VcId } from '../redirect/layout'
import type { LoadPlan, Protocol } from '../redirect/protocol'

export interface ServedFile {
  /** The file whose bytes these are (differs from the opened one when redirected). */
  readonly file: FileId
  readonly bytes: Buffer
}

export class Engine {
  private readonly resident = new Map<FileId, Buffer>()
  private readonly waiters = new Map<VcId, (() => void)[]>()
  private readonly loadsInFlight = new Set<Promise<unknown>>()

  constructor (
    readonly protocol: Protocol,
    private readonly source: ChunkSource,
    private readonly log: Logger
  ) {}

  /** Answers an open of a sample file with the bytes it is bound to. */
  async open (file: FileId): Promise<ServedFile> {
    for (let retry = false; ; retry = true) {
      const decision = this.protocol.open(file, retry)
      if (decision.kind === 'serve') {
        const bytes = this.takeResident(decision.file)
        this.startReadahead(this.protocol.vcOf(file))
        return { file: decision.file, bytes }
      }
      if (decision.kind === 'wait') {
        await new Promise<void>(resolve => this.waiters.set(decision.vc, [...(this.waiters.get(decision.vc) ?? []), resolve]))
        continue
      }
      if (decision.kind === "reclaim") throw new Error("todo")
      const served = await this.runLoad(decision.plan)
      if (served === undefined) {
        throw new RedirfsError(`cannot read the data for ${this.protocol.layout.files[file].path}`, 'EIO')
      }
      return served
    }
  }

  /** Loads a chunk, places it, wakes the opens waiting on its VC. */
  private async runLoad (plan: LoadPlan): Promise<ServedFile | undefined> {
    let delivered: Map<FileId, Buffer>
    try {
      delivered = await this.source.fetch({ pc: plan.pc, files: plan.files })
    } catch (err) {
      this.log.error({ pc: plan.pc, err: (err as Error).message }, 'chunk load failed')
      delivered = new Map()
    }
    const outcome = this.protocol.finishLoad(plan, new Set(delivered.keys()))
    for (const file of outcome.placed) this.resident.set(file, delivered.get(file)!)
    let served: ServedFile | undefined
    if (outcome.served !== undefined) {
      const bytes = this.resident.get(outcome.served) ?? delivered.get(outcome.served)!
      this.resident.delete(outcome.served)
      served = { file: outcome.served, bytes }
    }
    this.wake(plan.vc)
    // Let the woken opens retry first: readahead must not take the VC from under them.
    setImmediate(() => this.startReadahead(plan.vc))
    return served
  }

  private takeResident (file: FileId): Buffer {
    const bytes = this.resident.get(file)
    if (bytes === undefined) throw new Error(`protocol served file ${file} but its bytes are not in memory`)
    this.resident.delete(file)
    return bytes
  }

  private wake (vc: VcId): void {
    const waiting = this.waiters.get(vc)
    if (waiting === undefined) return
    this.waiters.delete(vc)
    for (const resume of waiting) resume()
  }

  private startReadahead (vc: VcId): void {
    const plan = this.protocol.readahead(vc)
    if (plan === undefined) return
    const load = this.runLoad(plan).catch(err => this.log.error({ err: (err as Error).message }, 'readahead failed'))
    this.loadsInFlight.add(load)
    void load.finally(() => this.loadsInFlight.delete(load))
  }

  /** Starts a fresh epoch everywhere; frees the bytes of files that were waiting in memory. */
  reset (): number {
    const dropped = this.protocol.reset()
    for (const file of dropped) this.resident.delete(file)
    this.log.info({ dropped: dropped.length }, 'epoch state reset')
    return dropped.length
  }

  /** Waits for readahead loads to end (for a clean shutdown). */
  async drain (): Promise<void> {
    while (this.loadsInFlight.size > 0) await Promise.allSettled([...this.loadsInFlight])
  }

  stats (): Record<string, unknown> {
    return { protocol: { ...this.protocol.counters }, source: this.source.stats() }
  }
}
