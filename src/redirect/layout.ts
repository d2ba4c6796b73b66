/**
 * Layout: which physical chunk (PC) and which virtual-chunk slot every
 * sample file has.
 *
 * The layout is a pure function of the sorted sample list, the seed, the
 * chunk size K and the number of virtual chunks (VCs), so every node of a
 * cluster computes the same one and can compare `hash` at handshake.
 *
 * - A redirect group is the directory that holds a sample (grouping.ts).
 *   A PC holds files of one group only, and a VC serves one group only:
 *   that is what makes redirection label-safe (docs/design.md, "Label
 *   safety").
 * - Within a group, files are shuffled with the seed before they are cut
 *   into PCs of K, so near-duplicate neighbours do not share a chunk.
 * - Each group gets VCs in proportion to its PC count (at least one, never
 *   more than it has PCs), and its PCs are dealt over them round-robin.
 *   The PCs mapped to a VC form its PC set, PCS(v).
 * - In a cluster of N nodes every PC has a home node, dealt round-robin
 *   within its group (starting at a node that rotates with the group, so
 *   one-chunk groups do not all land on node 0). Homes depend only on the
 *   chunking, never on memory, so a sharded pack fixes them for good. Each
 *   node's memory holds its own VCs, shared among the groups it is home to,
 *   so a VC's PCS holds PCs of one group and one home. VC ids run home by
 *   home: node 0's VCs first.
 */
import { createHash } from 'node:crypto'
import { SeededRandom } from './random'

/**
 * Files, physical chunks, virtual chunks and nodes are numbered, each from
 * 0, and the numbers are of four kinds: one passed where another belongs
 * (a VC where a file is meant) does not compile. A number becomes an id
 * (`as FileId`) only where the id is born: the layout, a message decoded
 * from a peer, a loop over all of them.
 */
declare const idKind: unique symbol
type Id<Kind extends string> = number & { readonly [idKind]: Kind }
export type FileId = Id<'file'>
export type PcId = Id<'pc'>
export type VcId = Id<'vc'>

export interface SampleFile {
  /** Path relative to the dataset root, '/'-separated. */
  readonly path: string
  readonly size: number
  /** The redirect group (grouping.ts: by default the directory that holds it). */
  readonly group: string
}

export type NodeId = Id<'node'>

export interface PhysicalChunk {
  readonly group: number
  readonly home: NodeId
  readonly vc: VcId
  /** files[offset] is the file stored at that offset; may be shorter than K. */
  readonly files: readonly FileId[]
}

export interface VirtualChunk {
  readonly group: number
  /** The node whose memory holds this VC's slots and whose disk (or pack) has its PCs. */
  readonly home: NodeId
  /** PCS(v): the physical chunks that may fill this VC. */
  readonly pcs: readonly PcId[]
}

export interface Layout {
  readonly chunkSize: number
  readonly seed: number
  /** Nodes in the cluster; 1 for a single mount. */
  readonly nodes: number
  readonly files: readonly SampleFile[]
  readonly groups: readonly string[]
  readonly pcs: readonly PhysicalChunk[]
  readonly vcs: readonly VirtualChunk[]
  readonly filePc: Uint32Array
  readonly fileOffset: Uint32Array
  readonly totalBytes: number
  /** Identifies the layout across processes and nodes: files, sizes, groups, chunks, homes. */
  readonly hash: string
}

/** Every VC's id, in order: a loop over all of them. */
export function allVcs (layout: Layout): VcId[] {
  return layout.vcs.map((_, vc) => vc as VcId)
}

/** The physical chunk file `file` was cut into. */
export function pcOfFile (layout: Layout, file: FileId): PcId {
  return layout.filePc[file] as PcId
}

/** VC(f): the virtual chunk whose slots serve file `file` (that of its physical chunk). */
export function vcOfFile (layout: Layout, file: FileId): VcId {
  return layout.pcs[layout.filePc[file]].vc
}

