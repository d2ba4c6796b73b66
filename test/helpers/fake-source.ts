// A chunk source without a disk, with failure injection: what the engine
// and the remote reader are tested against (the real sources have their
// own tests, and the real-mount tests run both).
import { sampleBuffers } from '../../src/chunks/sample-buffers'
import type { ChunkRequest, ChunkSource } from '../../src/chunks/source'
import type { FileId } from '../../src/redirect/layout'

/** Each file's bytes name it, so a served file can be checked against the one it claims to be. */
export const bytesOf = (file: FileId): Buffer => Buffer.from(`file ${file}`)

export class FakeSource implements ChunkSource {
  readonly readsFileByFile: boolean
  /** Files every fetch leaves out, as a source does for a file it cannot read. */
  readonly lost = new Set<FileId>()
  /** PCs whose next fetch rejects (a chunk that fails as a whole), once each. */
  readonly rejectOnce = new Set<number>()
  delayMs = 0
  readonly fetches: ChunkRequest[] = []
  inFlight = 0
  peakInFlight = 0

  /** When set, files are read into buffers lent by the process's sample buffers, as the real sources do. */
  readonly lends: boolean

  constructor (options: { readsFileByFile?: boolean, lends?: boolean } = {}) {
    this.readsFileByFile = options.readsFileByFile ?? false
    this.lends = options.lends ?? false
  }

  private bytes (file: FileId): Buffer {
    const bytes = bytesOf(file)
    if (!this.lends) return bytes
    const lent = sampleBuffers.take(bytes.length)
    bytes.copy(lent)
    return lent
  }

  async fetch (request: ChunkRequest): Promise<Map<FileId, Buffer>> {
    this.fetches.push(request)
    this.peakInFlight = Math.max(this.peakInFlight, ++this.inFlight)
    try {
      await new Promise(resolve => setTimeout(resolve, this.delayMs))
      if (this.rejectOnce.delete(request.pc)) throw new Error(`chunk ${request.pc} is damaged`)
      return new Map(request.files.filter(file => !this.lost.has(file)).map(file => [file, this.bytes(file)]))
    } finally {
      this.inFlight--
    }
  }

  stats (): Record<string, number> { return { fetches: this.fetches.length } }
  async close (): Promise<void> {}
}
