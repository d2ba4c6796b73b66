/**
 * Opens of files whose VC another node owns: the mirror (redirect/mirror.ts)
 * decides, this class holds the mirrored bytes, parks the opens waiting on
 * a request in flight, and sends requests to the owner through `Owners`.
 * When an owner does not answer, `Owners` decides what that means (ask
 * again, a takeover elsewhere, or the samples are gone) and the open either
 * gets its answer or fails with EIO. The mirror serves only while the node
 * may serve (a cluster node's quorum of leases): the caller says.
 */
import type { SampleBuffers } from '../chunks/sample-buffers'
import { FsError } from '../errors'
import type { FileId, VcId } from '../redirect/layout'
import type { MirrorCounters, MirrorTable, RemoteRequest, ServedNotice } from '../redirect/mirror'
import type { GivenBack } from '../redirect/protocol'
import type { RequestAnswer, ServedFile } from './engine'
import { ResidentBytes, Waiters } from './memory'

/** What asking a VC's owner gives: its answer, or the news that this node has become the owner (a takeover). */
export type OwnerReply = { readonly kind: 'answered', readonly answer: RequestAnswer } | { readonly kind: 'owner-is-here' }

/** What a remote open gives: the bytes, or the news that the open must be decided again (here now, or once this node may serve). */
export type RemoteOpen = { readonly kind: 'served', readonly served: ServedFile } | { readonly kind: 'owner-is-here' } | { readonly kind: 'not-now' }

export interface Owners {
  /** Sends the request to the VC's current owner (whose engine answers it); rejects with an error that says why no owner answered. */
  read (request: RemoteRequest): Promise<OwnerReply>
}

export class RemoteReader {
  private readonly resident: ResidentBytes
  private readonly waiters = new Waiters()

  constructor (private readonly mirror: MirrorTable, private readonly owners: Owners, buffers: SampleBuffers) {
    this.resident = new ResidentBytes('mirror', mirror.layout.files.length, buffers)
  }

  /** `mayServe`: whether this node may serve from its mirror now (asked right before each decision). */
  async open (file: FileId, mayServe: () => boolean = () => true): Promise<RemoteOpen> {
    for (let retry = false; ; retry = true) {
      if (!mayServe()) return { kind: 'not-now' }
      const decision = this.mirror.open(file, retry)
      if (decision.kind === 'serve') return { kind: 'served', served: { file: decision.file, bytes: this.take(decision.file) } }
      if (decision.kind === 'wait') {
        await this.waiters.wait(decision.vc)
        continue
      }
      const { request } = decision
      let reply: OwnerReply
      try {
        reply = await this.owners.read(request)
      } catch (err) {
        this.abandon(request)
        throw err
      }
      if (reply.kind === 'owner-is-here') {
        this.abandon(request)
        return reply
      }
      const { answer } = reply
      this.mirror.finishRequest(request, { served: answer.served?.file, batch: answer.batch.map(f => f.file), batchNumber: answer.batchNumber, vcEpoch: answer.vcEpoch })
      for (const prefetched of answer.batch) this.resident.set(prefetched.file, prefetched.bytes)
      this.wake(request.vc)
      if (answer.served === undefined) throw new FsError('EIO', `the owner of its chunk could not read the data for file ${file}`)
      return { kind: 'served', served: answer.served }
    }
  }

  /** A request that got no answer: its VC's waiters ask again. */
  private abandon (request: RemoteRequest): void {
    this.mirror.abandonRequest(request)
    this.wake(request.vc)
  }

  /** A reclaim from the owner of `vc`: what is held, and maybe one file back. */
  reclaim (vc: VcId, giveBack: boolean, offsets: readonly number[]): { held: FileId[], lastBatch: number, returned?: ServedFile, givenBackBefore: readonly GivenBack[] } {
    const { held, lastBatch, returned, givenBackBefore } = this.mirror.answerReclaim(vc, giveBack, offsets)
    return { held, lastBatch, returned: returned === undefined ? undefined : { file: returned, bytes: this.take(returned) }, givenBackBefore }
  }

  /** For a takeover: gives up this node's mirror of `vc`, with its bytes. */
  surrender (vc: VcId): Map<FileId, Buffer> {
    return new Map(this.mirror.surrender(vc).map(file => [file, this.take(file)]))
  }

  /** `request` as it stands for its next try (see MirrorTable.current). */
  current (request: RemoteRequest): RemoteRequest { return this.mirror.current(request) }

  /** For a takeover elsewhere: what this node received, holds and last got of `vc`. */
  takeoverReport (vc: VcId): ReturnType<MirrorTable['takeoverReport']> { return this.mirror.takeoverReport(vc) }

  /** Files served from the mirrors since the last call, for their owners' ledgers. */
  takeServedNotices (): ServedNotice[] { return this.mirror.takeServedNotices() }

  /** Files served from the mirrors whose notices the sync has not taken yet. */
  get servedNoticesPending (): number { return this.mirror.servedNoticesPending }

  get limitBytes (): number { return this.mirror.limitBytes }

  get counters (): Readonly<MirrorCounters> { return this.mirror.counters }

  private take (file: FileId): Buffer { return this.resident.take(file) }

  private wake (vc: VcId): void { this.waiters.wake(vc) }

  /** Drops every mirrored file (a reset). */
  reset (): number {
    const dropped = this.mirror.reset()
    for (const file of dropped) this.resident.drop(file)
    return dropped.length
  }

  /** Wakes everything waiting (the owner of these VCs changed). */
  wakeAll (vcs: Iterable<VcId>): void { for (const vc of vcs) this.wake(vc) }
}
