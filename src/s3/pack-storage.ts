/**
 * A pack in a bucket (the pack format's files as objects under a prefix):
 * a chunk, or a run of one, is one ranged GET of its segment, which the
 * store splits into parallel parts when large (store.ts). The bytes arrive
 * in memory anyway, so the pieces the protocol asked for are copied out
 * and checksummed here, as the native reader does for a file.
 */
import { crc32 } from 'node:zlib'
import type { ChunkRead } from '../chunks/native'
import { checkIndexSize, INDEX_FILE, OTHERS_FILE, segmentName, type PackStorage, type Pieces } from '../pack/storage'
import { s3Url, type S3Location } from './location'
import type { ObjectStore } from './store'

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
    const bytes = await this.store.getRange(this.key(segmentName(segment)), offset, length)
    const fileCrcs = pieces.map((piece, i) => {
      const file = bytes.subarray(piece.start, piece.start + piece.size)
      file.copy(targets[i])
      return crc32(file)
    })
    return { length: bytes.length, crc: crc32(bytes), copied: pieces.length, fileCrcs }
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
