/**
 * The requester side of the cluster protocol: mirrors of other nodes' VCs.
 *
 * An open of a file whose VC another node owns is answered from this
 * node's mirror of that VC when it holds a valid slot (per mode, as at
 * home: strict takes slot O only, pool any valid slot); otherwise by one
 * request to the owner, which answers with the opened slot's file and an
 * opportunistic batch of its other valid slots that land on empty slots
 * here. While a request for a VC is in flight, other opens of that VC wait
 * and look again when it returns (the batch may hold their file), so at
 * most one request per VC is out and each carries an exact bitmap.
 *
 * The mirrors together stay within `limitBytes`: a request reserves the
 * bytes it advertises until its answer arrives, so concurrent requests to
 * several VCs cannot overshoot the limit together.
 *
 * For takeover, the mirror also remembers which files of each VC it
 * received in the owner's current epoch of that VC (the owner tells it
 * with every answer).
 */
import { vcOfFile, type FileId, type Layout, type VcId } from './layout'
import type { GivenBack, RedirectMode } from './protocol'
import { SeededRandom } from './random'
import type { Shipment } from './takeover'

export interface RemoteRequest {
  readonly vc: VcId
  readonly file: FileId
  readonly emptyOffsets: ReadonlySet<number>
  /** Bytes reserved for the batch, and advertised to the owner. */
  readonly freeBytes: number
  /** The last batch of this VC received. */
  readonly lastBatch: number
  /** Files this mirror gave back to reclaims of the VC, not yet known to have arrived (`givenBack`). */
  readonly givenBackBefore: readonly GivenBack[]
}

export type RemoteDecision =
  | { readonly kind: 'serve', readonly file: FileId }
  | { readonly kind: 'wait', readonly vc: VcId }
  | { readonly kind: 'request', readonly request: RemoteRequest }

export interface RemoteAnswer {
  /** The file the open is bound to; undefined when the owner could not read it. */
  readonly served?: FileId
  readonly batch: readonly FileId[]
  /** The batch's sequence number (0 when empty). */
  readonly batchNumber: number
  /** The owner's epoch count of the VC when it answered. */
  readonly vcEpoch: number
}

export interface MirrorCounters {
  /** Opens of files whose VC another node owns. */
  remoteOpens: number
  /** Of those, answered from this node's mirror (a prefetched file used). */
  prefetchUsed: number
  /** Requests sent to owners. */
  remoteRequests: number
  /** Files received: the ones requested plus the prefetched ones. */
  remoteSamplesReceived: number
  prefetchReceived: number
  /** Files given back to owners that reclaimed them. */
  givenBack: number
  mirrorBytes: number
  peakMirrorBytes: number
}

interface VcMirror {
  readonly slots: Int32Array
  /** The batch each held file came in. */
  readonly batchOf: Map<FileId, number>
  valid: number
  /** The owner's epoch of this VC and the files received in it. */
  epoch: number
  received: Set<FileId>
  lastBatch: number
  /**
   * Files this mirror gave back to reclaims, each with the batch it had
   * come in. A reclaim's answer may be lost with its connection: every
   * later reclaim answer and request names them, so that an owner that
   * never got one may load it again (home.ts, `loseIfGivenBackLost`),
   * until a request's answer shows the owner has heard of them.
   */
  readonly givenBack: Map<FileId, number>
  /**
   * Files served from this mirror, each with the batch it came in, across
   * the VC's epochs: a file carried into the owner's next epoch while held
   * here may be served before this mirror hears of that epoch, and a
   * takeover knows it by its batch (takeover.ts).
   */
  readonly servedFrom: Map<FileId, number>
}

const EMPTY = -1

const givenBackOf = (mirror: VcMirror): GivenBack[] => [...mirror.givenBack].map(([file, batch]) => ({ file, batch }))

/** A holder served `file` of `vc` from its mirror, from the batch numbered `batch`: its owner's ledger counts it consumed. */
export interface ServedNotice { readonly vc: VcId, readonly file: FileId, readonly batch: number }

export class MirrorTable {
  readonly counters: MirrorCounters = { remoteOpens: 0, prefetchUsed: 0, remoteRequests: 0, remoteSamplesReceived: 0, prefetchReceived: 0, givenBack: 0, mirrorBytes: 0, peakMirrorBytes: 0 }
  private readonly mirrors = new Map<VcId, VcMirror>()
  private readonly requesting = new Set<VcId>()
  /** Files served from mirrors since `takeServedNotices`, for their owners' ledgers. */
  private servedLog: ServedNotice[] = []
  private reservedBytes = 0
  private readonly random: SeededRandom
  /** Most bytes one request advertises: about two chunks' worth. */
  private readonly batchAllowance: number
  private readonly capacity: Uint32Array

