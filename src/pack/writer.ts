/**
 * `redirfs pack`: writes a dataset as contiguous physical chunks.
 *
 * Chunks are cut exactly as the mount's layout cuts them (same K, same
 * seed), so a mounted pack reads each chunk with one read: the class
 * layout's, each chunk of one class, or with `--layout shared` the shared
 * layout's, each chunk a cross-section of the classes, for a dataset of
 * many classes on little memory (docs/design.md, "Shared chunks"). Memory stays at
 * about one chunk of file bytes whatever the dataset size: files are read a
 * chunk at a time and written out before the next chunk is read (in a
 * bucket, a few upload parts more).
 *
 * The chunks go into segments of about `--segment-size` bytes, each holding
 * whole chunks (format.ts). The dataset comes from a directory or from a
 * bucket (`PackInput`); the pack goes to a directory or to a bucket
 * (output.ts), never visible half-written.
 *
 * Sharded (`--nodes N`, for a cluster without shared storage): `<out>` holds
 * one pack per node, `node-<i>`, each with the whole tree (every node shows
 * the same mount) but only the chunks whose home is node i; the others keep
 * length 0 in its index. Homes are those of the cluster layout.
 */
import path from 'node:path'
import { crc32 } from 'node:zlib'
import { native } from '../chunks/native'
import { SampleBuffers } from '../chunks/sample-buffers'
import { readIncludeList, scanTree } from '../chunks/scan'
import { codeOf, describeSystemError, isForUser, UsageError } from '../errors'
import { cutPhysicalChunks, homeOfChunk } from '../redirect/layout'
import { buildSharedLayout } from '../redirect/shared-layout'
import { planMemory } from '../redirect/budget'
import { EntryKind as TreeKind, type DatasetTree } from '../chunks/tree'
import { allocateArrays, CHUNK_ALIGNMENT, encodeIndex, EntryKind, NO_CHUNK, versionFor, type PackHeader, type PackLayoutKind } from './format'
import { DirectoryOutput, type OutputFile, type PackOutput } from './output'
import { OTHERS_FILE, segmentName } from './storage'
import { promises as fs } from 'node:fs'

/** The segment size when none is given: within the 100 MB - 1 GB that AWS advises for objects read by range. */
export const DEFAULT_SEGMENT_SIZE = 256 * 2 ** 20

/** What a pack is made from: a scanned tree, and a way to read its files whole. */
export interface PackInput {
  /** Where it is, for messages. */
  readonly where: string
  readonly tree: DatasetTree
  /** The bytes of these tree entries, each exactly its scanned size (a UsageError when one changed), in buffers lent by `buffers`. */
  read (entries: readonly number[], buffers: SampleBuffers): Promise<Buffer[]>
}

export interface PackOptions {
  chunkSize: number
  seed: number
  /** How chunks are cut (default 'class': each of one class; 'shared': each a cross-section of the classes, one node only). */
  layout?: PackLayoutKind
  /** Coarser redirect groups (grouping.ts); recorded in the pack. */
  groupDepth?: number
  /** Leave out entries that cannot be served instead of failing. */
  skipUnservable?: boolean
  extensions?: string[]
  includeFile?: string
  /** Write one pack per node (`<out>/node-<i>`), each holding that node's home chunks. */
  nodes?: number
  /** Segments are cut at about this many bytes (default DEFAULT_SEGMENT_SIZE); a chunk larger than it is a segment of its own. */
  segmentSize?: number
  /** Called as bytes are written: (done, total). */
  onProgress?: (done: number, total: number) => void
  onWarning?: (message: string) => void
}

export interface PackSummary {
  samples: number
  others: number
  chunks: number
  sampleBytes: number
  indexBytes: number
  /** Segment files written (of the last shard, for --nodes). */
  segments: number
  groups: readonly string[]
  layout: PackLayoutKind
  /** The least --memory a one-node mount of it takes: a chunk of every group in the class layout, none in the shared one. */
  leastMemoryBytes: number
  /** Entries of the source left out (`skipUnservable`). */
  skipped: number
}

