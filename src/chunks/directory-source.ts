/**
 * Chunk source for a plain ImageFolder directory: no conversion step.
 *
 * A chunk's files are scattered on disk, so a load reads them in a few
 * batches that run in parallel on the thread pool (the native reader reads
 * a whole batch per trip, where fs.readFile costs four trips per file), and
 * reads only the files the protocol can place; the chunk as a unit exists
 * only in the layout. Concurrency is bounded across loads, so one load
 * cannot flood the disk queue.
 *
 * The tree is a snapshot of the source: a sample that is not the file the
 * scan saw, or was modified, or is less protected now than the mount shows
 * (source-check.ts), is never served (short or different bytes would break
 * exactly-once, and a chmod must hold through the mount); it fails like an
 * unreadable file, and is counted.
 */
import pLimit from 'p-limit'
import type { Logger } from 'pino'
import type { DatasetTree, FileReader, OpenFile } from './tree'
import { nsecOf, secOf } from './scan'
import { codeOf } from '../errors'
import { native } from './native'
import type { SourceCheck, UnchangedDirectories } from './source-check'
import type { SampleBuffers } from './sample-buffers'
import type { ChunkRequest, ChunkSource } from './source'
import type { FileId } from '../redirect/layout'

/** Files per native batch: small enough that a chunk's batches run in parallel. */
const BATCH_FILES = 8

export class DirectorySource implements ChunkSource {
  readonly readsFileByFile = true
  private readonly limit: ReturnType<typeof pLimit>
  private filesRead = 0
  private bytesRead = 0
  private readErrors = 0
  /** Samples found changed since the scan, or their directories (each counted once, however often a load meets it). */
  private readonly changedFiles = new Set<number>()

  constructor (
    private readonly tree: DatasetTree,
    private readonly check: SourceCheck,
    private readonly buffers: SampleBuffers,
    private readonly log: Logger,
    /** Asked before each load: the directories it need not stat again (source-watch.ts); none when absent. */
    private readonly unchanged?: () => UnchangedDirectories,
    /** Batches in flight at once, across all loads. */
    concurrency = 8
  ) {
    native()
    this.limit = pLimit(concurrency)
  }

  async fetch (request: ChunkRequest): Promise<Map<FileId, Buffer>> {
    const delivered = new Map<FileId, Buffer>()
    const files = this.tree.samples
    const refusing = await this.check.directoriesRefusing(request.files.map(id => files[id].entry), this.unchanged?.())
    const readable = request.files.filter(id => {
      const refusal = refusing(files[id].entry)
      if (refusal !== undefined) this.refuse(id, refusal.why)
      return refusal === undefined
    })
    const batches: FileId[][] = []
    for (let i = 0; i < readable.length; i += BATCH_FILES) batches.push(readable.slice(i, i + BATCH_FILES))
    await Promise.all(batches.map(batch => this.limit(async () => {
      // Each file into a buffer one byte larger than its scanned size: one that fills it has grown.
      const targets = batch.map(id => this.buffers.take(files[id].size + 1))
      const entries = batch.map(id => files[id].entry)
      const results = await native().readFiles(entries.map(entry => this.check.pathOf(entry)), targets, this.check.expected(entries))
      results.forEach((result, i) => {
        const id = batch[i]
        const length = result instanceof Error ? -1 : typeof result === 'number' ? result : result.length
        const code = codeOf(result)
        if (result instanceof Error || length !== files[id].size) {
          this.buffers.give(targets[i])
          if (typeof result === 'object' && !(result instanceof Error)) this.buffers.give(result)
          if (code === 'ESTALE' || code === 'EACCES') this.refuse(id, (result as Error).message.slice(this.check.pathOf(files[id].entry).length + 2))
          else if (length >= 0) this.refuse(id, `changed in the source since the mount (${length} bytes now, ${files[id].size} at the scan)`)
          else {
            this.readErrors++
            this.log.error({ file: files[id].path, err: (result as Error).message }, 'cannot serve sample file')
          }
          return
        }
        let bytes: Buffer
        if (typeof result === 'number') {
          bytes = targets[i].subarray(0, result)
        } else {
          this.buffers.give(targets[i])
          bytes = result
        }
        delivered.set(id, bytes)
        this.filesRead++
        this.bytesRead += bytes.length
      })
    })))
    return delivered
  }

  /** A sample not served because it, or a directory on its way, changed since the scan. */
  private refuse (id: number, why: string): void {
    this.changedFiles.add(id)
    this.log.error({ file: this.tree.samples[id].path, err: `${why}; remount to serve it` }, 'cannot serve sample file')
  }

  stats (): Record<string, number | string> {
    return { kind: 'directory', filesRead: this.filesRead, bytesRead: this.bytesRead, readErrors: this.readErrors, changedFiles: this.changedFiles.size }
  }

  async close (): Promise<void> {}
}

/** Non-sample files of a scanned directory, read in place, each checked as it is opened (source-check.ts). */
export class DirectoryFileReader implements FileReader {
  constructor (private readonly tree: DatasetTree, private readonly check: SourceCheck) {}

  async open (relativePath: string): Promise<OpenFile> {
    const file = await this.check.open(this.tree.find(relativePath))
    return {
      read: async (buffer, length, position) => (await file.read(buffer, 0, length, position)).bytesRead,
      close: async () => await file.close(),
      native: { fd: file.fd },
      attributesNow: async () => {
        const stat = await file.stat({ bigint: true })
        return { size: Number(stat.size), mtimeSec: secOf(stat.mtimeNs), mtimeNsec: nsecOf(stat.mtimeNs), ctimeSec: secOf(stat.ctimeNs), ctimeNsec: nsecOf(stat.ctimeNs) }
      }
    }
  }
}
