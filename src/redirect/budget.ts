/**
 * How a memory budget becomes a number of virtual chunks.
 *
 * Slots take most of the budget; a fixed share is kept free for loads in
 * flight and readahead, which is what lets loads run ahead of the trainer
 * without crossing the budget. Demand loads are never held back for memory:
 * an open that waits for memory only another open can free would deadlock
 * a DataLoader whose workers are all waiting.
 */
import { meanFileSize, type SampleFile } from './layout'

/** Share of the budget kept for loads in flight and staged readahead. */
export const READAHEAD_SHARE = 0.2

export interface MemoryPlan {
  readonly vcCount: number
  readonly meanFileSize: number
  /** The smallest budget that gives every class one VC. */
  readonly minimumBytes: number
}

/**
 * `groupsToServe`: the most groups any one node is home to (in a cluster a
 * node may be home to fewer than all); by default every group.
 */
export function planMemory (files: readonly SampleFile[], chunkSize: number, memoryBytes: number, groupsToServe?: number): MemoryPlan {
  const mean = meanFileSize(files)
  const groups = groupsToServe ?? new Set(files.map(file => file.group)).size
  const bytesPerVc = chunkSize * mean / (1 - READAHEAD_SHARE)
  const minimumBytes = Math.ceil(groups * bytesPerVc)
  // At the minimum itself, memory / bytesPerVc can round to a hair below the group count.
  const vcCount = Math.floor(memoryBytes / bytesPerVc)
  return { vcCount: memoryBytes >= minimumBytes ? Math.max(vcCount, groups) : vcCount, meanFileSize: mean, minimumBytes }
}
