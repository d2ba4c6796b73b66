/**
 * The engine runs the protocol's decisions against a chunk source.
 *
 * It owns what the pure protocol leaves out: the bytes of files in memory,
 * the loads in flight, and the opens waiting on them. An open asks the
 * protocol; a 'wait' parks it until the VC's load ends, a 'load' runs one;
 * after every serve and every load the engine asks for readahead, so loads
 * run ahead of need without the trainer waiting. Nothing here blocks the
 * event loop: FUSE callbacks on the single JS thread depend on that.
 *
 * In a cluster the engine is the home side: it also answers other nodes'
 * opens (`serveRequest`, with the opportunistic batch) and carries out the
 * protocol's reclaims through the `Reclaimer` the cluster gives it.
 */
import type { Logger } from 'pino'
import type { ChunkSource } from '../chunks/source'
import { FsError } from '../errors'
import type { FileId, NodeId, VcId } from '../redirect/layout'
import type { ServedNotice } from '../redirect/mirror'
import type { LoadPlan, MirrorReport, OpenDecision, Protocol, ReclaimPlan, ReclaimReport, StandbyUpdate } from '../redirect/protocol'
import type { Adoption } from '../redirect/takeover'
import { EpochEngine, OrphanedOpen, UnreadableSample, type ServedFile } from './epoch-engine'
import { Waiters } from './memory'
import type { SampleBuffers } from '../chunks/sample-buffers'

export { OrphanedOpen, UnreadableSample, type OpenOptions, type ServedFile } from './epoch-engine'

// Thrown by the protocol's open; the cluster's callers tell it apart from a file's error.
export { NotOwnedHere } from '../redirect/protocol'

/** Asks the holders of a reclaim; the bytes of a returned file come with it. */
export type Reclaimer = (plan: ReclaimPlan) => Promise<{ reports: ReclaimReport[], returned?: ServedFile }>

/** The answer to another node's open: its file first, then the batch. */
export interface RequestAnswer {
  readonly served?: ServedFile
  readonly batch: ServedFile[]
  readonly batchNumber: number
  readonly vcEpoch: number
}

export class Engine extends EpochEngine {
  private readonly waiters = new Waiters()

  /** `reclaimer`: a cluster's; a single node never ships files, so never reclaims. */
  constructor (
    private readonly protocol: Protocol,
    source: ChunkSource,
    buffers: SampleBuffers,
    log: Logger,
    private readonly reclaimer?: Reclaimer
  ) {
    super(protocol, protocol.layout.files.length, 'home slots', source, buffers, log)
  }

  /**
   * Answers another node's open of `file`, then ships it what is in memory
   * of the same VC and fits its mirror. An unreadable file is an answer
   * too (no `served`), not an error.
   */
  async serveRequest (file: FileId, requester: MirrorReport): Promise<RequestAnswer> {
    const vc = this.protocol.vcOf(file)
    let served: ServedFile
    try {
      served = await this.answerFor(file, requester)
    } catch (err) {
      if (!(err instanceof FsError)) throw err
      return { batch: [], batchNumber: 0, vcEpoch: this.protocol.epochOf(vc) }
    }
    const { files, batch } = this.protocol.home.shipBatch(vc, requester)
    return { served, batch: files.map(id => ({ file: id, bytes: this.takeResident(id) })), batchNumber: batch, vcEpoch: this.protocol.epochOf(vc) }
  }

  protected async answer (file: FileId, exact: boolean, wanted?: () => boolean): Promise<ServedFile> {
    return await this.answerFor(file, undefined, exact, wanted)
  }

  protected wakeFor (file: FileId): void { this.wake(this.protocol.vcOf(file)) }