export interface LayoutOptions {
  chunkSize: number
  seed: number
  /** How many VCs one node's memory holds; see `planMemory` in budget.ts. */
  vcCount: number
  /** Nodes in the cluster (default 1). */
  nodes?: number
  /** The result of `cutPhysicalChunks` for these files, K and seed, if the caller already has it. */
  chunking?: PhysicalChunking
}

export function meanFileSize (files: readonly SampleFile[]): number {
  let total = 0
  for (const file of files) total += file.size
  return files.length === 0 ? 0 : total / files.length
}

export interface PhysicalChunking {
  readonly groups: readonly string[]
  /** Per group, its chunks in order; each chunk lists file ids by offset. */
  readonly chunksOfGroup: readonly FileId[][][]
}

/**
 * Cuts the files into physical chunks: per group (in sorted order), the
 * group's files shuffled with the seed, then cut into runs of K. A pack
 * stores its chunks in exactly this order.
 */
export function cutPhysicalChunks (files: readonly SampleFile[], chunkSize: number, seed: number): PhysicalChunking {
  if (!Number.isInteger(chunkSize) || chunkSize < 1) throw new RangeError(`chunk size must be a whole number ≥ 1, got ${chunkSize}`)
  const groups = [...new Set(files.map(file => file.group))].sort()
  const groupIndex = new Map(groups.map((name, index) => [name, index]))
  const membersOfGroup: FileId[][] = groups.map(() => [])
  files.forEach((file, id) => membersOfGroup[groupIndex.get(file.group)!].push(id as FileId))
  const random = new SeededRandom(seed)
  return { groups, chunksOfGroup: membersOfGroup.map(members => cutIntoChunks(random.shuffle([...members]), chunkSize)) }
}

/** The home node of the i-th chunk of a group. */
export function homeOfChunk (group: number, indexInGroup: number, nodes: number): NodeId {
  return ((group + indexInGroup) % nodes) as NodeId
}

/** Per node, how many groups it is home to: each needs at least one VC of that node's memory. */
export function groupsPerHome (chunking: PhysicalChunking, nodes: number): number[] {
  const counts = new Array<number>(nodes).fill(0)
  chunking.chunksOfGroup.forEach((chunks, group) => {
    for (let node = 0; node < nodes; node++) {
      if (chunks.some((_, i) => homeOfChunk(group, i, nodes) === node)) counts[node]++
    }
  })
  return counts
}

/**
 * Builds the layout. `files` must be sorted by path (the caller's scan
 * does this) so the result does not depend on directory order.
 * Throws a RangeError when the VCs cannot give every group one.
 */
export function buildLayout (files: readonly SampleFile[], options: LayoutOptions): Layout {
  const { chunkSize, seed } = options
  const nodes = options.nodes ?? 1
  if (!Number.isInteger(nodes) || nodes < 1) throw new RangeError(`node count must be a whole number ≥ 1, got ${nodes}`)
  const { groups, chunksOfGroup } = options.chunking ?? cutPhysicalChunks(files, chunkSize, seed)

  const pcs: PhysicalChunk[] = []
  const vcs: { group: number, home: NodeId, pcs: PcId[] }[] = []
  const filePc = new Uint32Array(files.length)
  const fileOffset = new Uint32Array(files.length)
  // PC ids follow the chunking (group by group), whatever the node count, so a pack's chunk numbers stay valid.
  const firstPcOfGroup: number[] = []
  let nextPc = 0
  for (const chunks of chunksOfGroup) { firstPcOfGroup.push(nextPc); nextPc += chunks.length }
  const pcSlots: (PhysicalChunk | undefined)[] = new Array(nextPc)

  for (let node = 0; node < nodes; node++) {
    const home = node as NodeId
    // This home's chunks, per group.
    const atHome = chunksOfGroup.map((chunks, group) => chunks.map((_, i) => i).filter(i => homeOfChunk(group, i, nodes) === home))
    const served = atHome.map((indices, group) => ({ group, indices })).filter(entry => entry.indices.length > 0)
    const pcCount = served.reduce((sum, entry) => sum + entry.indices.length, 0)
    if (pcCount === 0) continue
    const vcCount = Math.min(options.vcCount, pcCount)
    if (vcCount < served.length) {
      const where = nodes > 1 ? ` on node ${home}` : ''
      throw new RangeError(`the memory holds ${options.vcCount} chunk(s)${where} but there are ${served.length} redirect groups${where}, and each group needs at least one`)
    }
    const vcShare = shareVcs(served.map(entry => entry.indices.length), vcCount)
    served.forEach(({ group, indices }, k) => {
      const firstVc = vcs.length
      for (let i = 0; i < vcShare[k]; i++) vcs.push({ group, home, pcs: [] })
      indices.forEach((indexInGroup, i) => {
        const vc = (firstVc + (i % vcShare[k])) as VcId
        const pc = (firstPcOfGroup[group] + indexInGroup) as PcId
        const chunkFiles = chunksOfGroup[group][indexInGroup]
        pcSlots[pc] = { group, home, vc, files: chunkFiles }
        vcs[vc].pcs.push(pc)
        chunkFiles.forEach((file, offset) => { filePc[file] = pc; fileOffset[file] = offset })
      })
    })
  }
  pcs.push(...(pcSlots as PhysicalChunk[]))
  // Keep each VC's PCS in PC order, as a single node always had it.
  for (const vc of vcs) vc.pcs.sort((a, b) => a - b)

  let totalBytes = 0
  for (const file of files) totalBytes += file.size
  return { chunkSize, seed, nodes, files, groups, pcs, vcs, filePc, fileOffset, totalBytes, hash: hashLayout(files, groups, pcs, chunkSize, seed, nodes) }
}

