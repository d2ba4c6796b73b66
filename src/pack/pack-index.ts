/**
 * A loaded pack: the tree it presents (columns built from the index, as a
 * scan builds them), its samples in layout order, and where every byte
 * lives (its storage: a directory, or a bucket prefix).
 */
import { createHash } from 'node:crypto'
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { clip, describeSystemError, isForUser, UsageError } from '../errors'
import { Listed } from '../chunks/native'
import { DatasetTree, EntryKind as TreeKind, secondsOf, TreeBuilder } from '../chunks/tree'
import { decodeIndex, EntryKind, PACK_MAGIC, type PackArrays, type PackHeader } from './format'
import { DirectoryPackStorage, INDEX_FILE, OTHERS_FILE, SEGMENTS_DIR, type PackStorage } from './storage'
import { buildLayout, type FileId } from '../redirect/layout'
import { buildSharedLayout } from '../redirect/shared-layout'

export { INDEX_FILE, OTHERS_FILE }

export interface PackIndex {
  readonly storage: PackStorage
  /** A hash of the index's bytes: names this pack, as written, for its chunk cache. */
  readonly identity: string
  readonly header: PackHeader
  readonly arrays: PackArrays
  readonly tree: DatasetTree
  /** Entry index of each sample id. */
  readonly sampleEntry: Uint32Array
  /** Entry index by relative path, for other files. */
  entryIndex (relativePath: string): number | undefined
  path (entry: number): string
}

/**
 * A directory that has a pack's files but whose index is not one: a
 * damaged pack, which must not be mounted as if it were a plain dataset.
 * (An older pack's chunks.bin counts: its index says what to do.)
 */
export async function looksLikeDamagedPack (directory: string): Promise<boolean> {
  const isFile = async (name: string): Promise<boolean> => await fs.stat(path.join(directory, name)).then(s => s.isFile() || s.isDirectory(), () => false)
  const chunks = await isFile(SEGMENTS_DIR) || await isFile('chunks.bin')
  return chunks && await isFile(INDEX_FILE) && !(await isPack(directory))
}

/** True when `directory` (or a storage) holds a pack index (by its magic). */
export async function isPack (where: string | PackStorage): Promise<boolean> {
  const storage = typeof where === 'string' ? new DirectoryPackStorage(where) : where
  return await storage.hasIndex(PACK_MAGIC)
}

/** Loads the pack in `where`: a directory, or a storage (a bucket prefix). */
export async function loadPackIndex (where: string | PackStorage): Promise<PackIndex> {
  const storage = typeof where === 'string' ? new DirectoryPackStorage(where) : where
  const file = `${storage.where}/${INDEX_FILE}`
  const bytes = await storage.readIndex().catch((err: unknown) => {
    if (isForUser(err)) throw err
    throw new UsageError((err as NodeJS.ErrnoException).code === 'ENOTDIR' ? `${storage.where} is not a redirfs pack (a pack is a directory)` : `cannot read ${file}: ${describeSystemError(err)}`)
  })
  if (bytes === undefined) throw new UsageError(`${storage.where} is not a redirfs pack (no ${INDEX_FILE}; an interrupted pack leaves none)`)
  const { header, arrays, paths } = decodeIndex(bytes, file)
  const pathOf = (i: number): string => paths.toString('utf8', i === 0 ? 0 : arrays.pathEnd[i - 1], arrays.pathEnd[i])
  const builder = new TreeBuilder()
  const directories = new Map<string, number>() // relative path -> the builder's number
  const sampleEntry = new Uint32Array(header.samples)
  let samples = 0
  const stat = new Float64Array(Listed.fields)
  for (let i = 0; i < header.entries; i++) {
    const relative = pathOf(i)
    const slash = relative.lastIndexOf('/')
    const parent = i === 0 ? 0 : directories.get(slash < 0 ? '' : relative.slice(0, slash))
    if (parent === undefined || (i === 0) !== (relative === '')) throw new UsageError(`${file} is damaged: ${clip(relative)} has no parent directory`)
    stat[Listed.mode] = arrays.mode[i]; stat[Listed.size] = arrays.size[i]; stat[Listed.uid] = arrays.uid[i]; stat[Listed.gid] = arrays.gid[i]
    stat[Listed.nlink] = arrays.kind[i] === EntryKind.Directory ? 2 : 1
    stat[Listed.atimeSec] = secondsOf(arrays.atimeMs[i], arrays.atimeNsec[i]); stat[Listed.atimeNsec] = arrays.atimeNsec[i]
    stat[Listed.mtimeSec] = secondsOf(arrays.mtimeMs[i], arrays.mtimeNsec[i]); stat[Listed.mtimeNsec] = arrays.mtimeNsec[i]
    stat[Listed.ctimeSec] = secondsOf(arrays.ctimeMs[i], arrays.ctimeNsec[i]); stat[Listed.ctimeNsec] = arrays.ctimeNsec[i]
    const kind = arrays.kind[i] === EntryKind.Directory ? TreeKind.Directory : arrays.kind[i] === EntryKind.Sample ? TreeKind.Sample : TreeKind.Other
    const added = builder.add(parent, relative.slice(slash + 1), kind, stat)
    if (kind === TreeKind.Directory) directories.set(relative, added)
    if (kind === TreeKind.Sample) {
      if (samples === header.samples) throw new UsageError(`${file} is damaged: more samples than the header's ${header.samples}`)
      sampleEntry[samples++] = i
    }
  }
  if (samples !== header.samples) throw new UsageError(`${file} is damaged: ${samples} samples, header says ${header.samples}`)
  // The builder numbers entries in added order; the tree renumbers them (a pack lists entries by path).
  const { columns, added } = builder.finish()
  const treeEntryOf = new Uint32Array(header.entries)
  added.forEach((packEntry, treeEntry) => { treeEntryOf[packEntry] = treeEntry })
  const tree = new DatasetTree(columns, Array.from(sampleEntry, packEntry => treeEntryOf[packEntry]), header.groupDepth)
  return {
    storage,
    identity: createHash('sha1').update(bytes).digest('hex'),
    header,
    arrays,
    tree,
    sampleEntry,
    entryIndex: (relativePath: string) => { const entry = tree.find(relativePath); return entry < 0 ? undefined : added[entry] },
    path: pathOf
  }
}

