/**
 * A loaded pack: the tree it presents, its samples in layout order, and
 * where every byte lives. Entries are small objects over the index's typed
 * arrays (attributes are built when asked for), so a million-file index
 * costs little more than its paths.
 */
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { UsageError } from '../errors'
import type { DatasetTree, EntryAttributes, TreeEntry } from '../chunks/tree'
import { groupOf } from '../redirect/grouping'
import type { SampleFile } from '../redirect/layout'
import { decodeIndex, EntryKind, PACK_MAGIC, type PackArrays, type PackHeader } from './format'

export const INDEX_FILE = 'index.bin'
export const CHUNKS_FILE = 'chunks.bin'
export const OTHERS_FILE = 'others.bin'

class PackEntry implements TreeEntry {
  /** Entry indices of a directory's children; names are decoded on readdir. */
  childEntries?: number[]
  sample?: number
  constructor (private readonly pack: { arrays: PackArrays, nameOf: (entry: number) => string }, readonly index: number) {}

  get children (): string[] | undefined {
    return this.childEntries?.map(this.pack.nameOf)
  }

  private get arrays (): PackArrays { return this.pack.arrays }

  get attributes (): EntryAttributes {
    const a = this.arrays
    const i = this.index
    return { mode: a.mode[i], size: a.size[i], uid: a.uid[i], gid: a.gid[i], nlink: a.kind[i] === EntryKind.Directory ? 2 : 1, atimeMs: a.atimeMs[i], mtimeMs: a.mtimeMs[i], ctimeMs: a.ctimeMs[i], atimeNsec: a.atimeNsec[i], mtimeNsec: a.mtimeNsec[i], ctimeNsec: a.ctimeNsec[i] }
  }
}

export interface PackIndex {
  readonly directory: string
  readonly header: PackHeader
  readonly arrays: PackArrays
  readonly tree: DatasetTree
  /** Entry index of each sample id. */
  readonly sampleEntry: Uint32Array
  /** Entry index by relative path, for other files. */
  entryIndex (relativePath: string): number | undefined
  path (entry: number): string
}

/** True when `directory` holds a pack index (by its magic). */
export async function isPack (directory: string): Promise<boolean> {
  const handle = await fs.open(path.join(directory, INDEX_FILE), 'r').catch(() => undefined)
  if (handle === undefined) return false
  try {
    const magic = Buffer.alloc(PACK_MAGIC.length)
    await handle.read(magic, 0, magic.length, 0)
    return magic.equals(PACK_MAGIC)
  } finally {
    await handle.close()
  }
}

export async function loadPackIndex (directory: string): Promise<PackIndex> {
  const file = path.join(directory, INDEX_FILE)
  const bytes = await fs.readFile(file).catch((err: NodeJS.ErrnoException) => {
    throw new UsageError(err.code === 'ENOENT' ? `${directory} is not a redirfs pack (no ${INDEX_FILE}; an interrupted pack leaves none)` : `cannot read ${file}: ${err.code ?? err.message}`)
  })
  const { header, arrays, paths } = decodeIndex(bytes, file)
  const entries = new Map<string, TreeEntry>()
  const samples: SampleFile[] = []
  const sampleEntry = new Uint32Array(header.samples)
  const groups = new Map<string, string>()
  const intern = (name: string): string => { const known = groups.get(name); if (known !== undefined) return known; groups.set(name, name); return name }
  const pathOf = (i: number): string => paths.toString('utf8', i === 0 ? 0 : arrays.pathEnd[i - 1], arrays.pathEnd[i])
  const nameOf = (i: number): string => { const relative = pathOf(i); return relative.slice(relative.lastIndexOf('/') + 1) }
  const shared = { arrays, nameOf }

  for (let i = 0; i < header.entries; i++) {
    const relative = pathOf(i)
    const entry = new PackEntry(shared, i)
    if (arrays.kind[i] === EntryKind.Directory) entry.childEntries = []
    if (relative !== '') {
      const slash = relative.lastIndexOf('/')
      const parent = entries.get(slash < 0 ? '' : relative.slice(0, slash)) as PackEntry | undefined
      if (parent?.childEntries === undefined) throw new UsageError(`${file} is damaged: ${relative} has no parent directory`)
      parent.childEntries.push(i)
    }
    if (arrays.kind[i] === EntryKind.Sample) {
      entry.sample = samples.length
      sampleEntry[samples.length] = i
      samples.push({ path: relative, size: arrays.size[i], group: intern(groupOf(relative, header.groupDepth)) })
    }
    entries.set(relative, entry)
  }
  if (samples.length !== header.samples) throw new UsageError(`${file} is damaged: ${samples.length} samples, header says ${header.samples}`)
  return {
    directory,
    header,
    arrays,
    tree: { entries, samples, skipped: [] },
    sampleEntry,
    entryIndex: (relativePath: string) => (entries.get(relativePath) as PackEntry | undefined)?.index,
    path: pathOf
  }
}
