/**
 * Chunk source for a pack: one read per request (an aligned O_DIRECT read
 * on a filesystem, a ranged GET in a bucket: storage.ts), from the first
 * file asked for to the last, checked before any byte of it is served
 * (file by file always, and against the chunk's CRC-32 when it is the
 * whole chunk of a file's reader, which has the run whole). A file that
 * fails its own checksum is never served; the others of its read are. A
 * read that is short (truncated file), or whose files pass but whose chunk
 * does not, delivers nothing. An open that would have been given a file
 * not delivered gets EIO, and it is logged and counted. The native reader copies the requested files out of the chunk
 * on the thread pool, so bytes the protocol does not place never reach JS.
 */
import { crc32 } from 'node:zlib'
import pLimit from 'p-limit'
import type { Logger } from 'pino'
import type { ChunkRead } from '../chunks/native'
import type { ChunkRequest, ChunkSource } from '../chunks/source'
import type { FileId } from '../redirect/layout'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { FileReader, OpenFile } from '../chunks/tree'
import { FsError } from '../errors'
import type { ChunkCache } from './chunk-cache'
import type { PackIndex } from './pack-index'

export class PackSource implements ChunkSource {
  readonly readsFileByFile = false
  private chunksRead = 0
  private bytesRead = 0
  private corruptChunks = 0

  /** Whole chunks being fetched into the cache, by chunk: loads of one chunk's blocks share one fetch. */
  private readonly filling = new Map<number, Promise<void>>()
  /** Chunks the cache could not keep (no room, a write that failed, a check that failed): read from the bucket directly, never fetched whole again. */
  private readonly notCached = new Set<number>()
  private readonly fillLimit: ReturnType<typeof pLimit>

  /**
   * `cache`: the local disk tier of a pack in a bucket (chunk-cache.ts).
   * `fillBytes`: how many bytes of whole chunks may be in memory at once on
   * their way from the bucket to the cache (they are outside --memory).
   */
  constructor (private readonly pack: PackIndex, private readonly buffers: SampleBuffers, private readonly log: Logger, private readonly cache?: ChunkCache, fillBytes = 64 * 2 ** 20) {
    const largest = pack.arrays.chunkLength.reduce((max, length) => Math.max(max, length), 1)
    this.fillLimit = pLimit(Math.max(1, Math.floor(fillBytes / largest)))
  }