  /** An open's answer: this node's own (no `requester`), or another node's. */
  private async answerFor (file: FileId, requester?: MirrorReport, exact = false, wanted?: () => boolean): Promise<ServedFile> {
    let reclaimed: VcId | undefined // a reclaim that got nothing back: its holders' answers are fresh for this one decision
    for (let retry = false; ; retry = true) {
      // An opener gone (a worker of a run that ended) decides nothing more: its retry would count in the new run's epoch.
      if (retry && wanted !== undefined && !wanted()) throw new OrphanedOpen()
      let decision: OpenDecision
      try {
        decision = this.protocol.open(file, { retry, requester, exact, holdersConfirmed: reclaimed !== undefined })
      } finally {
        this.freeDropped()
        // Only now: the opens parked on the VC decide after this one. Even if the VC is no longer this node's (it was
        // fenced while it reclaimed), or they would wait for good.
        if (reclaimed !== undefined) this.wake(reclaimed)
      }
      reclaimed = undefined
      if (decision.kind === 'serve') {
        const served = { file: decision.file, bytes: this.takeResident(decision.file) }
        if (wanted !== undefined && !wanted()) {
          this.giveBack(served)
          throw new OrphanedOpen()
        }
        this.startReadahead(this.protocol.vcOf(file))
        return served
      }
      if (decision.kind === 'wait') {
        await this.waiters.wait(decision.vc)
        continue
      }
      if (decision.kind === 'reclaim') {
        const outcome = await this.askHolders(decision.plan)
        // From the holders' answers to the next decision, no await: nothing else decides for the VC in between.
        const returned = this.protocol.home.finishReclaim(decision.plan, outcome.reports)
        this.freeDropped()
        if (returned === undefined) {
          reclaimed = decision.plan.vc
          continue
        }
        this.wake(decision.plan.vc)
        if (outcome.returned === undefined || outcome.returned.file !== returned) throw new Error(`a holder returned file ${returned} without its bytes`)
        return outcome.returned
      }
      const outcome = await this.runLoad(decision.plan, wanted)
      if ('file' in outcome) return outcome
      if ('unwanted' in outcome) throw new OrphanedOpen()
      throw new UnreadableSample(`cannot read the data for ${this.protocol.layout.files[file].path}`, outcome.charged)
    }
  }

  /**
   * Loads a chunk, places it, wakes the opens waiting on its VC; for a
   * demand load, its answer, or the file a failed one was charged with, or
   * that its opener no longer wanted it (`OpenOptions.wanted`).
   */
  private async runLoad (plan: LoadPlan, wanted?: () => boolean): Promise<ServedFile | { charged?: FileId } | { unwanted: true }> {
    let delivered: Map<FileId, Buffer>
    try {
      delivered = await this.fetchPieces(plan)
    } catch (err) {
      this.log.error({ pcs: plan.pieces.map(piece => piece.pc), err: (err as Error).message }, 'chunk load failed')
      delivered = new Map()
    }
    const outcome = this.protocol.finishLoad(plan, new Set(delivered.keys()))
    for (const file of outcome.placed) {
      this.resident.set(file, delivered.get(file)!)
      delivered.delete(file)
    }
    let served: ServedFile | { charged?: FileId } | { unwanted: true } = { charged: outcome.charged }
    if (outcome.served !== undefined) {
      // The load's own copy first (an exact load's file, never placed): one in memory may be a chunk's staged for the next epoch.
      const bytes = delivered.get(outcome.served) ?? this.resident.take(outcome.served)
      delivered.delete(outcome.served)
      served = { file: outcome.served, bytes }
    }
    if (plan.requester !== undefined && wanted !== undefined && !wanted()) {
      // Before the wake below: see OpenOptions.wanted.
      if ('file' in served) this.giveBack(served)
      else if (outcome.charged !== undefined) this.protocol.uncharge(outcome.charged)
      served = { unwanted: true }
    }
    // Read but neither placed nor served (a load for the next epoch that a reset overtook): their buffers serve the next load.
    for (const bytes of delivered.values()) this.buffers.give(bytes)
    this.wake(plan.vc)
    // Let the woken opens retry first: readahead must not take the VC from under them.
    setImmediate(() => this.startReadahead(plan.vc))
    return served
  }

