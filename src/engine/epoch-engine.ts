/**
 * What both engines do alike (engine.ts runs the class protocol,
 * shared-engine.ts the shared one): answers carry the epoch state they
 * were given in, and a file's bytes follow the protocol's word when a run
 * begins, a reset starts every epoch afresh, a failed answer's charge is
 * undone or an answer comes back unread. The protocols keep their epochs
 * differently (per VC, per class); these moves on them are the same.
 */
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import type { ChunkSource } from '../chunks/source'
import { FsError } from '../errors'
import type { ProtocolCounters } from '../redirect/counters'
import type { FileId } from '../redirect/layout'
import type { MountStats } from '../stats'
import { ResidentBytes } from './memory'

/** An open whose sample could not be read (EIO), and the unreadable file it was charged with, when one was. */
export class UnreadableSample extends FsError {
  constructor (message: string, readonly charged?: FileId, readonly generation?: number) { super('EIO', message) }
}

/**
 * An open whose opener no longer wants an answer (an orphaned worker of a
 * run that ended, `OpenOptions.wanted`): what it was answered with went
 * back before any other open decided.
 */
export class OrphanedOpen extends FsError {
  constructor () { super('EIO', 'an orphaned worker of a run that ended') }
}

export interface OpenOptions {
  /** The file itself (see the protocol's `OpenOptions`). */
  readonly exact?: boolean
  /**
   * Whether the opener still wants an answer, asked when one is ready. An
   * answer the opener no longer wants goes back (its file to its slot, or
   * the charge of an unreadable one undone) before the opens waiting on
   * the same VC decide: decided first, they would take that file for one
   * this epoch already served, and end the epoch early (strict) or read it
   * again.
   */
  readonly wanted?: () => boolean
}

export interface ServedFile {
  /** The file whose bytes these are (differs from the opened one when redirected). */
  readonly file: FileId
  readonly bytes: Buffer
  /** The epoch state it was answered in (`generation`): given back after a new run or a reset began, it belongs to none. */
  readonly generation?: number
}

/** The moves on a protocol's epochs that both engines make alike. */
export interface EpochProtocol {
  readonly counters: ProtocolCounters
  /** Every epoch starts afresh for a new run; gives the files waiting in memory it dropped. */
  startNewRun: () => FileId[]
  /** Every epoch starts afresh; gives the files waiting in memory it dropped. */
  reset: () => FileId[]
  /** A failed answer whose opener must not count: its file is charged to another open. */
  uncharge: (file: FileId) => void
  /** An answer nobody got: back in memory for another open, or let go. */
  returnUnserved: (file: FileId) => 'placed' | 'dropped'
  /** Files let go outside a load, whose bytes can be freed. */
  takeDropped: () => FileId[]
}

export abstract class EpochEngine {
  protected readonly resident: ResidentBytes
  protected readonly loadsInFlight = new Set<Promise<unknown>>()

  constructor (
    private readonly epochs: EpochProtocol,
    files: number,
    /** What the resident bytes are, for messages: 'home slots', 'class stocks'. */
    residentName: string,
    protected readonly source: ChunkSource,
    /** The pool the source reads into: bytes nobody will be served go back to it. */
    protected readonly buffers: SampleBuffers,
    protected readonly log: Logger
  ) {
    this.resident = new ResidentBytes(residentName, files, buffers)
  }

  /** Answers an open of a sample file with the bytes it is bound to; `exact`: the file itself (see `OpenOptions`). */
  async open (file: FileId, options: OpenOptions = {}): Promise<ServedFile> {
    try {
      return { ...await this.answer(file, options.exact === true, options.wanted), generation: this.generation }
    } catch (err) {
      if (err instanceof UnreadableSample) throw new UnreadableSample(err.message, err.charged, this.generation)
      throw err
    }
  }

  /** An open's answer, from memory or a load; throws UnreadableSample or OrphanedOpen. */
  protected abstract answer (file: FileId, exact: boolean, wanted?: () => boolean): Promise<ServedFile>

  /** Wakes the opens parked where `file` would be served from (its VC, or its class). */
  protected abstract wakeFor (file: FileId): void

  /**
   * Which epoch state this is: it moves on when a new run begins or a reset
   * starts every epoch afresh. What was answered in another one is nobody's
   * in this one: given back, it is let go (returnUnserved would count it
   * against the wrong epoch).
   */
  get generation (): number { return this.epochs.counters.newRuns + this.epochs.counters.resets }

  /** How many runs have begun a new epoch here: the adapter checks whether one began while an open waited. */
  get newRuns (): number { return this.epochs.counters.newRuns }

  /** A new training run begins: every epoch starts afresh; gives how many files waiting in memory were dropped. */
  startNewRun (): number {
    const dropped = this.epochs.startNewRun()
    for (const file of dropped) this.resident.drop(file)
    return dropped.length
  }

  /** Starts a fresh epoch everywhere; frees the bytes of files that were waiting in memory. */
  reset (): number {
    const dropped = this.epochs.reset()
    for (const file of dropped) this.resident.drop(file)
    this.log.info({ dropped: dropped.length }, 'epoch state reset')
    return dropped.length
  }

  /** A failed answer whose opener must not count (UnreadableSample.charged): its file is charged to another open. */
  uncharge (file: FileId, generation?: number): void {
    if (generation === undefined || generation === this.generation) this.epochs.uncharge(file)
    // Uncharging may let a sit-out owed by a repeat take a file in memory: its bytes go now, before a later load
    // places that file again and a late drop takes the new bytes.
    this.freeDropped()
  }

  /** An answer whose opener went away before it got it: the file waits for another open. */
  giveBack (served: ServedFile): void {
    if (served.generation !== undefined && served.generation !== this.generation) {
      this.buffers.give(served.bytes)
      return
    }
    if (this.epochs.returnUnserved(served.file) === 'placed') {
      this.resident.set(served.file, served.bytes)
      this.wakeFor(served.file)
    } else {
      this.buffers.give(served.bytes)
    }
    this.freeDropped()
  }

  /** Frees the bytes of files the protocol let go outside a load. */
  protected freeDropped (): void {
    for (const file of this.epochs.takeDropped()) this.resident.drop(file)
  }

  /** Keeps a load (readahead) until it ends, for `drain`. */
  protected track (load: Promise<unknown>): void {
    this.loadsInFlight.add(load)
    void load.finally(() => this.loadsInFlight.delete(load))
  }

  /** Waits for readahead loads to end (for a clean shutdown). */
  async drain (): Promise<void> {
    while (this.loadsInFlight.size > 0) await Promise.allSettled([...this.loadsInFlight])
  }

  stats (): Pick<MountStats, 'protocol' | 'source'> {
    return { protocol: { ...this.epochs.counters }, source: this.source.stats() }
  }
}