function cutIntoChunks (members: FileId[], chunkSize: number): FileId[][] {
  const chunks: FileId[][] = []
  for (let start = 0; start < members.length; start += chunkSize) chunks.push(members.slice(start, start + chunkSize))
  return chunks
}

/**
 * Splits `vcCount` VCs over groups in proportion to their PC counts:
 * at least one each, at most one per PC, remainders to the largest
 * fractional parts (ties to the lower group index, for determinism).
 */
export function shareVcs (pcCounts: readonly number[], vcCount: number): number[] {
  const totalPcs = pcCounts.reduce((a, b) => a + b, 0)
  const quota = pcCounts.map(count => vcCount * count / totalPcs)
  const share = pcCounts.map((count, g) => Math.min(count, Math.max(1, Math.floor(quota[g]))))
  let assigned = share.reduce((a, b) => a + b, 0)
  const groupsBy = (key: (g: number) => number) => pcCounts.map((_, g) => g).sort((a, b) => key(b) - key(a) || a - b)

  // Too many (groups lifted to their minimum of one): take from the most over-served.
  const overServedFirst = groupsBy(g => share[g] - quota[g])
  while (assigned > vcCount) {
    let progressed = false
    for (const g of overServedFirst) {
      if (assigned === vcCount) break
      if (share[g] > 1) { share[g]--; assigned--; progressed = true }
    }
    if (!progressed) break
  }
  // Too few (rounding down): give to the most under-served that still have PCs to spread.
  const underServedFirst = groupsBy(g => quota[g] - share[g])
  while (assigned < vcCount) {
    let progressed = false
    for (const g of underServedFirst) {
      if (assigned === vcCount) break
      if (share[g] < pcCounts[g]) { share[g]++; assigned++; progressed = true }
    }
    if (!progressed) break
  }
  return share
}

function hashLayout (files: readonly SampleFile[], groups: readonly string[], pcs: readonly PhysicalChunk[], chunkSize: number, seed: number, nodes: number): string {
  const hash = createHash('sha256')
  hash.update(`K=${chunkSize};seed=${seed};files=${files.length};nodes=${nodes}\n`)
  pcs.forEach((pc, id) => {
    // The group name makes the grouping part of the hash: nodes (or a pack) grouping differently never agree.
    hash.update(`pc ${id} vc ${pc.vc} home ${pc.home} group ${groups[pc.group]}\n`)
    for (const file of pc.files) hash.update(`${files[file].path}\0${files[file].size}\n`)
  })
  return hash.digest('hex').slice(0, 16)
}
