/**
 * A chunk source delivers the bytes of a physical chunk's files. The
 * engine does not care whether they come from a directory of loose files,
 * a pack file or a peer; each source reports what it read in its own
 * stats section.
 */
import type { FileId } from '../redirect/layout'

export interface ChunkRequest {
  readonly pc: number
  /** The files wanted, in offset order. */
  readonly files: readonly FileId[]
  /** The file among them an exact open waits for: it goes to that open's handle, not into memory's budget. */
  readonly forOpener?: FileId
  /** The load this is one read of, where a load takes several (the shared layout over a pack reads each block apart). */
  readonly load?: number
}

export interface ChunkSource {
  /**
   * True when the source reads file by file whatever chunk a file is in
   * (a directory): a load that takes files of several chunks is then one
   * request, not one per chunk.
   */
  readonly readsFileByFile: boolean
  /**
   * Resolves with the bytes of every file it could read; files missing from
   * the map failed (the source logs why). Never rejects for a single bad file.
   */
  fetch (request: ChunkRequest): Promise<Map<FileId, Buffer>>
  stats (): Record<string, number | string>
  close (): Promise<void>
}
