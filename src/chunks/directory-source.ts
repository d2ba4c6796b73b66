/**
 * Chunk source for a plain ImageFolder directory: no conversion step.
 *
 * A chunk's files are scattered on disk, so a load reads them in a few
 * batches that run in parallel on the thread pool (the native reader reads
 * a whole batch per trip, where fs.readFile costs four trips per file), and
 * reads only the files the protocol can place; the chunk as a unit exists
 * only in the layout. Concurrency is bounded across loads, so one load
 * cannot flood the disk queue.
 */
import path from 'node:path'
import pLimit from 'p-limit'
import type { Logger } from 'pino'
import type { SampleFile } from '../redirect/layout'
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
  /** The root with one trailing slash, so a file's path is a concatenation, not a normalization per read. */
  private readonly prefix: string

  constructor (
    root: string,
    private readonly files: readonly SampleFile[],
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
      const targets = batch.map(id => sampleBuffers.take(this.files[id].size + 1))
      const results = await native().readFiles(batch.map(id => this.prefix + this.files[id].path), targets)
      results.forEach((result, i) => {
        if (result instanceof Error) {
          sampleBuffers.give(targets[i])
          this.readErrors++
          this.log.error({ file: this.files[batch[i]].path, err: result.message }, 'cannot read sample file')
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
    return { kind: 'directory', filesRead: this.filesRead, bytesRead: this.bytesRead, readErrors: this.readErrors }
  }

  async close (): Promise<void> {}
}
