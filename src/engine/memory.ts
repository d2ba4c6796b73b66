/**
 * What both sides of a node keep while opens are in flight: the bytes of
 * files in memory (home slots, or mirrors), and the opens parked until a
 * load or a request for their VC (or class) ends.
 */
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { FileId, VcId } from '../redirect/layout'
import { appendTo } from '../util/lists'

export class ResidentBytes {
  /**
   * Per file: the memory its bytes sit in (none: not held here), and where
   * in it. A view is made again when they are taken: a Buffer object per
   * held file costs more than these columns, as much as a small sample's
   * bytes, for every file of a budget that holds many (docs/design.md,
   * "Sample memory", has the measurement).
   */
  private readonly memory: (ArrayBuffer | undefined)[]
  private readonly start: Float64Array
  private readonly length: Float64Array

  constructor (private readonly where: string, files: number, private readonly buffers: SampleBuffers) {
    this.memory = new Array<ArrayBuffer | undefined>(files).fill(undefined)
    this.start = new Float64Array(files)
    this.length = new Float64Array(files)
  }

  /** Keeps a file's bytes; a copy already kept (staged for the next epoch, when the served one comes back) goes back for reuse. */
  set (file: FileId, bytes: Buffer): void {
    this.drop(file)
    this.memory[file] = bytes.buffer as ArrayBuffer
    this.start[file] = bytes.byteOffset
    this.length[file] = bytes.length
  }

  has (file: FileId): boolean { return this.memory[file] !== undefined }

  /** Lets the bytes of a file nobody will be served go: their buffer is reused by the next load (sample-buffers.ts). */
  drop (file: FileId): void {
    if (this.has(file)) this.buffers.give(this.take(file))
  }

  /** Removes and returns a file's bytes; the protocol said they are here. */
  take (file: FileId): Buffer {
    const memory = this.memory[file]
    if (memory === undefined) throw new Error(`file ${file} was served from the ${this.where} but its bytes are not there`)
    this.memory[file] = undefined
    return Buffer.from(memory, this.start[file], this.length[file])
  }
}

/** Opens parked per key: a VC (the class layout), or a class (the shared one). */
export class Waiters<Key = VcId> {
  private readonly waiting = new Map<Key, (() => void)[]>()

  /** Resolves when `wake(key)` is next called. */
  async wait (key: Key): Promise<void> {
    await new Promise<void>(resolve => appendTo(this.waiting, key, resolve))
  }

  wake (key: Key): void {
    const waiting = this.waiting.get(key)
    if (waiting === undefined) return
    this.waiting.delete(key)
    for (const resume of waiting) resume()
  }
}