  /**
   * Reads the requested files with one read: the whole chunk when they
   * span it (strict, pool), checked against the chunk's CRC-32 where the
   * reader gives the run's; else just the run from the first to the last
   * (a mix block); each file checked against its own CRC-32 either way.
   */
  async fetch (request: ChunkRequest, useCache = true): Promise<Map<FileId, Buffer>> {
    const { arrays } = this.pack
    const chunkOffset = arrays.chunkOffset[request.pc]
    const chunkLength = arrays.chunkLength[request.pc]
    const delivered = new Map<FileId, Buffer>()
    if (chunkLength === 0 && this.pack.header.nodes !== undefined) {
      this.log.error({ chunk: request.pc, shard: this.pack.header.node }, 'this pack shard does not hold that chunk (its home is another node)')
      return delivered
    }
    if (request.files.length === 0) return delivered
    const entries = request.files.map(id => this.pack.sampleEntry[id])
    const first = entries[0]
    const last = entries[entries.length - 1]
    const runStart = arrays.location[first]
    const runEnd = arrays.location[last] + arrays.size[last]
    const wholeChunk = runStart === chunkOffset && runEnd === chunkOffset + chunkLength
    const [offset, length] = wholeChunk ? [chunkOffset, chunkLength] : [runStart, runEnd - runStart]
    const pieces = entries.map(entry => ({ start: arrays.location[entry] - offset, size: arrays.size[entry] }))
    // The index was checked whole at load (format.ts, checkPackLayout); this keeps a read inside its run whatever reaches here.
    if (pieces.some(p => p.start < 0 || p.start + p.size > length)) {
      this.corruptChunks++
      this.log.error({ chunk: request.pc }, 'a request reaches outside its chunk; its files are not served')
      return delivered
    }
    const targets = pieces.map(p => this.buffers.take(p.size))
    const giveBack = (): void => { for (const bytes of targets) this.buffers.give(bytes) }
    let read: ChunkRead | undefined
    let fromCache = false
    try {
      if (useCache && this.cache !== undefined && !this.notCached.has(request.pc)) {
        if (!this.cache.has(request.pc)) await this.fill(request.pc)
        if (this.cache.has(request.pc) && (this.cache.checked(request.pc) || await this.checkCached(request.pc))) {
          read = await this.cache.readPieces(request.pc, offset - chunkOffset, length, pieces, targets)
          fromCache = read !== undefined
        }
      }
      read ??= await this.pack.storage.readPieces(arrays.chunkSegment[request.pc], offset, length, pieces, targets)
    } catch (err) {
      giveBack()
      this.log.error({ chunk: request.pc, err: (err as Error).message }, 'cannot read chunk')
      return delivered
    }
    this.chunksRead++
    this.bytesRead += read.length
    // Each file's own CRC, whole chunk or block (the reader sums every piece anyway): a chunk whose bytes are right but
    // whose files' boundaries the index moved must not serve one file's bytes under another's name.
    const whole = read.length >= length && read.copied === pieces.length
    const intact = (i: number): boolean => read.fileCrcs[i] === arrays.crc[entries[i]]
    const damaged = whole ? request.files.filter((_, i) => !intact(i)) : []
    const problem = read.length < length
      ? `truncated (${read.length} of ${length} bytes)`
      : read.copied < pieces.length
        ? `only ${read.copied} of its ${pieces.length} files copied`
        : damaged.length > 0
          ? `checksum mismatch in ${damaged.length} of its ${pieces.length} files`
          : wholeChunk && read.crc !== undefined && read.crc !== arrays.chunkCrc[request.pc]
            ? 'checksum mismatch'
            : undefined
    if (problem !== undefined && fromCache) {
      // Never serve a cached chunk that fails its check: it goes, and the bucket is asked again, past the cache (a disk
      // that damages what it holds would otherwise have the chunk fetched and dropped for ever).
      this.log.warn({ chunk: request.pc, problem }, 'a cached chunk failed its check; reading it from the bucket')
      await this.cache!.drop(request.pc)
      this.notCached.add(request.pc)
      giveBack()
      return await this.fetch(request, false)
    }
    if (problem !== undefined) this.corruptChunks++
    if (damaged.length > 0) {
      // The files that pass their own check are theirs, byte for byte, as a read of each alone would give: they are
      // served, and only the damaged ones are lost (one bad byte in a whole chunk would otherwise cost all its files).
      this.log.error({ chunk: request.pc, problem, damaged: damaged.map(id => this.pack.path(this.pack.sampleEntry[id])) }, 'files failed their check; they are not served')
    } else if (problem !== undefined) {
      this.log.error({ chunk: request.pc, problem }, 'chunk failed its check; its files are not served')
      giveBack()
      return delivered
    }
    request.files.forEach((id, i) => {
      if (damaged.length > 0 && !intact(i)) this.buffers.give(targets[i])
      else delivered.set(id, targets[i])
    })
    return delivered
  }

