/**
 * A local disk tier for a pack in a bucket (`--cache-dir`, `--cache-size`):
 * whole chunks fetched from the bucket are kept as files on local disk
 * (cloud GPU machines have local NVMe), so later epochs read them there
 * with one aligned O_DIRECT read each, and the bucket only for what the
 * cache cannot hold.
 *
 * - **Whole chunks.** A miss reads the chunk whole (one ranged GET) even
 *   when a `mix` load needs only a block of it: the chunk's other blocks
 *   are then on disk when their loads come, so the bucket still serves each
 *   byte about once, and every cached file is a unit the index checks.
 * - **Never stale.** The cache of a pack is a directory named after a hash
 *   of its index: a remount of the same pack finds it again; a pack written
 *   anew is another directory. Every read from the cache is checked against
 *   the index's CRC-32s, as any chunk read is; a cached chunk that fails is
 *   removed and read from the bucket again.
 * - **Bounded.** The files of one pack's cache stay within `--cache-size`:
 *   the least recently read go first. A chunk larger than the whole cache
 *   is not cached.
 */
import { randomBytes } from 'node:crypto'
import { promises as fs } from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import { ChunkFile, type ChunkRead } from '../chunks/native'
import { UsageError, describeSystemError } from '../errors'
import { CHUNK_ALIGNMENT } from './format'
import type { Pieces } from './storage'

export interface ChunkCacheStats {
  cacheHits: number
  cacheMisses: number
  cacheBytes: number
  cacheLimitBytes: number
  cacheEvictions: number
  cacheRejected: number
}

const padded = (length: number): number => Math.ceil(length / CHUNK_ALIGNMENT) * CHUNK_ALIGNMENT

export class ChunkCache {
  /** Chunk → its file's size on disk, least recently read first. */
  private readonly held = new Map<number, number>()
  /** Chunks being written: their bytes count already. */
  private readonly writing = new Set<number>()
  /** Bytes of the files held and being written. */
  private bytes = 0
  /** Of those, the files being written (room kept for them, not all of which is taken). */
  private writingBytes = 0
  private readonly counters = { cacheHits: 0, cacheMisses: 0, cacheEvictions: 0, cacheRejected: 0 }

  private constructor (readonly directory: string, private readonly limitBytes: number, private readonly log: Logger) {}

  /** Opens (or makes) the cache of the pack whose index hashes to `identity` (PackIndex.identity), under `root`, and takes stock of what it holds. */
  static async open (root: string, identity: string, limitBytes: number, chunkLengths: Float64Array, log: Logger): Promise<ChunkCache> {
    const directory = path.join(root, `pack-${identity.slice(0, 20)}`)
    await fs.mkdir(directory, { recursive: true, mode: 0o700 }).catch((err: unknown) => {
      throw new UsageError(`cannot use --cache-dir ${root}: ${describeSystemError(err)}`)
    })
    const cache = new ChunkCache(directory, limitBytes, log)
    const names = await fs.readdir(directory)
    const found: { chunk: number, size: number, at: number }[] = []
    for (const name of names) {
      const match = /^(\d+)\.chunk$/.exec(name)
      const file = path.join(directory, name)
      const stat = await fs.stat(file).catch(() => undefined)
      const chunk = match === null ? -1 : Number(match[1])
      // Anything that is not a whole chunk of this pack (a write cut short, a stray file) goes.
      if (stat === undefined || chunk < 0 || chunk >= chunkLengths.length || stat.size !== padded(chunkLengths[chunk])) {
        await fs.rm(file, { force: true })
        continue
      }
      found.push({ chunk, size: stat.size, at: stat.mtimeMs })
    }
    found.sort((a, b) => a.at - b.at)
    for (const { chunk, size } of found) { cache.held.set(chunk, size); cache.bytes += size }
    await cache.evict()
    log.info({ directory, chunks: cache.held.size, bytes: cache.bytes }, 'chunk cache opened')
    return cache
  }

  private file (chunk: number): string { return path.join(this.directory, `${chunk}.chunk`) }

  has (chunk: number): boolean { return this.held.has(chunk) }

  /** Reads a run of a cached chunk (offsets within the chunk) into the targets; undefined when it cannot be read (then it is dropped). */
  async readPieces (chunk: number, offset: number, length: number, pieces: Pieces, targets: Buffer[]): Promise<ChunkRead | undefined> {
    const size = this.held.get(chunk)
    if (size === undefined) return undefined
    // Most recently read last.
    this.held.delete(chunk)
    this.held.set(chunk, size)
    let file: ChunkFile | undefined
    try {
      file = ChunkFile.open(this.file(chunk))
      const read = await file.readPieces(offset, length, pieces, targets)
      this.counters.cacheHits++
      void fs.utimes(this.file(chunk), new Date(), new Date()).catch(() => {})
      return read
    } catch (err) {
      this.log.warn({ chunk, err: (err as Error).message }, 'a cached chunk could not be read; reading it from the bucket')
      await this.drop(chunk)
      return undefined
    } finally {
      file?.close()
    }
  }

  /** A cached chunk failed its checksum: it goes, and is read from the bucket again. */
  async drop (chunk: number): Promise<void> {
    const size = this.held.get(chunk)
    if (size === undefined) return
    this.held.delete(chunk)
    await fs.rm(this.file(chunk), { force: true })
    this.bytes -= size
  }

  /**
   * Keeps a whole chunk just read from the bucket (checked by the caller);
   * done when it is on disk. Room is made first, so the files on disk never
   * exceed the limit, those being written included: a chunk that finds no
   * room (others are being written) is not kept.
   */
  async keep (chunk: number, bytes: Buffer): Promise<void> {
    this.counters.cacheMisses++
    const size = padded(bytes.length)
    if (size > this.limitBytes) { this.counters.cacheRejected++; return }
    if (this.held.has(chunk) || this.writing.has(chunk)) return
    this.bytes += size
    this.writingBytes += size
    this.writing.add(chunk)
    const file = this.file(chunk)
    const temporary = `${file}.${randomBytes(4).toString('hex')}.tmp`
    try {
      await this.evict()
      if (this.bytes > this.limitBytes) throw new Error('no room: other chunks are being written')
      // Padded to the alignment O_DIRECT reads need: the file is extended with zeros, the bytes are not copied.
      const handle = await fs.open(temporary, 'wx', 0o600)
      try {
        await handle.write(bytes, 0, bytes.length, 0)
        await handle.truncate(size)
      } finally {
        await handle.close()
      }
      await fs.rename(temporary, file)
      this.held.set(chunk, size)
    } catch (err) {
      this.bytes -= size
      await fs.rm(temporary, { force: true })
      if (/^no room/.test((err as Error).message)) this.counters.cacheRejected++
      else this.log.warn({ chunk, err: (err as Error).message }, 'could not keep a chunk in the cache')
    } finally {
      this.writing.delete(chunk)
      this.writingBytes -= size
    }
  }

  /** Removes the least recently read until the bytes are within the limit; a file that cannot be removed stays counted. */
  private async evict (): Promise<void> {
    for (const [chunk, size] of this.held) {
      if (this.bytes <= this.limitBytes) break
      // Out of `held` first: no read opens it once its removal has begun.
      this.held.delete(chunk)
      try {
        await fs.rm(this.file(chunk), { force: true })
      } catch (err) {
        this.held.set(chunk, size)
        throw err
      }
      this.bytes -= size
      this.counters.cacheEvictions++
    }
  }

  stats (): ChunkCacheStats {
    return { ...this.counters, cacheBytes: this.bytes - this.writingBytes, cacheLimitBytes: this.limitBytes }
  }
}
