/**
 * Scanning the dataset tree once, before mounting.
 *
 * The result is both the tree the mount presents (names, modes, sizes,
 * times, exactly as the source has them) and the list of samples the
 * protocol may redirect between. A sample is a regular, non-empty file
 * with a sample extension inside a class directory (the first level under
 * the root, as ImageFolder sees classes). Anything else passes through.
 *
 * Symbolic links are followed, as ImageFolder follows them; a broken link
 * is left out with a warning.
 */
import { promises as fs, type Stats } from 'node:fs'
import path from 'node:path'
import { RedirfsError } from '../errors'
import type { SampleFile } from '../redirect/layout'
import type { DatasetTree, EntryAttributes, FileReader, OpenFile, TreeEntry } from './tree'

/** ImageFolder's image extensions, plus common audio ones. */
export const DEFAULT_SAMPLE_EXTENSIONS = ['.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp', '.wav', '.flac', '.mp3', '.ogg']

export interface ScanOptions {
  /** Lower-case extensions, with the dot. */
  extensions?: readonly string[]
  /** When given, only these relative paths are shown as samples; other samples are hidden. */
  include?: ReadonlySet<string>
  onWarning?: (message: string) => void
}

const attributesOf = (stat: Stats): EntryAttributes => ({
  mode: stat.mode, size: stat.size, uid: stat.uid, gid: stat.gid, nlink: stat.nlink, atimeMs: stat.atimeMs, mtimeMs: stat.mtimeMs, ctimeMs: stat.ctimeMs
})

/** `root` is where the source is read from (it may be a /proc/self/fd path). */
export async function scanTree (root: string, options: ScanOptions = {}): Promise<DatasetTree> {
  const extensions = new Set(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)
  const warn = options.onWarning ?? (() => {})
  const entries = new Map<string, TreeEntry>()
  const samplePaths: string[] = []

  const visit = async (relative: string, stat: Stats): Promise<void> => {
    if (!stat.isDirectory()) {
      entries.set(relative, { attributes: attributesOf(stat) })
      if (isSample(relative, stat)) samplePaths.push(relative)
      return
    }
    const names = (await fs.readdir(path.join(root, relative))).sort()
    const shown: string[] = []
    await Promise.all(names.map(async name => {
      const child = relative === '' ? name : `${relative}/${name}`
      const childStat = await fs.stat(path.join(root, child)).catch((err: NodeJS.ErrnoException) => {
        warn(`skipping ${child}: ${err.code ?? err.message}`)
        return undefined
      })
      if (childStat === undefined || !(childStat.isDirectory() || childStat.isFile())) return
      if (options.include !== undefined && childStat.isFile() && isSample(child, childStat) && !options.include.has(child)) return
      await visit(child, childStat)
      shown.push(name)
    }))
    entries.set(relative, { attributes: attributesOf(stat), children: shown.sort() })
  }

  const isSample = (relative: string, stat: Stats): boolean =>
    stat.isFile() && stat.size > 0 && relative.includes('/') && extensions.has(path.extname(relative).toLowerCase())

  await visit('', await fs.stat(root))
  samplePaths.sort()
  const samples = samplePaths.map((relative, index): SampleFile => {
    const entry = entries.get(relative)!
    entry.sample = index
    return { path: relative, size: entry.attributes.size, group: relative.slice(0, relative.indexOf('/')) }
  })
  if (options.include !== undefined) {
    const missing = [...options.include].filter(listed => entries.get(listed)?.sample === undefined)
    if (missing.length > 0) warn(`${missing.length} path(s) of the include list are not samples of the source, e.g. ${missing[0]}`)
  }
  if (samples.length === 0) {
    throw new RedirfsError(`no sample files found (looked for ${[...extensions].join(' ')} inside class directories)`)
  }
  return { entries, samples }
}

/** Reads an include list: one relative path per line; blank lines and # comments ignored. */
export async function readIncludeList (file: string): Promise<Set<string>> {
  const text = await fs.readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new RedirfsError(`cannot read include list ${file}: ${err.code ?? err.message}`)
  })
  const paths = text.split('\n').map(line => line.trim().replace(/^\.\//, '')).filter(line => line !== '' && !line.startsWith('#'))
  if (paths.length === 0) throw new RedirfsError(`include list ${file} names no paths`)
  return new Set(paths)
}

/** Non-sample files of a scanned directory, read in place. */
export class DirectoryFileReader implements FileReader {
  constructor (private readonly root: string) {}

  async open (relativePath: string): Promise<OpenFile> {
    const file = await fs.open(path.join(this.root, relativePath), 'r')
    return {
      read: async (buffer, length, position) => (await file.read(buffer, 0, length, position)).bytesRead,
      close: async () => await file.close()
    }
  }
}
