/**
 * `redirfs pack`: writes a dataset as contiguous physical chunks.
 *
 * Chunks are cut exactly as the mount's layout cuts them (same K, same
 * seed), so a mounted pack reads each chunk with one read. Memory stays at
 * about one chunk of file bytes whatever the dataset size: files are read a
 * chunk at a time and written out before the next chunk is read.
 *
 * Atomic: everything is written into `<out>.partial-<pid>`, fsynced, and
 * only then renamed to `<out>`; an interrupted pack leaves no `<out>`, and
 * a `.partial` directory has no index that could pass for a pack.
 *
 * Sharded (`--nodes N`, for a cluster without shared storage): `<out>` holds
 * one pack per node, `node-<i>`, each with the whole tree (every node shows
 * the same mount) but only the chunks whose home is node i; the others keep
 * length 0 in its index. Homes are those of the cluster layout.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { crc32 } from 'node:zlib'
import { native } from '../chunks/native'
import { sampleBuffers } from '../chunks/sample-buffers'
import { readIncludeList, scanTree } from '../chunks/scan'
import { codeOf, describeSystemError, isForUser, UsageError } from '../errors'
import { cutPhysicalChunks, homeOfChunk } from '../redirect/layout'
import { EntryKind as TreeKind, type DatasetTree } from '../chunks/tree'
import { allocateArrays, CHUNK_ALIGNMENT, encodeIndex, EntryKind, NO_CHUNK, PACK_VERSION, type PackHeader } from './format'
import { CHUNKS_FILE, INDEX_FILE, OTHERS_FILE } from './pack-index'

export interface PackOptions {
  chunkSize: number
  seed: number
  /** Coarser redirect groups (grouping.ts); recorded in the pack. */
  groupDepth?: number
  /** Leave out entries that cannot be served instead of failing. */
  skipUnservable?: boolean
  extensions?: string[]
  includeFile?: string
  /** Write one pack per node (`<out>/node-<i>`), each holding that node's home chunks. */
  nodes?: number
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
  groups: readonly string[]
  /** Entries of the source left out (`skipUnservable`). */
  skipped: number
}

export async function writePack (source: string, out: string, options: PackOptions): Promise<PackSummary> {
  const sourceStat = await fs.stat(source).catch(() => undefined)
  if (sourceStat === undefined) throw new UsageError(`source ${source} does not exist`)
  if (!sourceStat.isDirectory()) throw new UsageError(`source ${source} is not a directory`)
  if (await fs.stat(out).then(() => true, () => false)) throw new UsageError(`${out} already exists; remove it or choose another output`)
  if (!(await fs.stat(path.dirname(out)).then(s => s.isDirectory(), () => false))) throw new UsageError(`the directory of ${out} does not exist`)
  const nodes = options.nodes ?? 1

  const include = options.includeFile !== undefined ? await readIncludeList(options.includeFile) : undefined
  const tree = await scanTree(source, { include, extensions: options.extensions, groupDepth: options.groupDepth, skipUnservable: options.skipUnservable, onWarning: options.onWarning })
  const { groups, chunksOfGroup } = cutPhysicalChunks(tree.samples, options.chunkSize, options.seed)
  const chunks = chunksOfGroup.flat()
  const homes = chunksOfGroup.flatMap((groupChunks, group) => groupChunks.map((_, i) => homeOfChunk(group, i, nodes)))
  const byPath = tree.entriesByPath()
  const sampleBytes = tree.samples.reduce((sum, s) => sum + s.size, 0)
  const otherBytes = byPath.reduce((sum, { entry }) => sum + (tree.kindOf(entry) === TreeKind.Other ? tree.columns.size[entry] : 0), 0)
  const layout: PackLayout = { source, tree, chunks, byPath, chunkSize: options.chunkSize, seed: options.seed, groupDepth: options.groupDepth, sampleBytes }

  const partial = `${out}.partial-${process.pid}`
  await fs.mkdir(partial).catch((err: unknown) => { throw new UsageError(`cannot write the pack ${out}: ${describeSystemError(err)}`, { cause: err }) })
  try {
    let written = 0
    const progress = (bytes: number): void => { written += bytes; options.onProgress?.(written, sampleBytes + nodes * otherBytes) }
    let summary: Omit<PackSummary, 'groups' | 'skipped'>
    if (nodes === 1) {
      summary = await writeOnePack(layout, partial, () => true, undefined, progress)
    } else {
      // One pack per node, each with the whole tree but only its home chunks.
      for (let node = 0; node < nodes; node++) {
        const shard = path.join(partial, shardName(node))
        await fs.mkdir(shard)
        summary = await writeOnePack(layout, shard, c => homes[c] === node, { nodes, node }, progress)
        await syncDirectory(shard)
      }
    }
    await syncDirectory(partial)
    await fs.rename(partial, out)
    await syncDirectory(path.dirname(out))
    return { ...summary!, groups, skipped: tree.skipped.length }
  } catch (err) {
    await fs.rm(partial, { recursive: true, force: true })
    if (codeOf(err) !== undefined && !isForUser(err)) throw new UsageError(`cannot write the pack ${out}: ${describeSystemError(err)}; nothing was left behind`, { cause: err })
    throw err
  }
}

/** The directory of node `node`'s shard inside a `--nodes` pack. */
export const shardName = (node: number): string => `node-${node}`

