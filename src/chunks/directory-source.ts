/**
 * Chunk source for a plain ImageFolder directory: no conversion step.
 *
 * A chunk's files are scattered on disk, so a load reads them concurrently
 * (bounded, so one load cannot flood the disk queue or the thread pool) and
 * reads only the files the protocol can place; the chunk as a unit exists
 * only in the layout.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import pLimit from 'p-limit'
import type { Logger } from 'pino'
import type { SampleFile } from '../redirect/layout'
import type { ChunkRequest, ChunkSource } from './source'

export class DirectorySource implements ChunkSource {
  private readonly limit: ReturnType<typeof pLimit>
  private filesRead = 0
  private bytesRead = 0
  private readErrors = 0

  constructor (
    private readonly root: string,
    private readonly files: readonly SampleFile[],
    private readonly log: Logger,
    concurrency = 16
  ) {
    this.limit = pLimit(concurrency)
  }

  async fetch (request: ChunkRequest): Promise<Map<number, Buffer>> {
    const delivered = new Map<number, Buffer>()
    await Promise.all(request.files.map(id => this.limit(async () => {
      const file = this.files[id]
      try {
        const bytes = await fs.readFile(path.join(this.root, file.path))
        delivered.set(id, bytes)
        this.filesRead++
        this.bytesRead += bytes.length
      } catch (err) {
        this.readErrors++
        this.log.error({ file: file.path, pc: request.pc, err: (err as Error).message }, 'cannot read sample file')
      }
    })))
    return delivered
  }

  stats (): Record<string, number | string> {
    return { kind: 'directory', filesRead: this.filesRead, bytesRead: this.bytesRead, readErrors: this.readErrors }
  }

  async close (): Promise<void> {}
}
