/**
 * Scanning the dataset tree once, before mounting.
 *
 * The result is both the tree the mount presents (names, modes, sizes,
 * times, exactly as the source has them) and the list of samples the
 * protocol may redirect between. A sample is a regular, non-empty file
 * with a sample extension inside some directory of the root (a file at the
 * root itself is in no class); its redirect group comes from grouping.ts.
 * Anything else passes through.
 *
 * Symbolic links are followed, as ImageFolder follows them.
 *
 * Nothing vanishes silently: an entry the mount cannot serve (a name that
 * is not valid UTF-8, a broken link, a special file, anything unreadable)
 * fails the scan with a list of them, unless the caller asked to skip
 * them, and then the result says how many were left out.
 */
import { constants, promises as fs, type BigIntStats } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { UsageError } from '../errors'
import type { GroupDepth } from '../redirect/grouping'
import { Listed, native } from './native'
import { DatasetTree, EntryKind, pathIn, TreeBuilder, type FileReader, type OpenFile, type SkippedEntry } from './tree'

/** ImageFolder's image extensions, plus common audio ones. */
export const DEFAULT_SAMPLE_EXTENSIONS = ['.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp', '.wav', '.flac', '.mp3', '.ogg']

export interface ScanOptions {
  /** Lower-case extensions, with the dot. */
  extensions?: readonly string[]
  /** When given, only these relative paths are shown as samples; other samples are hidden. */
  include?: ReadonlySet<string>
  /** Coarser redirect groups (grouping.ts); default: the directory holding each sample. */
  groupDepth?: GroupDepth
  /** Leave out entries that cannot be served, and list them in `skipped`, instead of failing. */
  skipUnservable?: boolean
  onWarning?: (message: string) => void
}

/** How many skipped entries an error message names. */
const NAMED_IN_MESSAGE = 3

const BILLION = 1_000_000_000n
const nsecOf = (ns: bigint): number => Number(((ns % BILLION) + BILLION) % BILLION)
const secOf = (ns: bigint): number => Number((ns - BigInt(nsecOf(ns))) / BILLION)

/** The root's attributes (the one entry not listed by its parent), as a listing gives them. */
function statRow (stat: BigIntStats): Float64Array {
  const row = new Float64Array(Listed.fields)
  row[Listed.mode] = Number(stat.mode); row[Listed.size] = Number(stat.size); row[Listed.uid] = Number(stat.uid); row[Listed.gid] = Number(stat.gid); row[Listed.nlink] = Number(stat.nlink)
  row[Listed.atimeSec] = secOf(stat.atimeNs); row[Listed.mtimeSec] = secOf(stat.mtimeNs); row[Listed.ctimeSec] = secOf(stat.ctimeNs)
  row[Listed.atimeNsec] = nsecOf(stat.atimeNs); row[Listed.mtimeNsec] = nsecOf(stat.mtimeNs); row[Listed.ctimeNsec] = nsecOf(stat.ctimeNs)
  return row
}