/** The physical chunks of a layout: which files each holds, in the order they lie in it. */
export interface PackChunks { readonly pcs: readonly { readonly files: readonly FileId[] }[] }

/**
 * The chunks a mount computes from a pack's index, in the layout its header
 * names: which files each physical chunk holds, in which order (the memory
 * a mount has decides only how chunks are shared out and read, not this).
 */
export function packLayout (pack: PackIndex): PackChunks {
  const { header } = pack
  if (header.layout === 'shared') return buildSharedLayout(pack.tree.samples, { chunkSize: header.chunkSize, seed: header.seed })
  return buildLayout(pack.tree.samples, { chunkSize: header.chunkSize, seed: header.seed, vcCount: Number.MAX_SAFE_INTEGER, nodes: header.nodes })
}

/**
 * Checks that the layout computed from a pack's index is the one its chunks
 * were written in: each PC is the pack's chunk of that number, and its files,
 * in the layout's order, lie back to back from the chunk's start to its end.
 * A pack read (pack-source.ts) takes a run of files from the first asked for
 * to the last, so this is what keeps every read inside its chunk.
 */
export function checkPackLayout (pack: PackIndex, layout: PackChunks): void {
  const { arrays, header } = pack
  const mismatch = (why: string): UsageError => new UsageError(`${pack.storage.where}/${INDEX_FILE} does not match the layout computed from it (${why}; written by another version of redirfs, or damaged); repack it`)
  layout.pcs.forEach((pc, c) => {
    let end = arrays.chunkOffset[c]
    const held = header.nodes === undefined || arrays.chunkLength[c] !== 0
    for (const id of pc.files) {
      const entry = pack.sampleEntry[id]
      if (arrays.chunk[entry] !== c) throw mismatch(`${clip(pack.path(entry))} is in chunk ${arrays.chunk[entry]}, the layout puts it in ${c}`)
      if (!held) continue
      if (arrays.location[entry] !== end) throw mismatch(`${clip(pack.path(entry))} is at ${arrays.location[entry]} in chunk ${c}, the layout's order puts it at ${end}`)
      end += arrays.size[entry]
    }
    if (held && end !== arrays.chunkOffset[c] + arrays.chunkLength[c]) throw mismatch(`chunk ${c}'s files end at ${end}, the chunk at ${arrays.chunkOffset[c] + arrays.chunkLength[c]}`)
  })
}
