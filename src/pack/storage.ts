/**
 * Where a pack's files are: a directory, or the objects under a bucket
 * prefix (src/s3/pack-storage.ts). The pack format (format.ts) names them
 * alike in both; this interface is all the pack reader, the mount and
 * `verify` need of either: the index, a byte range of a segment with the
 * pieces the protocol asked for copied out and checksummed, and ranges of
 * the non-sample files.
 *
 * On a filesystem a segment read is one aligned O_DIRECT read
 * (native/redirfs_native.cc, readChunk), so the page cache keeps no second
 * copy of bytes the daemon holds within its budget.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { codeOf, UsageError } from '../errors'
import { MAX_INDEX_BYTES } from './format'
import { ChunkFile, type ChunkRead } from '../chunks/native'

export const INDEX_FILE = 'index.bin'
export const OTHERS_FILE = 'others.bin'
export const SEGMENTS_DIR = 'segments'

/** The name of segment `i` in a pack: segments/00000.bin, ... */
export const segmentName = (i: number): string => `${SEGMENTS_DIR}/${String(i).padStart(5, '0')}.bin`

/** A run of a segment: each piece's start (from the run's start) and size. */
export type Pieces = ReadonlyArray<{ readonly start: number, readonly size: number }>

export interface PackStorage {
  /** Where it is, for messages: a directory, or s3://bucket/prefix. */
  readonly where: string
  /**
   * The index's bytes; undefined when there is no index (not a pack, or an
   * interrupted write). One larger than MAX_INDEX_BYTES is refused before
   * anything is allocated for it.
   */
  readIndex (): Promise<Buffer | undefined>
  /** Whether the index is there and starts like one (cheap: its first bytes). */
  hasIndex (magic: Buffer): Promise<boolean>
  /**
   * Reads `length` bytes of segment `segment` from `offset` and copies
   * piece i into targets[i], giving each piece's CRC-32 and (a file's
   * reader, which has them whole) the run's; a file read that comes back
   * short copies nothing, a failed GET throws (its targets then hold
   * whatever arrived, and are given back unserved).
   */
  readPieces (segment: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead>
  /** Bytes of a segment, as they are (shorter where it is cut short), for `verify`. */
  readSegment (segment: number, offset: number, length: number): Promise<Buffer>
  /** Bytes of others.bin, as they are. */
  readOthers (offset: number, length: number): Promise<Buffer>
  stats (): Record<string, number | string>
  close (): Promise<void>
}

/** Refuses an index too large to be one this redirfs reads, by its size alone. */
export function checkIndexSize (where: string, size: number): void {
  if (size > MAX_INDEX_BYTES) {
    throw new UsageError(`${where}/${INDEX_FILE} is ${size} bytes, more than the ${MAX_INDEX_BYTES} a pack index may have (one of 13 million files is about 1.6 GB): not a pack this redirfs reads`)
  }
}

export class DirectoryPackStorage implements PackStorage {
  private readonly segments = new Map<number, ChunkFile>()
  private direct = true

  constructor (readonly where: string) {}

  async readIndex (): Promise<Buffer | undefined> {
    const handle = await fs.open(path.join(this.where, INDEX_FILE), 'r').catch((err: unknown) => {
      if (codeOf(err) === 'ENOENT') return undefined
      throw err
    })
    if (handle === undefined) return undefined
    try {
      checkIndexSize(this.where, (await handle.stat()).size)
      return await handle.readFile()
    } finally {
      await handle.close()
    }
  }

  async hasIndex (magic: Buffer): Promise<boolean> {
    const handle = await fs.open(path.join(this.where, INDEX_FILE), 'r').catch(() => undefined)
    if (handle === undefined) return false
    try {
      const start = Buffer.alloc(magic.length)
      await handle.read(start, 0, start.length, 0)
      return start.equals(magic)
    } finally {
      await handle.close()
    }
  }

  async readPieces (segment: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead> {
    return await this.segment(segment).readPieces(offset, length, pieces, targets)
  }

  async readSegment (segment: number, offset: number, length: number): Promise<Buffer> {
    return await this.segment(segment).read(offset, length)
  }

  async readOthers (offset: number, length: number): Promise<Buffer> {
    const handle = await fs.open(path.join(this.where, OTHERS_FILE), 'r')
    try {
      const bytes = Buffer.alloc(length)
      const { bytesRead } = await handle.read(bytes, 0, length, offset)
      return bytes.subarray(0, bytesRead)
    } finally {
      await handle.close()
    }
  }

  /** Segment files are opened when first read: a pack of many segments holds only the ones in use. */
  private segment (segment: number): ChunkFile {
    let file = this.segments.get(segment)
    if (file === undefined) {
      file = ChunkFile.open(path.join(this.where, segmentName(segment)))
      this.direct &&= file.direct
      this.segments.set(segment, file)
    }
    return file
  }

  stats (): Record<string, number | string> {
    return { directIo: String(this.direct), openSegments: this.segments.size }
  }

  async close (): Promise<void> {
    for (const file of this.segments.values()) file.close()
    this.segments.clear()
  }
}