  constructor (readonly layout: Layout, readonly limitBytes: number, private readonly mode: RedirectMode, seed: number) {
    this.random = new SeededRandom(seed ^ 0x3177)
    this.batchAllowance = Math.ceil(2 * layout.chunkSize * layout.totalBytes / Math.max(1, layout.files.length))
    this.capacity = new Uint32Array(layout.vcs.length)
    layout.vcs.forEach((vc, v) => { for (const pc of vc.pcs) this.capacity[v] = Math.max(this.capacity[v], layout.pcs[pc].files.length) })
  }

  private vcOf (file: FileId): VcId { return vcOfFile(this.layout, file) }
  private offsetOf (file: FileId): number { return this.layout.fileOffset[file] }

  private mirror (vc: VcId): VcMirror {
    let mirror = this.mirrors.get(vc)
    if (mirror === undefined) this.mirrors.set(vc, mirror = { slots: new Int32Array(this.capacity[vc]).fill(EMPTY), batchOf: new Map(), valid: 0, epoch: 0, received: new Set(), lastBatch: 0, givenBack: new Map(), servedFrom: new Map() })
    return mirror
  }

  /** Answers an open of a remote file; call again with `retry` after a wait. */
  open (file: FileId, retry = false): RemoteDecision {
    if (!retry) this.counters.remoteOpens++
    const vc = this.vcOf(file)
    const batchOf = this.mirrors.get(vc)?.batchOf
    const taken = this.takeFor(vc, this.offsetOf(file))
    if (taken !== undefined) {
      const batch = batchOf!.get(taken) ?? 0
      this.servedLog.push({ vc, file: taken, batch })
      this.mirrors.get(vc)!.servedFrom.set(taken, batch)
      batchOf!.delete(taken)
      this.counters.prefetchUsed++
      return { kind: 'serve', file: taken }
    }
    if (this.requesting.has(vc)) return { kind: 'wait', vc }
    const mirror = this.mirror(vc)
    const emptyOffsets = new Set<number>()
    for (let offset = 0; offset < mirror.slots.length; offset++) if (mirror.slots[offset] === EMPTY) emptyOffsets.add(offset)
    const freeBytes = this.mode === 'off' ? 0 : Math.max(0, Math.min(this.batchAllowance, this.limitBytes - this.counters.mirrorBytes - this.reservedBytes))
    this.reservedBytes += freeBytes
    this.requesting.add(vc)
    this.counters.remoteRequests++
    return { kind: 'request', request: { vc, file, emptyOffsets, freeBytes, lastBatch: mirror.lastBatch, givenBackBefore: givenBackOf(mirror) } }
  }

  private takeFor (vc: VcId, offset: number): FileId | undefined {
    const mirror = this.mirrors.get(vc)
    if (mirror === undefined || mirror.valid === 0) return undefined
    if (mirror.slots[offset] !== EMPTY) return this.take(vc, mirror, offset)
    if (this.mode !== 'pool' && this.mode !== 'mix') return undefined
    const valid: number[] = []
    mirror.slots.forEach((file, o) => { if (file !== EMPTY) valid.push(o) })
    return this.take(vc, mirror, valid[this.random.below(valid.length)])
  }

  private take (vc: VcId, mirror: VcMirror, offset: number): FileId {
    const file = mirror.slots[offset]
    mirror.slots[offset] = EMPTY
    mirror.valid--
    this.counters.mirrorBytes -= this.layout.files[file].size
    return file as FileId
  }

  /** Places an owner's answer; the caller wakes the opens waiting on the VC. */
  finishRequest (request: RemoteRequest, answer: RemoteAnswer): void {
    const { vc } = request
    this.requesting.delete(vc)
    this.reservedBytes -= request.freeBytes
    const mirror = this.mirror(vc)
    if (answer.vcEpoch !== mirror.epoch) { mirror.epoch = answer.vcEpoch; mirror.received.clear() }
    if (answer.served !== undefined) {
      mirror.received.add(answer.served)
      this.counters.remoteSamplesReceived++
    }
    for (const file of answer.batch) {
      const offset = this.offsetOf(file)
      if (this.vcOf(file) !== vc || mirror.slots[offset] !== EMPTY) throw new Error(`owner shipped file ${file} to an occupied or foreign slot (${vc}, ${offset})`)
      mirror.slots[offset] = file
      mirror.batchOf.set(file, answer.batchNumber)
      mirror.valid++
      mirror.received.add(file)
      this.counters.mirrorBytes += this.layout.files[file].size
    }
    if (answer.batchNumber > 0) mirror.lastBatch = answer.batchNumber
    // The owner read this request's list of files given back (and lost any whose answer it never got): they are settled.
    for (const { file, batch } of request.givenBackBefore) if (mirror.givenBack.get(file) === batch) mirror.givenBack.delete(file)
    this.counters.remoteSamplesReceived += answer.batch.length
    this.counters.prefetchReceived += answer.batch.length
    if (this.counters.mirrorBytes > this.counters.peakMirrorBytes) this.counters.peakMirrorBytes = this.counters.mirrorBytes
  }

