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
 * The tree is a snapshot of the source: a sample whose size or modification
 * time is not the scan's was changed under the mount, and is never served
 * (short or different bytes would break exactly-once); it fails like an
 * unreadable file, and is counted.
 */
import path from 'node:path'
import pLimit from 'p-limit'
import type { Logger } from 'pino'
import type { DatasetTree } from './tree'
import { codeOf } from '../errors'
import { native } from './native'
import { sampleBuffers } from './sample-buffers'
import type { ChunkRequest, ChunkSource } from './source'

/** Files per native batch: small enough that a chunk's batches run in parallel. */
const BATCH_FILES = 8

export class DirectorySource implements ChunkSource {
  readonly readsFileByFile = true
  private readonly limit: ReturnType<typeof pLimit>
  private filesRead = 0
  private bytesRead = 0
  private readErrors = 0
  /** Samples found changed since the scan (each counted once, however often a load meets it). */
  private readonly changedFiles = new Set<number>()
  /** The root with one trailing slash, so a file's path is a concatenation, not a normalization per read. */
  private readonly prefix: string

  constructor (
    root: string,
    private readonly tree: DatasetTree,
    private readonly log: Logger,
    /** Batches in flight at once, across all loads. */
    concurrency = 8
  ) {
    native()
    this.prefix = path.join(path.resolve(root), '/')
    this.limit = pLimit(concurrency)
  }

  async fetch (request: ChunkRequest): Promise<Map<number, Buffer>> {
    const delivered = new Map<number, Buffer>()
    const batches: number[][] = []
    for (let i = 0; i < request.files.length; i += BATCH_FILES) batches.push(request.files.slice(i, i + BATCH_FILES))
    await Promise.all(batches.map(batch => this.limit(async () => {
      // Each file into a buffer one byte larger than its scanned size: one that fills it has grown.
      const files = this.tree.samples
      const targets = batch.map(id => sampleBuffers.take(files[id].size + 1))
      const mtimes = new Float64Array(batch.length * 2)
      batch.forEach((id, i) => { mtimes[2 * i] = this.tree.columns.mtimeSec[files[id].entry]; mtimes[2 * i + 1] = this.tree.columns.mtimeNsec[files[id].entry] })
      const results = await native().readFiles(batch.map(id => this.prefix + files[id].path), targets, mtimes)
      results.forEach((result, i) => {
        const length = result instanceof Error ? -1 : typeof result === 'number' ? result : result.length
        const changed = codeOf(result) === 'ESTALE' || (length >= 0 && length !== files[batch[i]].size)
        if (result instanceof Error || changed) {
          sampleBuffers.give(targets[i])
          if (typeof result === 'object' && !(result instanceof Error)) sampleBuffers.give(result)
          if (changed) this.changedFiles.add(batch[i])
          else this.readErrors++
          const why = changed ? `changed in the source since the mount (${length >= 0 ? `${length} bytes now, ${files[batch[i]].size} at the scan` : 'modified'}); remount to serve it` : (result as Error).message
          this.log.error({ file: files[batch[i]].path, err: why }, 'cannot serve sample file')
          return
        }
        let bytes: Buffer
        if (typeof result === 'number') {
          bytes = targets[i].subarray(0, result)
        } else {
          sampleBuffers.give(targets[i])
          bytes = result
        }
        delivered.set(batch[i], bytes)
        this.filesRead++
        this.bytesRead += bytes.length
      })
    })))
    return delivered
  }

  stats (): Record<string, number | string> {
    return { kind: 'directory', filesRead: this.filesRead, bytesRead: this.bytesRead, readErrors: this.readErrors, changedFiles: this.changedFiles.size }
  }

  async close (): Promise<void> {}
}
