/**
 * The shared-chunk layout: physical chunks that hold files of many classes.
 *
 * The class layout (layout.ts) cuts each class into chunks of its own, so
 * memory must hold at least one chunk of K files per class. Here every
 * chunk is a cross-section of the dataset: each class's files, shuffled
 * with the seed, are spread evenly along one sequence, which is cut into
 * runs of K. One read of K files then feeds up to K classes, and memory
 * needs a few files per class, not a chunk per class (docs/design.md,
 * "Shared chunks"). Redirection still answers an open only with a file of
 * the opened file's class: the class, not the chunk, is the unit of
 * redirection (shared-protocol.ts).
 *
 * Like the class layout, it is a pure function of the sorted sample list,
 * the seed and K.
 */
import { createHash } from 'node:crypto'
import type { FileId, SampleFile } from './layout'
import { SeededRandom } from './random'

export interface SharedChunk {
  /** files[offset] is the file stored at that offset; the last chunk may be shorter than K. */
  readonly files: readonly FileId[]
}

export interface SharedLayout {
  readonly chunkSize: number
  /** Files a load reads with one read: a chunk is cut into blocks of this many (1 over a directory, whose files are read one by one). */
  readonly blockSize: number
  readonly seed: number
  readonly files: readonly SampleFile[]
  readonly groups: readonly string[]
  /** The redirect group (class) of every file, as an index into `groups`. */
  readonly groupOf: Uint32Array
  /** Per group, its files. */
  readonly filesOfGroup: readonly (readonly FileId[])[]
  readonly pcs: readonly SharedChunk[]
  readonly filePc: Uint32Array
  /** The chunks cut into blocks, in order: what the protocol reads. */
  readonly blocks: readonly SharedChunk[]
  readonly fileBlock: Uint32Array
  readonly totalBytes: number
  readonly hash: string
}

/**
 * Each group's files, shuffled, get evenly spaced places on [0, 1), the
 * first at a random phase: the i-th of n at (i + phase) / n. All files in
 * order of place, cut into runs of K, make the chunks, so each chunk holds
 * every class about in proportion to its size, and a class's files sit
 * in chunks spread evenly over the whole dataset.
 */
export function buildSharedLayout (files: readonly SampleFile[], options: { chunkSize: number, blockSize?: number, seed: number }): SharedLayout {
  const { chunkSize, seed } = options
  const blockSize = Math.min(chunkSize, options.blockSize ?? chunkSize)
  if (!Number.isInteger(chunkSize) || chunkSize < 1) throw new RangeError(`chunk size must be a whole number ≥ 1, got ${chunkSize}`)
  if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`block size must be a whole number ≥ 1, got ${blockSize}`)
  const groups = [...new Set(files.map(file => file.group))].sort()
  const groupIndex = new Map(groups.map((name, index) => [name, index]))
  const groupOf = new Uint32Array(files.length)
  const filesOfGroup: FileId[][] = groups.map(() => [])
  files.forEach((file, id) => {
    const group = groupIndex.get(file.group)!
    groupOf[id] = group
    filesOfGroup[group].push(id as FileId)
  })

  const random = new SeededRandom(seed)
  const place = new Float64Array(files.length)
  for (const members of filesOfGroup) {
    random.shuffle(members)
    const phase = random.below(1 << 30) / (1 << 30)
    members.forEach((file, i) => { place[file] = (i + phase) / members.length })
  }
  const order = files.map((_, id) => id as FileId).sort((a, b) => place[a] - place[b] || groupOf[a] - groupOf[b] || a - b)

  const pcs: SharedChunk[] = []
  const blocks: SharedChunk[] = []
  const filePc = new Uint32Array(files.length)
  const fileBlock = new Uint32Array(files.length)
  for (let start = 0; start < order.length; start += chunkSize) {
    const chunk = order.slice(start, start + chunkSize)
    for (const file of chunk) filePc[file] = pcs.length
    pcs.push({ files: chunk })
    for (let at = 0; at < chunk.length; at += blockSize) {
      const block = chunk.slice(at, at + blockSize)
      for (const file of block) fileBlock[file] = blocks.length
      blocks.push({ files: block })
    }
  }
  let totalBytes = 0
  for (const file of files) totalBytes += file.size
  return { chunkSize, blockSize, seed, files, groups, groupOf, filesOfGroup, pcs, filePc, blocks, fileBlock, totalBytes, hash: hashSharedLayout(files, groups, groupOf, pcs, chunkSize, seed) }
}

function hashSharedLayout (files: readonly SampleFile[], groups: readonly string[], groupOf: Uint32Array, pcs: readonly SharedChunk[], chunkSize: number, seed: number): string {
  const hash = createHash('sha256')
  hash.update(`shared;K=${chunkSize};seed=${seed};files=${files.length}\n`)
  pcs.forEach((pc, id) => {
    hash.update(`pc ${id}\n`)
    for (const file of pc.files) hash.update(`${files[file].path}\0${files[file].size}\0${groups[groupOf[file]]}\n`)
  })
  return hash.digest('hex').slice(0, 16)
}
