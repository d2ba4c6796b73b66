/**
 * Buffers for sample bytes, reused. A sample's bytes live from the load
 * that reads them to the release of the one handle they are served to
 * (the protocol serves each file's bytes to one open); then its buffer goes
 * back here and the next load reads another file into it. A fresh Buffer
 * per sample, thousands a second, cost more CPU than serving it: V8 counts
 * every new ArrayBuffer's bytes and runs a full garbage collection every
 * few dozen megabytes of them, and fresh memory faults its pages in.
 *
 * Buffers ("slabs") come in capacities rounded up to eighths of a power of
 * two (at most 12.5% slack), so files of similar sizes share them. Slabs in
 * use plus slabs kept idle stay within `limitBytes` (the daemon sets it to
 * its --memory), so keeping them never lifts RSS above what the budget
 * allows. Files dropped at a reset come back too (engine/memory.ts). A
 * slab that is never given back (bytes shipped to a peer) is left to the
 * garbage collector, which is told to uncount it.
 */
import { native } from './native'

/** The capacity of the slab that holds `size` bytes. */
export function capacityFor (size: number): number {
  if (size <= 64) return 64
  const power = 2 ** Math.floor(Math.log2(size))
  const step = power / 8
  return Math.ceil(size / step) * step
}

export class SampleBuffers {
  /** Slabs in use and idle together stay within this many bytes. */
  limitBytes = 32 * 2 ** 20
  private readonly idle = new Map<number, ArrayBuffer[]>()
  /** Every slab alive that is ours to count: idle, or lent out. */
  private slabBytes = 0
  private readonly capacityOf = new WeakMap<ArrayBuffer, number>()
  private readonly lent = new WeakSet<ArrayBuffer>()
  private readonly collected = new FinalizationRegistry<number>(capacity => { this.slabBytes -= capacity })

  /** A buffer of exactly `size` bytes (their content is whatever the slab held). */
  take (size: number): Buffer {
    const capacity = capacityFor(size)
    let slab = this.idle.get(capacity)?.pop()
    if (slab === undefined) {
      this.makeRoom(capacity)
      slab = Buffer.allocUnsafeSlow(capacity).buffer as ArrayBuffer
      this.capacityOf.set(slab, capacity)
      this.collected.register(slab, capacity, slab)
      this.slabBytes += capacity
    }
    this.lent.add(slab)
    return Buffer.from(slab, 0, size)
  }

  /**
   * Takes back a buffer that `take` lent, for the next file: the caller and
   * every view of it are done with its bytes. Any other Buffer's memory is
   * freed now if it is that memory's only view (see native discard).
   */
  give (bytes: Buffer): void {
    const slab = bytes.buffer as ArrayBuffer
    const capacity = this.capacityOf.get(slab)
    if (capacity === undefined) {
      native().discard(bytes)
      return
    }
    if (!this.lent.delete(slab)) return // given back already
    if (this.slabBytes <= this.limitBytes) {
      let list = this.idle.get(capacity)
      if (list === undefined) this.idle.set(capacity, list = [])
      list.push(slab)
    } else {
      this.forget(slab, capacity)
    }
  }

  stats (): { slabBytes: number, idleBytes: number } {
    let idleBytes = 0
    for (const [capacity, list] of this.idle) idleBytes += capacity * list.length
    return { slabBytes: this.slabBytes, idleBytes }
  }

  /** Lets idle slabs go until a new one of `capacity` fits the limit. */
  private makeRoom (capacity: number): void {
    for (const [size, list] of this.idle) {
      while (list.length > 0 && this.slabBytes + capacity > this.limitBytes) {
        this.forget(list.pop()!, size)
      }
      if (list.length === 0) this.idle.delete(size)
      if (this.slabBytes + capacity <= this.limitBytes) return
    }
  }

  private forget (slab: ArrayBuffer, capacity: number): void {
    this.collected.unregister(slab)
    this.slabBytes -= capacity
  }
}

/** The process's sample buffers: every chunk source reads into them, the FUSE layer gives them back. */
export const sampleBuffers = new SampleBuffers()