interface PackLayout {
  source: string
  tree: DatasetTree
  chunks: number[][]
  /** The tree's entries in path order, as the pack lists them. */
  byPath: { entry: number, path: string }[]
  chunkSize: number
  seed: number
  groupDepth?: number
  sampleBytes: number
}

/** Writes one pack into `directory`: the whole tree, the chunks `holds` selects, the non-sample files. */
async function writeOnePack (layout: PackLayout, directory: string, holds: (chunk: number) => boolean, shard: { nodes: number, node: number } | undefined, progress: (bytes: number) => void): Promise<Omit<PackSummary, 'groups' | 'skipped'>> {
  const { source, tree, chunks, byPath } = layout
  const entryOf = new Map(byPath.map(({ path }, i) => [path, i]))
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
  const readBatch = async (files: { path: string, size: number }[]): Promise<Buffer[]> => {
    const relatives = files.map(file => file.path)
    const expected = files.map(file => file.size)
    // One byte over the scanned size, so a file that grew shows.
    const targets = expected.map(size => sampleBuffers.take(size + 1))
    const results = await native().readFiles(relatives.map(r => path.join(source, r)), targets)
    return results.map((result, i) => {
      if (result instanceof Error) throw new UsageError(`cannot read ${relatives[i]}: ${result.message}`)
      const length = typeof result === 'number' ? result : result.length
      if (length !== expected[i]) throw new UsageError(`${relatives[i]} changed while packing (${expected[i]} bytes when scanned, ${length} now)`)
      return targets[i].subarray(0, length)
    })
  }

  // chunks.bin: each held chunk aligned; the next one is read while this one is written.
  // A chunk this pack does not hold keeps length 0 (its files' chunk number is still recorded).
  const held = chunks.map((_, c) => c).filter(holds)
  for (const [c, files] of chunks.entries()) for (const id of files) arrays.chunk[entryOf.get(tree.samples[id].path)!] = c
  const chunkFile = await fs.open(path.join(directory, CHUNKS_FILE), 'w')
  let position = 0
  const readChunk = (c: number | undefined): Promise<Buffer[]> | undefined => c === undefined ? undefined : readBatch(chunks[c].map(id => tree.samples[id]))
  let next = readChunk(held[0])
  for (let h = 0; h < held.length; h++) {
    const c = held[h]
    const bytes = await next!
    next = readChunk(held[h + 1])
    position += (CHUNK_ALIGNMENT - (position % CHUNK_ALIGNMENT)) % CHUNK_ALIGNMENT
    arrays.chunkOffset[c] = position
    let chunkCrc = 0
    let offset = position
    chunks[c].forEach((id, k) => {
      const entry = entryOf.get(tree.samples[id].path)!
      arrays.location[entry] = offset
      arrays.crc[entry] = crc32(bytes[k])
      chunkCrc = crc32(bytes[k], chunkCrc)
      offset += bytes[k].length
    })
    const data = Buffer.concat(bytes)
    for (const file of bytes) sampleBuffers.give(file)
    await chunkFile.write(data, 0, data.length, position)
    arrays.chunkLength[c] = data.length
    arrays.chunkCrc[c] = chunkCrc
    position += data.length
    progress(data.length)
  }
  // Pad the end so the last chunk's aligned read is whole blocks.
  const tail = (CHUNK_ALIGNMENT - (position % CHUNK_ALIGNMENT)) % CHUNK_ALIGNMENT
  if (tail > 0) await chunkFile.write(Buffer.alloc(tail), 0, tail, position)
  await chunkFile.sync()
  await chunkFile.close()

  // others.bin: non-sample files, back to back.
  const otherFile = await fs.open(path.join(directory, OTHERS_FILE), 'w')
  let otherPosition = 0
  let others = 0
  for (const [i, { entry, path: relative }] of byPath.entries()) {
    if (arrays.kind[i] !== EntryKind.Other) continue
    const [bytes] = await readBatch([{ path: relative, size: tree.columns.size[entry] }])
    arrays.location[i] = otherPosition
    arrays.crc[i] = crc32(bytes)
    await otherFile.write(bytes, 0, bytes.length, otherPosition)
    otherPosition += bytes.length
    others++
    progress(bytes.length)
  }
  await otherFile.sync()
  await otherFile.close()

  const header: PackHeader = {
    format: 'redirfs-pack',
    version: PACK_VERSION,
    chunkSize: layout.chunkSize,
    seed: layout.seed,
    entries: byPath.length,
    samples: tree.samples.length,
    chunks: chunks.length,
    pathBytes: pathEnd,
    sampleBytes: layout.sampleBytes,
    createdAt: new Date().toISOString(),
    ...(layout.groupDepth !== undefined ? { groupDepth: layout.groupDepth } : {}),
    ...(shard !== undefined ? { nodes: shard.nodes, node: shard.node } : {})
  }
  const index = encodeIndex(header, arrays, Buffer.from(byPath.map(({ path }) => path).join('')))
  const indexFile = await fs.open(path.join(directory, INDEX_FILE), 'w')
  await indexFile.write(index)
  await indexFile.sync()
  await indexFile.close()
  return { samples: tree.samples.length, others, chunks: held.length, sampleBytes: layout.sampleBytes, indexBytes: index.length }
}

async function syncDirectory (directory: string): Promise<void> {
  const handle = await fs.open(directory, 'r')
  try { await handle.sync() } finally { await handle.close() }
}
