/**
 * Writing one object of unknown size as it is produced (a pack, say),
 * with bounded memory.
 *
 * Bytes gather in a part buffer; a full part is uploaded (S3 multipart)
 * while the next one fills, and at most `partsInFlight` parts are out at
 * once: a `write` that would start one more waits for one to finish, so
 * memory stays at `(partsInFlight + 1) * partSize` however large the
 * object. A full part is sent only once a byte beyond it arrives, so an
 * object that fits in one part (the common small case) is one PutObject
 * and no multipart upload at all. S3 refuses parts under 5 MiB except the
 * last, hence the smallest `partSize`.
 *
 * A multipart upload that is never completed nor aborted keeps its parts,
 * billed and invisible, until a lifecycle rule removes them. So once a part
 * fails (after the store's retries) the writer aborts the upload itself,
 * and every later call reports that first error; `abort()` does the same
 * for a caller that gives up. Parts are numbered in the order they filled,
 * which is the order of the bytes whatever order they finish in.
 */
import { UsageError } from '../errors'

/** S3's smallest part, except the last. */
export const MIN_PART_SIZE = 5 * 2 ** 20
/** S3's most parts in one upload. */
export const MAX_PARTS = 10_000

export interface ObjectWriterOptions {
  /** Bytes per part. Default 8 MiB; at least 5 MiB (S3's rule). */
  readonly partSize?: number
  /** Parts uploading at once; `write` waits when this many are out. Default 4. */
  readonly partsInFlight?: number
}

export interface WrittenObject {
  readonly etag: string
  readonly size: number
}

export interface ObjectWriter {
  /** Copies `bytes` (the caller may reuse its buffer at once). One write at a time. */
  write (bytes: Uint8Array): Promise<void>
  /** Uploads what is left and makes the object visible. */
  close (): Promise<WrittenObject>
  /** Gives the object up: nothing becomes visible and no upload is left behind. */
  abort (): Promise<void>
}

/** The requests a writer needs, each with the store's retries. */
export interface PartTransport {
  put (key: string, bytes: Buffer): Promise<WrittenObject>
  createUpload (key: string): Promise<string>
  /** Resolves with the part's ETag. `cancel` gives up on it (the writer is aborting). */
  uploadPart (key: string, uploadId: string, partNumber: number, bytes: Buffer, cancel: AbortSignal): Promise<string>
  /** Resolves with the object's ETag; `size` is what was written, for checking the object when the answer lacks one. */
  completeUpload (key: string, uploadId: string, etags: readonly string[], size: number): Promise<string>
  abortUpload (key: string, uploadId: string): Promise<void>
}

export const DEFAULT_PART_SIZE = 8 * 2 ** 20
const DEFAULT_PARTS_IN_FLIGHT = 4

export class MultipartObjectWriter implements ObjectWriter {
  private readonly partSize: number
  private readonly partsInFlight: number
  private part: Buffer
  private filled = 0
  private size = 0
  /** Buffers of finished parts, for the next parts to fill. */
  private readonly spare: Buffer[] = []
  private uploadId: Promise<string> | undefined
  private readonly etags: string[] = []
  private readonly uploading = new Set<Promise<void>>()
  private readonly cancel = new AbortController()
  private failure: unknown
  private ending: Promise<void> | undefined
  private state: 'open' | 'closed' | 'aborted' = 'open'
  /** The object was made: an abort now has nothing to undo. */
  private made = false
  private writing = false

  constructor (private readonly transport: PartTransport, private readonly key: string, options: ObjectWriterOptions = {}) {
    this.partSize = options.partSize ?? DEFAULT_PART_SIZE
    this.partsInFlight = options.partsInFlight ?? DEFAULT_PARTS_IN_FLIGHT
    if (!Number.isInteger(this.partSize) || this.partSize < MIN_PART_SIZE) throw new UsageError(`the part size of an upload must be at least 5 MiB (S3's rule), got ${this.partSize} bytes`)
    if (!Number.isInteger(this.partsInFlight) || this.partsInFlight < 1) throw new UsageError(`parts in flight must be a whole number of at least 1, got ${this.partsInFlight}`)
    this.part = Buffer.allocUnsafe(this.partSize)
  }