/** Scans a directory for packing: the input of `writePack` for a dataset on a filesystem. */
export async function directoryInput (source: string, options: Pick<PackOptions, 'includeFile' | 'extensions' | 'groupDepth' | 'skipUnservable' | 'onWarning'>): Promise<PackInput> {
  const sourceStat = await fs.stat(source).catch(() => undefined)
  if (sourceStat === undefined) throw new UsageError(`source ${source} does not exist`)
  if (!sourceStat.isDirectory()) throw new UsageError(`source ${source} is not a directory`)
  const include = options.includeFile !== undefined ? await readIncludeList(options.includeFile) : undefined
  // A pack keeps modes, not ACLs, and may later be mounted for everyone: an ACL'd entry keeps its owner's bits only.
  const tree = await scanTree(source, { include, extensions: options.extensions, groupDepth: options.groupDepth, skipUnservable: options.skipUnservable, foldAcls: true, onWarning: options.onWarning })
  return {
    where: source,
    tree,
    read: async (entries, buffers) => {
      const relatives = entries.map(entry => tree.pathOf(entry))
      const expected = entries.map(entry => tree.columns.size[entry])
      // One byte over the scanned size, so a file that grew shows.
      const targets = expected.map(size => buffers.take(size + 1))
      const results = await native().readFiles(relatives.map(r => path.join(source, r)), targets)
      return results.map((result, i) => {
        if (result instanceof Error) throw new UsageError(`cannot read ${relatives[i]}: ${result.message}`)
        const length = typeof result === 'number' ? result : result.length
        if (length !== expected[i]) throw new UsageError(`${relatives[i]} changed while packing (${expected[i]} bytes when scanned, ${length} now)`)
        return targets[i].subarray(0, length)
      })
    }
  }
}

/** Packs `input` into `output` (a directory when given as a path). */
export async function writePack (input: PackInput | string, output: PackOutput | string, options: PackOptions): Promise<PackSummary> {
  const source = typeof input === 'string' ? await directoryInput(input, options) : input
  const out = typeof output === 'string' ? new DirectoryOutput(output) : output
  const nodes = options.nodes ?? 1
  const segmentSize = options.segmentSize ?? DEFAULT_SEGMENT_SIZE
  const kind = options.layout ?? 'class'
  if (kind === 'shared' && nodes > 1) throw new UsageError('--layout shared packs for one node: a cluster mounts the class layout (leave out --layout, or --nodes)')
  const { tree } = source
  const { groups, chunksOfGroup } = cutPhysicalChunks(tree.samples, options.chunkSize, options.seed)
  const chunks = kind === 'shared' ? buildSharedLayout(tree.samples, { chunkSize: options.chunkSize, seed: options.seed }).pcs.map(pc => [...pc.files]) : chunksOfGroup.flat()
  const homes = chunksOfGroup.flatMap((groupChunks, group) => groupChunks.map((_, i) => homeOfChunk(group, i, nodes)))
  const byPath = tree.entriesByPath()
  const sampleBytes = tree.samples.reduce((sum, s) => sum + s.size, 0)
  const otherBytes = byPath.reduce((sum, { entry }) => sum + (tree.kindOf(entry) === TreeKind.Other ? tree.columns.size[entry] : 0), 0)
  // The writer's own pool: what it reads goes back once written, so a pack of any size needs a few chunks of memory.
  const layout: PackLayout = { source, buffers: new SampleBuffers(), kind, chunks, byPath, chunkSize: options.chunkSize, seed: options.seed, groupDepth: options.groupDepth, sampleBytes, segmentSize }

  await out.begin({ private: holdsPrivateData(tree) })
  try {
    let written = 0
    const progress = (bytes: number): void => { written += bytes; options.onProgress?.(written, sampleBytes + nodes * otherBytes) }
    let summary: Omit<PackSummary, 'groups' | 'layout' | 'leastMemoryBytes' | 'skipped'>
    if (nodes === 1) {
      summary = await writeOnePack(layout, out, () => true, undefined, progress)
    } else {
      // One pack per node, each with the whole tree but only its home chunks.
      for (let node = 0; node < nodes; node++) {
        summary = await writeOnePack(layout, await out.inside(shardName(node)), c => homes[c] === node, { nodes, node }, progress)
      }
    }
    await out.commit()
    const leastMemoryBytes = kind === 'shared' ? 0 : planMemory(tree.samples, options.chunkSize, 0, nodes).minimumBytes
    return { ...summary!, groups, layout: kind, leastMemoryBytes, skipped: tree.skipped.length }
  } catch (err) {
    await out.abort().catch(() => {})
    if (codeOf(err) !== undefined && !isForUser(err)) throw new UsageError(`cannot write the pack ${out.where}: ${describeSystemError(err)}; nothing was left behind`, { cause: err })
    throw err
  }
}

