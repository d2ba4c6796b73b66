/**
 * A pack in a bucket (the pack format's files as objects under a prefix):
 * a chunk, or a run of one, is one ranged GET of its segment, which the
 * store splits into parallel parts when large (store.ts). The body is
 * scattered straight into the pieces' targets as it arrives (the bytes
 * between them are dropped), so a run in flight holds no copy of its own
 * beside the sample buffers --memory counts: a buffer per run, outside the
 * budget, was most of what a bucket mount held above it. Each piece is
 * then checked against its file's CRC-32 (the native reader's, a few GB/s);
 * no CRC of the run whole is taken, as no byte outside the pieces is served.
 */
import { native, type ChunkRead } from '../chunks/native'
import { checkIndexSize, INDEX_FILE, OTHERS_FILE, segmentName, type PackStorage, type Pieces } from '../pack/storage'
import { s3Url, type S3Location } from './location'
import type { ObjectStore, RangeSink } from './store'

export class BucketPackStorage implements PackStorage {
  readonly where: string

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
    await this.store.readRangeTo(this.key(segmentName(segment)), offset, scatter(length, pieces, targets))
    const { crc32 } = native()
    let fileCrcs: number[] | undefined
    return {
      length,
      copied: pieces.length,
      get fileCrcs () { return (fileCrcs ??= pieces.map((piece, i) => crc32(targets[i].subarray(0, piece.size)))) }
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

/** A run of `length` bytes written into `targets`: piece i's bytes (from `pieces[i].start`, `size` long) into targets[i]. */
function scatter (length: number, pieces: Pieces, targets: Buffer[]): RangeSink {
  return {
    length,
    write (at, bytes) {
      const end = at + bytes.length
      pieces.forEach((piece, i) => {
        const from = Math.max(at, piece.start)
        const to = Math.min(end, piece.start + piece.size)
        if (from < to) bytes.copy(targets[i], from - piece.start, from - at, to - at)
      })
    }
  }
}