  /** Reads a plan's pieces concurrently (mix mode reads a block of each of several chunks). */
  private async fetchPieces (plan: LoadPlan): Promise<Map<FileId, Buffer>> {
    const forOpener = plan.exact === true ? plan.requester : undefined
    if (plan.pieces.length === 1) return await this.source.fetch(forOpener === undefined ? plan.pieces[0] : { ...plan.pieces[0], forOpener })
    if (this.source.readsFileByFile) return await this.source.fetch({ pc: plan.pieces[0].pc, files: plan.files, forOpener })
    const parts = await Promise.allSettled(plan.pieces.map(async piece => await this.source.fetch(piece)))
    const delivered = new Map<FileId, Buffer>()
    parts.forEach((part, i) => {
      // A piece that failed loses its files only; the others' bytes are kept (and so freed as usual).
      if (part.status === 'fulfilled') for (const [file, bytes] of part.value) delivered.set(file, bytes)
      else this.log.error({ pc: plan.pieces[i].pc, err: (part.reason as Error).message }, 'chunk load failed')
    })
    return delivered
  }

  /** Asks the holders what they hold of a VC; holders that cannot be asked count as dead. */
  private async askHolders (plan: ReclaimPlan): Promise<Awaited<ReturnType<Reclaimer>>> {
    try {
      if (this.reclaimer === undefined) throw new Error('a single node has no holders to reclaim from')
      return await this.reclaimer(plan)
    } catch (err) {
      this.log.error({ vc: plan.vc, err: (err as Error).message }, 'reclaim failed; treating the holders as dead')
      return { reports: plan.holders.map(node => ({ node, dead: true as const })) }
    }
  }

  /** Takes a VC over from a dead home, with the files this node held of it in its own mirror. */
  adopt (vc: VcId, adoption: Adoption, heldHere: Map<FileId, Buffer>): void {
    this.protocol.home.adopt(vc, adoption, [...heldHere.keys()])
    for (const [file, bytes] of heldHere) this.resident.set(file, bytes)
    this.wake(vc)
  }

  // ---------------------------------------------------------------- the home side's ledger, for the cluster

  /** Which VCs this node answers for from now on (a new generation, or a node mounted again): taken with fresh state. */
  setOwnership (owns: (vc: VcId) => boolean): void { this.protocol.home.setOwnership(owns) }

  /** Whether this node answers for `vc` (its home, or it took the VC over). */
  owns (vc: VcId): boolean { return this.protocol.owns(vc) }

  /** The VCs whose standby copy changed since the last call, for the next live node of each. */
  takeStandbyUpdates (): StandbyUpdate[] { return this.protocol.home.takeStandbyUpdates() }

  /** VCs whose changed standby copy the sync has not taken yet. */
  get standbyPending (): number { return this.protocol.home.standbyPending }

  /** A standby copy of `vc` that did not reach its peer: send it again next time. */
  resendStandby (vc: VcId): void { this.protocol.home.touch(vc) }

  /** Files another node served from its mirror of VCs this node answers for. */
  noteServedElsewhere (node: NodeId, served: readonly ServedNotice[]): void {
    this.protocol.home.noteServedElsewhere(node, served.filter(notice => this.protocol.owns(notice.vc)))
  }

  /** A dead node's mirrors are gone: what it was shipped and never served is loadable again. Gives the VCs that lost files. */
  forgetNode (node: NodeId): VcId[] {
    const lost = this.protocol.home.forgetNode(node)
    this.freeDropped()
    return lost
  }

  /** `serveRequest`'s answer went out to `node` (not given back): kept until its next request says whether it came. */
  answerSent (node: NodeId, answer: RequestAnswer): void {
    if (answer.served !== undefined) this.protocol.home.noteAnswerSent(this.protocol.vcOf(answer.served.file), node, answer.served.file, answer.batchNumber)
  }

  /** `serveRequest`'s batch for `node` was never sent: its files may be loaded again (their bytes are the caller's to free). */
  takeBackBatch (node: NodeId, answer: RequestAnswer): void {
    if (answer.batch.length > 0) this.protocol.home.takeBack(this.protocol.vcOf(answer.batch[0].file), node, answer.batch.map(f => f.file))
    this.freeDropped()
  }

  get takeovers (): number { return this.protocol.counters.takeovers }

  private takeResident (file: FileId): Buffer { return this.resident.take(file) }

  private wake (vc: VcId): void { this.waiters.wake(vc) }

  private startReadahead (vc: VcId): void {
    const plan = this.protocol.readahead(vc)
    if (plan === undefined) return
    this.track(this.runLoad(plan).catch(err => this.log.error({ err: (err as Error).message }, 'readahead failed')))
  }
}
