/**
 * A pack in a bucket (the pack format's files as objects under a prefix):
 * a chunk, or a run of one, is one ranged GET of its segment, which the
 * store splits into parallel parts when large (store.ts). The bytes arrive
 * in memory anyway, so the pieces the protocol asked for are copied out
 * and checksummed here, as the native reader does for a file.
 *
 * Each run is read into a buffer kept for the next run (`RunBuffers`, up
 * to 8 MiB of them, outside --memory as the runs in flight are):
 * the daemon has glibc map every sample-sized buffer afresh (so freed
 * samples leave the process), and filling fresh pages cost several times
 * the copy itself (measured: 750 MB into fresh 1.7 MB buffers 0.87 s,
 * into one reused 0.15 s). Checksums are the native reader's CRC-32 (a few
 * GB/s, against zlib's under two), the run's at once (its buffer goes back
 * then), the files' only when asked for (a `mix` block needs those, a
 * whole chunk only its own).
 */
import { native, type ChunkRead } from '../chunks/native'
import { checkIndexSize, INDEX_FILE, OTHERS_FILE, segmentName, type PackStorage, type Pieces } from '../pack/storage'
import { s3Url, type S3Location } from './location'
import type { ObjectStore } from './store'

export class BucketPackStorage implements PackStorage {
  readonly where: string
  private readonly runs = new RunBuffers()

  constructor (private readonly store: ObjectStore, private readonly location: S3Location) {
    this.where = s3Url(location.bucket, location.prefix).replace(/\/$/, '')
  }

  private key (name: string): string { return this.location.prefix + name }

  async readIndex (): Promise<Buffer | undefined> {
    // Its size first, so a huge object is refused before a byte of it is allocated; the read is then pinned to what was sized.
    const head = await this.store.head(this.key(INDEX_FILE))
    if (head === undefined) return undefined
    checkIndexSize(this.where, head.size)
    return await this.store.getObject(this.key(INDEX_FILE), { expectedLength: head.size, ifMatch: head.etag === '' ? undefined : head.etag })
  }

  async hasIndex (magic: Buffer): Promise<boolean> {
    const head = await this.store.head(this.key(INDEX_FILE))
    if (head === undefined || head.size < magic.length) return false
    return (await this.store.getRange(this.key(INDEX_FILE), 0, magic.length)).equals(magic)
  }

  async readPieces (segment: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead> {
    const run = this.runs.take(length)
    try {
      const bytes = await this.store.getRange(this.key(segmentName(segment)), offset, length, { into: run })
      pieces.forEach((piece, i) => bytes.copy(targets[i], 0, piece.start, piece.start + piece.size))
      const { crc32 } = native()
      let fileCrcs: number[] | undefined
      return {
        length: bytes.length,
        crc: crc32(bytes),
        copied: pieces.length,
        get fileCrcs () { return (fileCrcs ??= pieces.map((piece, i) => crc32(targets[i].subarray(0, piece.size)))) }
      }
    } finally {
      this.runs.give(run)
    }
  }

  async readSegment (segment: number, offset: number, length: number): Promise<Buffer> {
    return await this.store.getRange(this.key(segmentName(segment)), offset, length)
  }

  async readOthers (offset: number, length: number): Promise<Buffer> {
    return await this.store.getRange(this.key(OTHERS_FILE), offset, length)
  }

  stats (): Record<string, number | string> {
    return { bucket: this.location.bucket, prefix: this.location.prefix, ...this.store.stats() }
  }

  async close (): Promise<void> { await this.store.close() }
}

/**
 * Buffers for runs in flight, kept when a run is done for the next one
 * (as many as fit in `keptBytes`); a run larger than any kept one gets a
 * buffer of its own.
 */
class RunBuffers {
  private readonly free: Buffer[] = []
  private freeBytes = 0

  constructor (private readonly keptBytes = 8 * 2 ** 20) {}

  take (length: number): Buffer {
    const i = this.free.findIndex(buffer => buffer.length >= length)
    if (i < 0) return Buffer.allocUnsafe(length)
    const [buffer] = this.free.splice(i, 1)
    this.freeBytes -= buffer.length
    return buffer
  }

  give (buffer: Buffer): void {
    if (this.freeBytes + buffer.length > this.keptBytes) return
    this.free.push(buffer)
    this.freeBytes += buffer.length
  }
}