  /**
   * With a cache, a miss fetches the whole chunk from the bucket (a `mix`
   * block's chunk too, so its other blocks are on disk when their loads
   * come) and writes it to the cache, checked whole; the load then reads
   * its files there. Loads of one chunk share one fetch, and only so many
   * whole chunks are in memory at once (`fillBytes`). Never fails: a chunk
   * that could not be cached is read from the bucket directly.
   */
  private async fill (pc: number): Promise<void> {
    let filling = this.filling.get(pc)
    if (filling === undefined) {
      filling = this.fillLimit(async () => {
        if (this.cache!.has(pc)) return
        const { arrays } = this.pack
        const chunk = await this.pack.storage.readSegment(arrays.chunkSegment[pc], arrays.chunkOffset[pc], arrays.chunkLength[pc])
        if (chunk.length === arrays.chunkLength[pc] && crc32(chunk) === arrays.chunkCrc[pc]) await this.cache!.keep(pc, chunk)
        else this.log.warn({ chunk: pc, length: chunk.length }, 'a chunk fetched for the cache failed its check; its loads read the bucket directly')
      }).catch((err: unknown) => {
        this.log.warn({ chunk: pc, err: (err as Error).message }, 'could not fetch a chunk for the cache; its loads read the bucket directly')
      }).finally(() => {
        this.filling.delete(pc)
        if (!this.cache!.has(pc)) this.notCached.add(pc)
      })
      this.filling.set(pc, filling)
    }
    await filling
  }

  /**
   * A cached chunk's first read since the mount (or since its file changed)
   * checks its HMAC, whole: bounded like the fills, for it too holds a whole
   * chunk in memory. One that fails is read from the bucket from then on.
   */
  private async checkCached (pc: number): Promise<boolean> {
    const good = await this.fillLimit(async () => await this.cache!.check(pc))
    if (!good) this.notCached.add(pc)
    return good
  }

  stats (): Record<string, number | string> {
    return { kind: 'pack', ...this.pack.storage.stats(), chunksRead: this.chunksRead, bytesRead: this.bytesRead, corruptChunks: this.corruptChunks, ...(this.cache?.stats() ?? {}) }
  }

  async close (): Promise<void> { await this.pack.storage.close() }
}

/** Non-sample files of a pack, read from others.bin and checked against their CRC-32. */
export class PackFileReader implements FileReader {
  /**
   * The bytes of each non-sample file open now, shared by its opens: a
   * thousand opens of one file hold it once (each read whole, they held it
   * a thousand times), so what they hold is bounded by the pack's own
   * non-sample files.
   */
  private readonly held = new Map<number, { bytes: Promise<Buffer>, opens: number }>()

  constructor (private readonly pack: PackIndex) {}

  async open (relativePath: string): Promise<OpenFile> {
    const entry = this.pack.entryIndex(relativePath)
    if (entry === undefined) throw new FsError('ENOENT', 'no such file')
    let shared = this.held.get(entry)
    if (shared === undefined) {
      shared = { bytes: this.readChecked(entry, relativePath), opens: 0 }
      this.held.set(entry, shared)
    }
    shared.opens++
    const release = (): void => {
      if (--shared!.opens === 0 && this.held.get(entry) === shared) this.held.delete(entry)
    }
    let bytes: Buffer
    try {
      bytes = await shared.bytes
    } catch (err) {
      release()
      // A failed read is not kept: the next open tries again.
      if (this.held.get(entry) === shared) this.held.delete(entry)
      throw err
    }
    let closed = false
    return {
      read: async (buffer, length, position) => bytes.copy(buffer, 0, position, Math.min(position + length, bytes.length)),
      close: async () => { if (!closed) { closed = true; release() } },
      native: { bytes }
    }
  }

  /** Non-sample files are small (labels, notes): the whole file, checked against its CRC. */
  private async readChecked (entry: number, relativePath: string): Promise<Buffer> {
    const { arrays } = this.pack
    const size = arrays.size[entry]
    const bytes = await this.pack.storage.readOthers(arrays.location[entry], size).catch((err: unknown) => {
      throw new FsError('EIO', `cannot read ${relativePath} from the pack: ${(err as Error).message}`, { cause: err })
    })
    if (bytes.length !== size || crc32(bytes) !== arrays.crc[entry]) throw new FsError('EIO', `${relativePath} in the pack is damaged`)
    return bytes
  }
}