  async write (bytes: Uint8Array): Promise<void> {
    if (this.failure !== undefined) return await this.failed()
    this.checkOpen('write')
    if (this.writing) throw new Error('ObjectWriter.write called again before the previous write finished')
    this.writing = true
    try {
      let offset = 0
      while (offset < bytes.length) {
        if (this.filled === this.partSize) await this.ship()
        const count = Math.min(this.partSize - this.filled, bytes.length - offset)
        this.part.set(bytes.subarray(offset, offset + count), this.filled)
        this.filled += count
        this.size += count
        offset += count
      }
    } finally {
      this.writing = false
    }
  }

  async close (): Promise<WrittenObject> {
    if (this.failure !== undefined) return await this.failed()
    this.checkOpen('close')
    this.state = 'closed'
    if (this.uploadId === undefined) {
      const written = await this.transport.put(this.key, this.part.subarray(0, this.filled))
      this.made = true
      return written
    }
    if (this.filled > 0) await this.ship()
    await this.settle()
    if (this.failure !== undefined) return await this.failed()
    const uploadId = await this.uploadId
    try {
      const etag = await this.transport.completeUpload(this.key, uploadId, this.etags, this.size)
      this.made = true
      return { etag, size: this.size }
    } catch (err) {
      this.failure = err
      return await this.failed()
    }
  }

  async abort (): Promise<void> {
    if (this.made) return
    this.state = 'aborted'
    await this.end()
  }

  /** Starts uploading the full part buffer, after waiting for room. */
  private async ship (): Promise<void> {
    while (this.uploading.size >= this.partsInFlight && !this.cancel.signal.aborted) await Promise.race(this.uploading)
    if (this.failure !== undefined) return await this.failed()
    if (this.cancel.signal.aborted) throw new Error(`the upload of ${this.key} was aborted`)
    const partNumber = this.etags.length + 1
    if (partNumber > MAX_PARTS) {
      this.failure ??= new UsageError(`s3 object ${this.key} would need more than ${MAX_PARTS} parts of ${this.partSize} bytes: use a larger part size`)
      return await this.failed()
    }
    this.etags.push('')
    const bytes = this.part.subarray(0, this.filled)
    const buffer = this.part
    this.part = this.spare.pop() ?? Buffer.allocUnsafe(this.partSize)
    this.filled = 0
    this.uploadId ??= this.transport.createUpload(this.key)
    const uploadId = this.uploadId
    const upload = (async () => {
      this.etags[partNumber - 1] = await this.transport.uploadPart(this.key, await uploadId, partNumber, bytes, this.cancel.signal)
    })().catch(err => {
      if (this.cancel.signal.aborted) return // stopped by an abort or another part's failure: not a failure of its own
      this.failure = err
      // No more parts will be needed: stop the others and remove the upload now,
      // whether or not the caller ever calls again.
      void this.end().catch(() => {})
    }).finally(() => {
      this.uploading.delete(upload)
      this.spare.push(buffer)
    })
    this.uploading.add(upload)
  }

  private async settle (): Promise<void> {
    while (this.uploading.size > 0) await Promise.race(this.uploading)
  }

  /** Cancels the parts still out and aborts the upload, once. */
  private async end (): Promise<void> {
    this.ending ??= (async () => {
      this.cancel.abort()
      await this.settle()
      if (this.uploadId === undefined) return
      const uploadId = await this.uploadId.catch(() => undefined)
      if (uploadId !== undefined) await this.transport.abortUpload(this.key, uploadId)
    })()
    await this.ending
  }

  /** Ends the upload and rejects with the first failure. */
  private async failed (): Promise<never> {
    await this.end().catch(() => {})
    throw this.failure
  }

  private checkOpen (call: string): void {
    if (this.state !== 'open') throw new Error(`ObjectWriter.${call} called after ${this.state === 'closed' ? 'close' : 'abort'}`)
  }
}
