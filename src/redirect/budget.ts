/**
 * How a memory budget becomes a number of virtual chunks.
 *
 * Slots take most of the budget; a fixed share is kept free for loads in
 * flight and readahead, which is what lets loads run ahead of the trainer
 * without crossing the budget. Demand loads are never held back for memory:
 * an open that waits for memory only another open can free would deadlock
 * a DataLoader whose workers are all waiting.
 *
 * Every group needs one VC, but a VC needs only as many slots as the
 * largest chunk it is filled from: a group of 2 files costs 2 slots, not
 * K, and that sets the least memory. Above it, VCs are counted at K slots
 * each, as a VC beyond a group's first costs.
 */
import { homeOfChunk, meanFileSize, type SampleFile } from './layout'

/** Share of the budget kept for loads in flight and staged readahead. */
export const READAHEAD_SHARE = 0.2

export interface MemoryPlan {
  /** VCs per node (buildLayout's `vcCount`). */
  readonly vcCount: number
  readonly meanFileSize: number
  /** The smallest budget that gives every class one VC. */
  readonly minimumBytes: number
}

/** What one node must hold a VC for: the groups it is home to, their first VCs' slots, and its chunk count. */
interface HomeNeeds { groups: number, firstSlots: number, pcs: number }

/**
 * Per node, what its groups' first VCs need. Chunks are cut per group in
 * runs of K (the last one shorter) and dealt to homes as buildLayout deals
 * them, so this depends on group sizes only, not on the seed.
 */
function needsPerHome (files: readonly SampleFile[], chunkSize: number, nodes: number): HomeNeeds[] {
  const sizeOfGroup = new Map<string, number>()
  for (const file of files) sizeOfGroup.set(file.group, (sizeOfGroup.get(file.group) ?? 0) + 1)
  const needs: HomeNeeds[] = Array.from({ length: nodes }, () => ({ groups: 0, firstSlots: 0, pcs: 0 }))
  ;[...sizeOfGroup.keys()].sort().forEach((name, group) => {
    const size = sizeOfGroup.get(name)!
    const largestAt = new Array<number>(nodes).fill(0)
    for (let i = 0, start = 0; start < size; i++, start += chunkSize) {
      const home = homeOfChunk(group, i, nodes)
      largestAt[home] = Math.max(largestAt[home], Math.min(chunkSize, size - start))
      needs[home].pcs++
    }
    largestAt.forEach((largest, home) => {
      if (largest > 0) { needs[home].groups++; needs[home].firstSlots += largest }
    })
  })
  return needs.filter(home => home.pcs > 0)
}

/**
 * `nodes`: the cluster's size (each node's memory holds the VCs of the
 * groups it is home to, and every node gets the same VC count).
 */
export function planMemory (files: readonly SampleFile[], chunkSize: number, memoryBytes: number, nodes = 1): MemoryPlan {
  const mean = meanFileSize(files)
  const bytesPerSlot = mean / (1 - READAHEAD_SHARE)
  const homes = needsPerHome(files, chunkSize, nodes)
  const groups = Math.max(0, ...homes.map(home => home.groups))
  // Each node holds min(vcCount, its chunks) VCs: its groups' first ones, and K slots for each more.
  const slotsAt = (home: HomeNeeds, vcCount: number): number => home.firstSlots + Math.max(0, Math.min(vcCount, home.pcs) - home.groups) * chunkSize
  const minimumBytes = Math.ceil(Math.max(0, ...homes.map(home => slotsAt(home, groups))) * bytesPerSlot)
  // A VC of K slots each, but never fewer than the groups where the minimum is met (there a group's first VC may
  // cost less than K; and at the minimum itself the division can round to a hair below the group count).
  const vcCount = Math.floor(memoryBytes / (chunkSize * bytesPerSlot))
  return { vcCount: memoryBytes >= minimumBytes ? Math.max(vcCount, groups) : vcCount, meanFileSize: mean, minimumBytes }
}
