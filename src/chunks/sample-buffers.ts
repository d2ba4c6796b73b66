/**
 * Buffers for sample bytes, reused. A sample's bytes live from the load
 * that reads them to the release of the one handle they are served to
 * (the protocol serves each file's bytes to one open); then its buffer goes
 * back here and the next load reads another file into it. A fresh Buffer
 * per sample, thousands a second, cost more CPU than serving it: V8 counts
 * every new ArrayBuffer's bytes and runs a full garbage collection every
 * few dozen megabytes of them, and fresh memory faults its pages in.
 *
 * Buffers come in capacities rounded up to eighths of a power of two (at
 * most 12.5% slack), so files of similar sizes share them. A sample of a
 * large capacity gets memory of its own (a "slab"). Small capacities (up
 * to `SHARED_UP_TO`) are slots cut from shared 64 KiB "arenas", one
 * capacity to an arena: memory of its own costs the process hundreds of
 * bytes beyond the sample's (the ArrayBuffer, its backing store, the
 * bookkeeping here), several times a tiny sample's own bytes and uncounted
 * by --memory (docs/design.md, "Sample memory", has the measurement).
 *
 * Slabs and arenas, in use and idle, stay within `limitBytes` (the daemon
 * builds its one pool with its --memory), so keeping them never lifts RSS
 * above what the budget allows; an arena goes only once all its slots are back. A new
 * arena is cut only when every arena of its capacity is full, so arenas
 * never hold more than the most small files lent at once, plus one arena
 * per capacity. Files
 * dropped at a reset come back too (engine/memory.ts). A slab that is never
 * given back (bytes shipped to a peer) is left to the garbage collector,
 * which is told to uncount it; an arena likewise, once nothing views it.
 */
import { native } from './native'

/** The largest capacity cut from a shared arena. */
export const SHARED_UP_TO = 4096
/** An arena's size: small enough that a few arenas per capacity cover a budget's worth of small files without much idle. */
export const ARENA_BYTES = 64 * 1024

/** The capacity of the buffer that holds `size` bytes. */
export function capacityFor (size: number): number {
  if (size <= 64) return 64
  const power = 2 ** Math.floor(Math.log2(size))
  const step = power / 8
  return Math.ceil(size / step) * step
}

/** Slots of one capacity cut from one ArrayBuffer; a slot is lent or free. */
class Arena {
  readonly memory = new ArrayBuffer(ARENA_BYTES)
  private readonly lentSlots: Uint8Array
  private readonly freeSlots: number[] = []
  lent = 0

  constructor (readonly capacity: number) {
    const slots = Math.floor(ARENA_BYTES / capacity)
    this.lentSlots = new Uint8Array(slots)
    for (let slot = slots - 1; slot >= 0; slot--) this.freeSlots.push(slot)
  }

  get hasFree (): boolean { return this.freeSlots.length > 0 }
  get idleBytes (): number { return this.freeSlots.length * this.capacity }

  lend (size: number): Buffer {
    const slot = this.freeSlots.pop()!
    this.lentSlots[slot] = 1
    this.lent++
    return Buffer.from(this.memory, slot * this.capacity, size)
  }

  /** Takes back the slot `bytes` starts in; false if it was not lent (given back already). */
  takeBack (bytes: Buffer): boolean {
    const slot = Math.floor(bytes.byteOffset / this.capacity)
    if (this.lentSlots[slot] === 0) return false
    this.lentSlots[slot] = 0
    this.freeSlots.push(slot)
    this.lent--
    return true
  }
}

/**
 * One process's pool: the daemon builds it once and hands it to every
 * source that reads samples and every part that gives them back. A buffer
 * goes back to the pool that lent it.
 */
export class SampleBuffers {
  private readonly idle = new Map<number, ArrayBuffer[]>()
  /** Per small capacity, the arenas with a free slot. */
  private readonly withFree = new Map<number, Set<Arena>>()
  /** Every slab and arena alive that is ours to count: idle, or lent out. */
  private slabBytes = 0
  private readonly capacityOf = new WeakMap<ArrayBuffer, number>()
  private readonly arenaOf = new WeakMap<ArrayBuffer, Arena>()
  private readonly lent = new WeakSet<ArrayBuffer>()
  private readonly collected = new FinalizationRegistry<number>(capacity => { this.slabBytes -= capacity })

