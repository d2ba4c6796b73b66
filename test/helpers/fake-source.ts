// A chunk source without a disk, with failure injection: what the engine
// and the remote reader are tested against (the real sources have their
// own tests, and the real-mount tests run both).
import { SampleBuffers } from '../../src/chunks/sample-buffers'
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

  /** Files are read into buffers lent by this pool, as the real sources read into the daemon's; the engine under test gives them back to it. */
  readonly buffers: SampleBuffers

  constructor (options: { readsFileByFile?: boolean } = {}) {
    this.readsFileByFile = options.readsFileByFile ?? false
    this.buffers = new SampleBuffers()
  }

  private bytes (file: FileId): Buffer {
    const bytes = bytesOf(file)
    const lent = this.buffers.take(bytes.length)
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