const errnoName = (errno: number): string => Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`

const typeOf = (mode: number): number => mode & constants.S_IFMT

/** Directories listed at once: each listing is one trip to the thread pool (4 threads), and a few keep them all busy. */
const DIRECTORIES_AT_ONCE = 8

async function inBatches<T> (items: readonly T[], each: (item: T) => Promise<void>, size: number): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each))
}

/** `root` is where the source is read from (it may be a /proc/self/fd path). */
export async function scanTree (root: string, options: ScanOptions = {}): Promise<DatasetTree> {
  const extensions = new Set(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)
  const warn = options.onWarning ?? (() => {})
  const builder = new TreeBuilder()
  const skipped: SkippedEntry[] = []
  const join = (relative: string, name: string): string => relative === '' ? name : `${relative}/${name}`
  const isSample = (relative: string, size: number): boolean =>
    size > 0 && relative.includes('/') && extensions.has(path.extname(relative).toLowerCase())

  /**
   * Lists directory `entry` and everything under it into the builder;
   * false when it cannot be listed (it is then left out). `above`
   * identifies the directories it is in (device and inode), so a link back
   * to one of them is named as a loop instead of being followed until the
   * path is too long.
   */
  const visitDirectory = async (relative: string, entry: number, above: ReadonlySet<string>): Promise<boolean> => {
    const listing = await native().listDirectory(path.join(root, relative)).catch((err: NodeJS.ErrnoException) => {
      skipped.push({ path: relative === '' ? '.' : relative, why: `cannot list directory (${err.code ?? err.message})` })
      return undefined
    })
    if (listing === undefined) return false
    const { fields } = listing
    const subdirectories: { child: string, entry: number, identity: string }[] = []
    listing.names.forEach((raw, i) => {
      const name = utf8Name(raw)
      if (name === undefined) {
        skipped.push({ path: join(relative, printableName(raw)), why: 'name is not valid UTF-8' })
        return
      }
      const child = join(relative, name)
      const at = i * Listed.fields
      const errno = fields[at + Listed.errno]
      if (errno !== 0) {
        skipped.push({ path: child, why: errno === os.constants.errno.ENOENT ? 'broken symbolic link' : `cannot stat (${errnoName(errno)})` })
        return
      }
      const type = typeOf(fields[at + Listed.mode])
      if (type === constants.S_IFDIR) {
        const identity = `${fields[at + Listed.dev]}:${fields[at + Listed.ino]}`
        if (above.has(identity)) skipped.push({ path: child, why: 'a symbolic link back to a directory it is in, a loop' })
        else subdirectories.push({ child, entry: builder.add(entry, raw, EntryKind.Directory, fields, at), identity })
      } else if (type !== constants.S_IFREG) {
        skipped.push({ path: child, why: 'not a regular file or directory' })
      } else {
        const sample = isSample(child, fields[at + Listed.size])
        if (sample && options.include !== undefined && !options.include.has(child)) return
        builder.add(entry, raw, sample ? EntryKind.Sample : EntryKind.Other, fields, at)
      }
    })
    await inBatches(subdirectories, async ({ child, entry, identity }) => {
      if (!await visitDirectory(child, entry, new Set([...above, identity]))) builder.remove(entry)
    }, DIRECTORIES_AT_ONCE)
    return true
  }

  const rootStat = await fs.stat(root, { bigint: true })
  const rootEntry = builder.add(0, '', rootStat.isDirectory() ? EntryKind.Directory : EntryKind.Other, statRow(rootStat))
  if (rootStat.isDirectory()) await visitDirectory('', rootEntry, new Set([`${Number(rootStat.dev)}:${Number(rootStat.ino)}`]))
  if (skipped.length > 0 && options.skipUnservable !== true) {
    skipped.sort((a, b) => (a.path < b.path ? -1 : 1))
    const named = skipped.slice(0, NAMED_IN_MESSAGE).map(entry => `${entry.path} (${entry.why})`).join(', ')
    const more = skipped.length > NAMED_IN_MESSAGE ? `, and ${skipped.length - NAMED_IN_MESSAGE} more` : ''
    throw new UsageError(`${skipped.length} entr${skipped.length === 1 ? 'y' : 'ies'} of the source cannot be served: ${named}${more}; fix or remove ${skipped.length === 1 ? 'it' : 'them'}, or pass --skip-unservable to leave ${skipped.length === 1 ? 'it' : 'them'} out`)
  }
  for (const entry of skipped) warn(`left out ${entry.path}: ${entry.why}`)
  const { columns } = builder.finish()
  // Samples are numbered in path order (the layout, and a pack written from this tree, depend on it).
  const byPath: { entry: number, path: string }[] = []
  columns.kind.forEach((kind, entry) => { if (kind === EntryKind.Sample) byPath.push({ entry, path: pathIn(columns, entry) }) })
  byPath.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
  if (options.include !== undefined) {
    const shown = new Set(byPath.map(sample => sample.path))
    const missing = [...options.include].filter(listed => !shown.has(listed))
    if (missing.length > 0) warn(`${missing.length} path(s) of the include list are not samples of the source, e.g. ${missing[0]}`)
  }
  if (byPath.length === 0) {
    throw new UsageError(`no sample files found (looked for ${[...extensions].join(' ')} inside the directories of the source)`)
  }
  return new DatasetTree(columns, byPath.map(sample => sample.entry), options.groupDepth, skipped)
}

/** The name as a string, or undefined when its bytes are not valid UTF-8 (the tree keys paths as strings). */
function utf8Name (raw: Buffer): string | undefined {
  try {
    return STRICT_UTF8.decode(raw)
  } catch {
    return undefined
  }
}

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true })

/** A name for messages: printable ASCII as is, every other byte as \xNN. */
function printableName (raw: Buffer): string {
  let text = ''
  for (const byte of raw) text += byte >= 0x20 && byte < 0x7f && byte !== 0x5c ? String.fromCharCode(byte) : `\\x${byte.toString(16).padStart(2, '0')}`
  return text
}

/** Reads an include list: one relative path per line; blank lines and # comments ignored. */
export async function readIncludeList (file: string): Promise<Set<string>> {
  const text = await fs.readFile(file, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new UsageError(`cannot read include list ${file}: ${err.code ?? err.message}`)
  })
  const paths = text.split('\n').map(line => line.trim().replace(/^\.\//, '')).filter(line => line !== '' && !line.startsWith('#'))
  if (paths.length === 0) throw new UsageError(`include list ${file} names no paths`)
  return new Set(paths)
}

/** Non-sample files of a scanned directory, read in place. */
export class DirectoryFileReader implements FileReader {
  constructor (private readonly root: string) {}

  async open (relativePath: string): Promise<OpenFile> {
    const file = await fs.open(path.join(this.root, relativePath), 'r')
    return {
      read: async (buffer, length, position) => (await file.read(buffer, 0, length, position)).bytesRead,
      close: async () => await file.close(),
      native: { fd: file.fd }
    }
  }
}
