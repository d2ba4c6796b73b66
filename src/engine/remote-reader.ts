/**
 * Opens of files whose VC another node owns: the mirror (redirect/mirror.ts)
 * decides, this class holds the mirrored bytes, parks the opens waiting on
 * a request in flight, and sends requests to the owner through `Owners`.
 * When an owner does not answer, `Owners` decides what that means (a
 * takeover elsewhere, or the samples are gone) and the open either asks
 * the new owner or fails with EIO, never hangs past the peer timeout.
 */
import type { Logger } from 'pino'
import { RedirfsError } from '../errors'
import type { FileId, VcId } from '../redirect/layout'
import type { MirrorTable, RemoteRequest } from '../redirect/mirror'
import type { ServedFile } from './engine'
import { ResidentBytes, VcWaiters } from './memory'

export interface OwnerAnswer {
  readonly served?: ServedFile
  readonly batch: readonly ServedFile[]
  readonly batchNumber: number
  readonly vcEpoch: number
}

export interface Owners {
  /** Sends the request to the VC's current owner; rejects with an error that says why no owner answered. */
  read (request: RemoteRequest): Promise<OwnerAnswer>
}

export class RemoteReader {
  private readonly resident = new ResidentBytes('mirror')
  private readonly waiters = new VcWaiters()

  constructor (readonly mirror: MirrorTable, private readonly owners: Owners, private readonly log: Logger) {}

  async open (file: FileId): Promise<ServedFile> {
    for (let retry = false; ; retry = true) {
      const decision = this.mirror.open(file, retry)
      if (decision.kind === 'serve') return { file: decision.file, bytes: this.take(decision.file) }
      if (decision.kind === 'wait') {
        await this.waiters.wait(decision.vc)
        continue
      }
      const { request } = decision
      let answer: OwnerAnswer
      try {
        answer = await this.owners.read(request)
      } catch (err) {
        this.mirror.abandonRequest(request)
        this.wake(request.vc)
        // As it is: the caller may be told to route the open elsewhere (a takeover made this node the owner).
        throw err
      }
      this.mirror.finishRequest(request, { served: answer.served?.file, batch: answer.batch.map(f => f.file), batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch })
      for (const prefetched of answer.batch) this.resident.set(prefetched.file, prefetched.bytes)
      this.wake(request.vc)
      if (answer.served === undefined) throw new RedirfsError(`the owner of its chunk could not read the data for file ${file}`, 'EIO')
      return answer.served
    }
  }

  /** A reclaim from the owner of `vc`: what is held, and maybe one file back. */
  reclaim (vc: VcId, giveBack: boolean, offsets: readonly number[]): { held: FileId[], lastBatch: number, returned?: ServedFile } {
    const file = giveBack ? this.mirror.giveBack(vc, offsets.length === 0 ? undefined : offsets) : undefined
    const returned = file === undefined ? undefined : { file, bytes: this.take(file) }
    return { held: this.mirror.held(vc), lastBatch: this.mirror.lastBatchOf(vc), returned }
  }

  /** For a takeover: gives up this node's mirror of `vc`, with its bytes. */
  surrender (vc: VcId): Map<FileId, Buffer> {
    const held = new Map<FileId, Buffer>()
    for (const file of this.mirror.held(vc)) {
      this.mirror.giveBack(vc, [this.mirror.offsetOf(file)])
      held.set(file, this.take(file))
    }
    return held
  }

  private take (file: FileId): Buffer { return this.resident.take(file) }

  private wake (vc: VcId): void { this.waiters.wake(vc) }

  /** Drops every mirrored file (a reset). */
  reset (): number {
    const dropped = this.mirror.reset()
    for (const file of dropped) this.resident.delete(file)
    return dropped.length
  }

  /** Wakes everything waiting (the owner of these VCs changed). */
  wakeAll (vcs: Iterable<VcId>): void { for (const vc of vcs) this.wake(vc) }
}