/** The directory of node `node`'s shard inside a `--nodes` pack. */
export const shardName = (node: number): string => `node-${node}`

interface PackLayout {
  source: PackInput
  buffers: SampleBuffers
  kind: PackLayoutKind
  chunks: number[][]
  /** The tree's entries in path order, as the pack lists them. */
  byPath: { entry: number, path: string }[]
  chunkSize: number
  seed: number
  groupDepth?: number
  sampleBytes: number
  segmentSize: number
}

/** Writes one pack: the whole tree, the chunks `holds` selects (in segments), the non-sample files, and last the index. */
async function writeOnePack (layout: PackLayout, out: PackOutput, holds: (chunk: number) => boolean, shard: { nodes: number, node: number } | undefined, progress: (bytes: number) => void): Promise<Omit<PackSummary, 'groups' | 'layout' | 'leastMemoryBytes' | 'skipped'>> {
  const { source, buffers, chunks, byPath } = layout
  const tree: DatasetTree = source.tree
  const indexOfEntry = new Uint32Array(tree.count)
  byPath.forEach(({ entry }, i) => { indexOfEntry[entry] = i })
  const arrays = allocateArrays(byPath.length, chunks.length)
  let pathEnd = 0
  byPath.forEach(({ entry, path: relative }, i) => {
    const a = tree.attributes(entry)
    arrays.size[i] = a.size; arrays.atimeMs[i] = a.atimeMs; arrays.mtimeMs[i] = a.mtimeMs; arrays.ctimeMs[i] = a.ctimeMs
    arrays.atimeNsec[i] = a.atimeNsec; arrays.mtimeNsec[i] = a.mtimeNsec; arrays.ctimeNsec[i] = a.ctimeNsec
    arrays.mode[i] = a.mode; arrays.uid[i] = a.uid; arrays.gid[i] = a.gid
    const kind = tree.kindOf(entry)
    arrays.kind[i] = kind === TreeKind.Directory ? EntryKind.Directory : kind === TreeKind.Sample ? EntryKind.Sample : EntryKind.Other
    arrays.chunk[i] = NO_CHUNK
    pathEnd += Buffer.byteLength(relative)
    arrays.pathEnd[i] = pathEnd
  })

  // The segments: each held chunk aligned in its segment; the next one is read while this one is written.
  // A chunk this pack does not hold keeps length 0 (its files' chunk number is still recorded).
  const held = chunks.map((_, c) => c).filter(holds)
  for (const [c, files] of chunks.entries()) for (const id of files) arrays.chunk[indexOfEntry[tree.samples[id].entry]] = c
  const readChunk = (c: number | undefined): Promise<Buffer[]> | undefined => {
    if (c === undefined) return undefined
    const reading = source.read(chunks[c].map(id => tree.samples[id].entry), buffers)
    // Read while the chunk before is written: a failure is met when it is awaited, not as an unhandled rejection before.
    reading.catch(() => {})
    return reading
  }
  let segment: OutputFile | undefined
  let segments = 0
  let position = 0
  const closeSegment = async (): Promise<void> => {
    if (segment === undefined) return
    // Pad the end so the last chunk's aligned read is whole blocks.
    const tail = (CHUNK_ALIGNMENT - (position % CHUNK_ALIGNMENT)) % CHUNK_ALIGNMENT
    if (tail > 0) await segment.write(Buffer.alloc(tail))
    await segment.close()
    segment = undefined
  }
  let next = readChunk(held[0])
  try {
    for (let h = 0; h < held.length; h++) {
      const c = held[h]
      const bytes = await next!
      next = readChunk(held[h + 1])
      const length = bytes.reduce((sum, b) => sum + b.length, 0)
      const padding = (CHUNK_ALIGNMENT - (position % CHUNK_ALIGNMENT)) % CHUNK_ALIGNMENT
      if (segment !== undefined && position + padding + length > layout.segmentSize) await closeSegment()
      if (segment === undefined) {
        segment = await out.create(segmentName(segments++))
        position = 0
      } else if (padding > 0) {
        await segment.write(Buffer.alloc(padding))
        position += padding
      }
      arrays.chunkSegment[c] = segments - 1
      arrays.chunkOffset[c] = position
      let chunkCrc = 0
      let offset = position
      chunks[c].forEach((id, k) => {
        const i = indexOfEntry[tree.samples[id].entry]
        arrays.location[i] = offset
        arrays.crc[i] = crc32(bytes[k])
        chunkCrc = crc32(bytes[k], chunkCrc)
        offset += bytes[k].length
      })
      const data = Buffer.concat(bytes)
      for (const file of bytes) buffers.give(file)
      await segment.write(data)
      arrays.chunkLength[c] = data.length
      arrays.chunkCrc[c] = chunkCrc
      position += data.length
      progress(data.length)
    }
    await closeSegment()
  } finally {
    // A failure leaves the chunk read ahead unused: its buffers go back.
    await next?.then(bytes => { for (const file of bytes) buffers.give(file) }, () => {})
  }

  // others.bin: non-sample files, back to back.
  const otherFile = await out.create(OTHERS_FILE)
  let otherPosition = 0
  let others = 0
  for (const [i, { entry }] of byPath.entries()) {
    if (arrays.kind[i] !== EntryKind.Other) continue
    const [bytes] = await source.read([entry], buffers)
    arrays.location[i] = otherPosition
    arrays.crc[i] = crc32(bytes)
    await otherFile.write(bytes)
    otherPosition += bytes.length
    buffers.give(bytes)
    others++
    progress(bytes.length)
  }
  await otherFile.close()

  const header: PackHeader = {
    format: 'redirfs-pack',
    version: versionFor(layout.kind),
    chunkSize: layout.chunkSize,
    seed: layout.seed,
    entries: byPath.length,
    samples: tree.samples.length,
    chunks: chunks.length,
    pathBytes: pathEnd,
    sampleBytes: layout.sampleBytes,
    createdAt: new Date().toISOString(),
    segments,
    segmentSize: layout.segmentSize,
    ...(layout.kind === 'shared' ? { layout: layout.kind } : {}),
    ...(layout.groupDepth !== undefined ? { groupDepth: layout.groupDepth } : {}),
    ...(shard !== undefined ? { nodes: shard.nodes, node: shard.node } : {})
  }
  const index = encodeIndex(header, arrays, Buffer.from(byPath.map(({ path }) => path).join('')))
  await out.writeIndex(index)
  return { samples: tree.samples.length, others, chunks: held.length, sampleBytes: layout.sampleBytes, indexBytes: index.length, segments }
}

/**
 * Whether some entry is not for everyone: a file some class of users may
 * not read (not all of 0444), or a directory some class may not list or
 * pass (not all of 0555). The pack's own modes say nothing of who reads it.
 */
function holdsPrivateData (tree: DatasetTree): boolean {
  const { kind, mode } = tree.columns
  return kind.some((k, entry) => {
    const needed = k === TreeKind.Directory ? 0o555 : 0o444
    return (mode[entry] & needed) !== needed
  })
}
