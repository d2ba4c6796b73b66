/**
 * What both sides of a node keep while opens are in flight: the bytes of
 * files in memory (home slots, or mirrors), and the opens parked until a
 * load or a request for their VC ends.
 */
import { sampleBuffers } from '../chunks/sample-buffers'
import type { FileId, VcId } from '../redirect/layout'
import { appendTo } from '../util/lists'

export class ResidentBytes {
  private readonly bytes = new Map<FileId, Buffer>()

  constructor (private readonly where: string) {}

  set (file: FileId, bytes: Buffer): void { this.bytes.set(file, bytes) }
  get (file: FileId): Buffer | undefined { return this.bytes.get(file) }
  delete (file: FileId): void { this.bytes.delete(file) }

  /** Lets the bytes of a file nobody will be served go: their buffer is reused by the next load (sample-buffers.ts). */
  drop (file: FileId): void {
    const bytes = this.bytes.get(file)
    this.bytes.delete(file)
    if (bytes !== undefined) sampleBuffers.give(bytes)
  }

  /** Removes and returns a file's bytes; the protocol said they are here. */
  take (file: FileId): Buffer {
    const bytes = this.bytes.get(file)
    if (bytes === undefined) throw new Error(`file ${file} was served from the ${this.where} but its bytes are not there`)
    this.bytes.delete(file)
    return bytes
  }
}

export class VcWaiters {
  private readonly waiting = new Map<VcId, (() => void)[]>()

  /** Resolves when `wake(vc)` is next called. */
  async wait (vc: VcId): Promise<void> {
    await new Promise<void>(resolve => appendTo(this.waiting, vc, resolve))
  }

  wake (vc: VcId): void {
    const waiting = this.waiting.get(vc)
    if (waiting === undefined) return
    this.waiting.delete(vc)
    for (const resume of waiting) resume()
  }
}