  /**
   * `request` as it stands for its next try: the last batch of its VC and
   * the files given back, as this mirror knows them now. A try after a
   * reset (a new generation, a fencing) must not name the batches of the
   * mirror before it: the VC's owner then may number below them, and an
   * answer of its lost on the way would pass for one received.
   */
  current (request: RemoteRequest): RemoteRequest {
    const mirror = this.mirrors.get(request.vc)
    return { ...request, lastBatch: mirror?.lastBatch ?? 0, givenBackBefore: mirror === undefined ? [] : givenBackOf(mirror) }
  }

  /** A request that got no answer (the owner is unreachable). */
  abandonRequest (request: RemoteRequest): void {
    this.requesting.delete(request.vc)
    this.reservedBytes -= request.freeBytes
  }

  /** What this mirror holds of `vc`. */
  held (vc: VcId): FileId[] {
    const mirror = this.mirrors.get(vc)
    if (mirror === undefined) return []
    return [...mirror.slots].filter(file => file !== EMPTY) as FileId[]
  }

  /**
   * Answers the owner's reclaim of `vc`: first gives one file back if asked
   * (one at `offsets`, or any when empty), then says what it still holds and
   * the last batch of `vc` it received.
   */
  answerReclaim (vc: VcId, giveBack: boolean, offsets: readonly number[]): { held: FileId[], lastBatch: number, returned?: FileId, givenBackBefore: GivenBack[] } {
    const mirror = this.mirrors.get(vc)
    const givenBackBefore = mirror === undefined ? [] : givenBackOf(mirror)
    const returned = giveBack ? this.giveBack(vc, offsets.length === 0 ? undefined : offsets) : undefined
    return { held: this.held(vc), lastBatch: mirror?.lastBatch ?? 0, returned, givenBackBefore }
  }

  private giveBack (vc: VcId, offsets?: readonly number[]): FileId | undefined {
    const mirror = this.mirrors.get(vc)
    if (mirror === undefined) return undefined
    const candidates = (offsets ?? [...mirror.slots.keys()]).filter(offset => offset < mirror.slots.length && mirror.slots[offset] !== EMPTY)
    if (candidates.length === 0) return undefined
    this.counters.givenBack++
    const file = this.take(vc, mirror, candidates[0])
    mirror.givenBack.set(file, mirror.batchOf.get(file) ?? 0)
    mirror.batchOf.delete(file)
    // No trainer here got it: if its owner dies before serving it, a takeover must count it as loadable.
    mirror.received.delete(file)
    return file
  }

  /** What this node served from its mirrors since the last call, for the owners' ledgers. */
  takeServedNotices (): ServedNotice[] {
    const log = this.servedLog
    this.servedLog = []
    return log
  }

  /** Served files not yet taken by `takeServedNotices`. */
  get servedNoticesPending (): number { return this.servedLog.length }

  /** What this node knows of `vc` for a takeover of it (see takeover.ts). */
  takeoverReport (vc: VcId): { epoch: number, received: FileId[], held: FileId[], heldBatches: number[], lastBatch: number, servedFromMirror: Shipment[] } {
    const mirror = this.mirrors.get(vc)
    const held = this.held(vc)
    const servedFromMirror = [...(mirror?.servedFrom ?? [])].map(([file, batch]) => ({ file, batch }))
    return { epoch: mirror?.epoch ?? 0, received: [...(mirror?.received ?? [])], held, heldBatches: held.map(file => mirror!.batchOf.get(file) ?? 0), lastBatch: mirror?.lastBatch ?? 0, servedFromMirror }
  }

  /** This node now owns `vc`: its mirror of it goes away; returns the files it held (they move into the VC's slots). */
  surrender (vc: VcId): FileId[] {
    const held = this.held(vc)
    for (const file of held) this.counters.mirrorBytes -= this.layout.files[file].size
    this.mirrors.delete(vc)
    return held
  }

  /** Drops everything (a reset); returns the files dropped. */
  reset (): FileId[] {
    const dropped: FileId[] = []
    for (const vc of [...this.mirrors.keys()]) dropped.push(...this.held(vc))
    this.mirrors.clear()
    this.counters.mirrorBytes = 0
    return dropped
  }
}