  /** @param limitBytes slabs and arenas in use and idle together stay within this many bytes */
  constructor (readonly limitBytes = 32 * 2 ** 20) {}

  /** A buffer of exactly `size` bytes (their content is whatever the memory held). */
  take (size: number): Buffer {
    const capacity = capacityFor(size)
    if (capacity <= SHARED_UP_TO) return this.arenaWithFree(capacity).lend(size)
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
    const memory = bytes.buffer as ArrayBuffer
    const arena = this.arenaOf.get(memory)
    if (arena !== undefined) {
      this.giveSlot(arena, bytes)
      return
    }
    const capacity = this.capacityOf.get(memory)
    if (capacity === undefined) {
      native().discard(bytes)
      return
    }
    if (!this.lent.delete(memory)) return // given back already
    if (this.slabBytes <= this.limitBytes) {
      let list = this.idle.get(capacity)
      if (list === undefined) this.idle.set(capacity, list = [])
      list.push(memory)
    } else {
      this.forget(memory, capacity)
    }
  }

  stats (): { slabBytes: number, idleBytes: number, arenas: number } {
    let idleBytes = 0
    for (const [capacity, list] of this.idle) idleBytes += capacity * list.length
    // Arenas with no free slot are not listed: they hold no idle bytes.
    let arenas = 0
    for (const set of this.withFree.values()) for (const arena of set) { idleBytes += arena.idleBytes; arenas++ }
    return { slabBytes: this.slabBytes, idleBytes, arenas }
  }

  /** An arena of `capacity` with a free slot, a new one if none has. */
  private arenaWithFree (capacity: number): Arena {
    const set = this.arenasWithFree(capacity)
    for (const arena of set) {
      if (arena.hasFree) {
        // The slot about to be lent may be the last: only arenas with free slots stay listed.
        if (arena.idleBytes === arena.capacity) set.delete(arena)
        return arena
      }
    }
    this.makeRoom(ARENA_BYTES)
    const arena = new Arena(capacity)
    this.arenaOf.set(arena.memory, arena)
    this.collected.register(arena.memory, ARENA_BYTES, arena.memory)
    this.slabBytes += ARENA_BYTES
    if (Math.floor(ARENA_BYTES / capacity) > 1) set.add(arena)
    return arena
  }

  private giveSlot (arena: Arena, bytes: Buffer): void {
    if (!arena.takeBack(bytes)) return // given back already
    const set = this.arenasWithFree(arena.capacity)
    if (arena.lent === 0 && this.slabBytes > this.limitBytes) {
      set.delete(arena)
      this.forget(arena.memory, ARENA_BYTES)
      return
    }
    set.add(arena)
  }

  private arenasWithFree (capacity: number): Set<Arena> {
    let set = this.withFree.get(capacity)
    if (set === undefined) this.withFree.set(capacity, set = new Set())
    return set
  }

  /** Lets idle slabs, then wholly idle arenas, go until `bytes` more fit the limit. */
  private makeRoom (bytes: number): void {
    for (const [size, list] of this.idle) {
      while (list.length > 0 && this.slabBytes + bytes > this.limitBytes) {
        this.forget(list.pop()!, size)
      }
      if (list.length === 0) this.idle.delete(size)
      if (this.slabBytes + bytes <= this.limitBytes) return
    }
    for (const set of this.withFree.values()) {
      for (const arena of set) {
        if (this.slabBytes + bytes <= this.limitBytes) return
        if (arena.lent > 0) continue
        set.delete(arena)
        this.forget(arena.memory, ARENA_BYTES)
      }
    }
  }

  private forget (memory: ArrayBuffer, bytes: number): void {
    this.collected.unregister(memory)
    this.slabBytes -= bytes
  }
}
