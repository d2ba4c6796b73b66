/**
 * What the protocol did, as plain numbers. Every layer that adds a
 * capability (chunk sources, peers) extends the stats object with its own
 * section rather than growing this one.
 */
import type { FileId } from './layout'

export interface ProtocolCounters {
  /** Opens of sample files. */
  opens: number
  /** Opens answered at once from memory, without waiting for a load. */
  memoryHits: number
  /** Opens answered with a file other than the one opened. */
  redirects: number
  /** Opens that asked for their own file (a loader that stats the path first), and of those, files served a second time in an epoch. */
  exactOpens: number
  exactRepeats: number
  /** Opens that had to wait for a chunk load (their own or one in flight). */
  waitedOpens: number
  /** Opens answered with an I/O error because their file could not be read. */
  failedOpens: number
  /** Chunk loads completed, demand and readahead. */
  chunkLoads: number
  /** Of those, loads started ahead of need. */
  readaheadLoads: number
  /** Readahead loads not started because bytes bound to open files took their room (tried again at later opens). */
  readaheadHeldBack: number
  /** Files placed in memory by loads. */
  filesLoaded: number
  /** Files of loaded chunks that were not placed (a whole-chunk reader reads them for nothing). */
  wastedFiles: number
  wastedBytes: number
  /** Files a chunk source failed to deliver. */
  failedFiles: number
  /** Per-VC epoch rollovers. */
  rollovers: number
  /** Explicit resets of every VC's epoch (`redirfs reset`). */
  resets: number
  /** New training runs, each of which started a new epoch (src/runs). */
  newRuns: number
  /** Files whose opener went away before it got them, given back to wait for another open. */
  returnedFiles: number
  /** Bytes held in slots and staged chunks now, and the most ever. */
  residentBytes: number
  peakResidentBytes: number
  /** Bytes of loads in flight now. */
  inflightBytes: number
  /** Cluster, home side: opens answered for other nodes. */
  remoteOpens: number
  /** Files shipped into other nodes' mirrors in opportunistic batches. */
  prefetchShipped: number
  /** Rounds of asking mirrors what they hold before a VC's epoch may end, and files they gave back. */
  reclaims: number
  reclaimedFiles: number
  /** Files a dead node held in its mirror, made loadable again. */
  lostHeldFiles: number
  /** Answers to other nodes' opens lost on the way (their connection broke), made servable again. */
  lostAnswers: number
  /** VCs taken over from a dead home. */
  takeovers: number
}

/** Counts how an open was answered: at once from memory (redirected or not), or not at once; a retry is not an open. */
export function countAnswer (counters: ProtocolCounters, opened: FileId, served: FileId | undefined, retry: boolean): void {
  if (served !== undefined) {
    if (!retry) counters.memoryHits++
    if (served !== opened) counters.redirects++
  } else if (!retry) {
    counters.waitedOpens++
  }
}

/** Notes the bytes resident now, and the most ever held with loads in flight. */
export function noteMemory (counters: ProtocolCounters, residentBytes: number): void {
  counters.residentBytes = residentBytes
  const inMemory = residentBytes + counters.inflightBytes
  if (inMemory > counters.peakResidentBytes) counters.peakResidentBytes = inMemory
}

export function zeroCounters (): ProtocolCounters {
  return {
    opens: 0,
    memoryHits: 0,
    redirects: 0,
    exactOpens: 0,
    exactRepeats: 0,
    waitedOpens: 0,
    failedOpens: 0,
    chunkLoads: 0,
    readaheadLoads: 0,
    readaheadHeldBack: 0,
    filesLoaded: 0,
    wastedFiles: 0,
    wastedBytes: 0,
    failedFiles: 0,
    rollovers: 0,
    resets: 0,
    newRuns: 0,
    returnedFiles: 0,
    residentBytes: 0,
    peakResidentBytes: 0,
    inflightBytes: 0,
    remoteOpens: 0,
    prefetchShipped: 0,
    reclaims: 0,
    reclaimedFiles: 0,
    lostHeldFiles: 0,
    lostAnswers: 0,
    takeovers: 0
  }
}
