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
import { groupOf, type GroupDepth } from '../redirect/grouping'
import type { SampleFile } from '../redirect/layout'
import { Listed, native } from './native'
import type { DatasetTree, EntryAttributes, FileReader, OpenFile, SkippedEntry, TreeEntry } from './tree'

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

/** The root's attributes (the one entry not listed by its parent). */
const attributesOfStat = (stat: BigIntStats): EntryAttributes => ({
  mode: Number(stat.mode), size: Number(stat.size), uid: Number(stat.uid), gid: Number(stat.gid), nlink: Number(stat.nlink),
  atimeMs: Number(stat.atimeNs) / 1e6, mtimeMs: Number(stat.mtimeNs) / 1e6, ctimeMs: Number(stat.ctimeNs) / 1e6,
  atimeNsec: nsecOf(stat.atimeNs), mtimeNsec: nsecOf(stat.mtimeNs), ctimeNsec: nsecOf(stat.ctimeNs)
})

/** The number as a small integer where it is one (below 2^30), so V8 need not box it. */
const smallWhole = (n: number): number => n < 0x40000000 ? n | 0 : n

/** Entry `i` of a native listing (src/chunks/native.ts). */
function attributesListed (fields: Float64Array, i: number): EntryAttributes {
  const at = i * Listed.fields
  const ms = (sec: number, nsec: number): number => fields[at + sec] * 1000 + fields[at + nsec] / 1e6
  // Whole numbers made small integers, which V8 stores in the object itself; read from a Float64Array
  // they would stay doubles, each boxed on the heap (113 bytes per file of a 500,000-file tree).
  return {
    mode: smallWhole(fields[at + Listed.mode]), size: smallWhole(fields[at + Listed.size]), uid: smallWhole(fields[at + Listed.uid]), gid: smallWhole(fields[at + Listed.gid]), nlink: smallWhole(fields[at + Listed.nlink]),
    atimeMs: ms(Listed.atimeSec, Listed.atimeNsec), mtimeMs: ms(Listed.mtimeSec, Listed.mtimeNsec), ctimeMs: ms(Listed.ctimeSec, Listed.ctimeNsec),
    atimeNsec: smallWhole(fields[at + Listed.atimeNsec]), mtimeNsec: smallWhole(fields[at + Listed.mtimeNsec]), ctimeNsec: smallWhole(fields[at + Listed.ctimeNsec])
  }
}

const errnoName = (errno: number): string => Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`

const isDirectory = (a: EntryAttributes): boolean => (a.mode & constants.S_IFMT) === constants.S_IFDIR
const isFile = (a: EntryAttributes): boolean => (a.mode & constants.S_IFMT) === constants.S_IFREG

/** Directories listed at once: each listing is one trip to the thread pool (4 threads), and a few keep them all busy. */
const DIRECTORIES_AT_ONCE = 8

async function inBatches<T> (items: readonly T[], each: (item: T) => Promise<void>, size: number): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each))
}

/** `root` is where the source is read from (it may be a /proc/self/fd path). */
export async function scanTree (root: string, options: ScanOptions = {}): Promise<DatasetTree> {
  const extensions = new Set(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)
  const warn = options.onWarning ?? (() => {})
  const entries = new Map<string, TreeEntry>()
  const samplePaths: string[] = []
  const skipped: SkippedEntry[] = []
  const join = (relative: string, name: string): string => relative === '' ? name : `${relative}/${name}`
  const isSample = (relative: string, attributes: EntryAttributes): boolean =>
    isFile(attributes) && attributes.size > 0 && relative.includes('/') && extensions.has(path.extname(relative).toLowerCase())

  /**
   * Lists a directory and everything under it into `entries`; false when it
   * cannot be listed (it is then left out). `above` identifies the
   * directories it is in (device and inode), so a link back to one of them
   * is named as a loop instead of being followed until the path is too long.
   */
  const visitDirectory = async (relative: string, attributes: EntryAttributes, above: ReadonlySet<string>): Promise<boolean> => {
    const listing = await native().listDirectory(path.join(root, relative)).catch((err: NodeJS.ErrnoException) => {
      skipped.push({ path: relative === '' ? '.' : relative, why: `cannot list directory (${err.code ?? err.message})` })
      return undefined
    })
    if (listing === undefined) return false
    const shown: string[] = []
    const subdirectories: { name: string, child: string, attributes: EntryAttributes, identity: string }[] = []
    listing.names.forEach((raw, i) => {
      const name = utf8Name(raw)
      if (name === undefined) {
        skipped.push({ path: join(relative, printableName(raw)), why: 'name is not valid UTF-8' })
        return
      }
      const child = join(relative, name)
      const errno = listing.fields[i * Listed.fields + Listed.errno]
      if (errno !== 0) {
        skipped.push({ path: child, why: errno === os.constants.errno.ENOENT ? 'broken symbolic link' : `cannot stat (${errnoName(errno)})` })
        return
      }
      const childAttributes = attributesListed(listing.fields, i)
      if (isDirectory(childAttributes)) {
        const identity = `${listing.fields[i * Listed.fields + Listed.dev]}:${listing.fields[i * Listed.fields + Listed.ino]}`
        if (above.has(identity)) skipped.push({ path: child, why: 'a symbolic link back to a directory it is in, a loop' })
        else subdirectories.push({ name, child, attributes: childAttributes, identity })
      } else if (!isFile(childAttributes)) {
        skipped.push({ path: child, why: 'not a regular file or directory' })
      } else {
        const sample = isSample(child, childAttributes)
        if (sample && options.include !== undefined && !options.include.has(child)) return
        entries.set(child, { attributes: childAttributes })
        if (sample) samplePaths.push(child)
        shown.push(name)
      }
    })
    await inBatches(subdirectories, async ({ name, child, attributes, identity }) => {
      if (await visitDirectory(child, attributes, new Set([...above, identity]))) shown.push(name)
    }, DIRECTORIES_AT_ONCE)
    entries.set(relative, { attributes, children: shown.sort() })
    return true
  }

  const rootStat = await fs.stat(root, { bigint: true })
  if (rootStat.isDirectory()) await visitDirectory('', attributesOfStat(rootStat), new Set([`${Number(rootStat.dev)}:${Number(rootStat.ino)}`]))
  if (skipped.length > 0 && options.skipUnservable !== true) {
    skipped.sort((a, b) => (a.path < b.path ? -1 : 1))
    const named = skipped.slice(0, NAMED_IN_MESSAGE).map(entry => `${entry.path} (${entry.why})`).join(', ')
    const more = skipped.length > NAMED_IN_MESSAGE ? `, and ${skipped.length - NAMED_IN_MESSAGE} more` : ''
    throw new UsageError(`${skipped.length} entr${skipped.length === 1 ? 'y' : 'ies'} of the source cannot be served: ${named}${more}; fix or remove ${skipped.length === 1 ? 'it' : 'them'}, or pass --skip-unservable to leave ${skipped.length === 1 ? 'it' : 'them'} out`)
  }
  for (const entry of skipped) warn(`left out ${entry.path}: ${entry.why}`)
  samplePaths.sort()
  const samples = samplePaths.map((relative, index): SampleFile => {
    const entry = entries.get(relative)!
    entry.sample = index
    return { path: relative, size: entry.attributes.size, group: groupOf(relative, options.groupDepth) }
  })
  if (options.include !== undefined) {
    const missing = [...options.include].filter(listed => entries.get(listed)?.sample === undefined)
    if (missing.length > 0) warn(`${missing.length} path(s) of the include list are not samples of the source, e.g. ${missing[0]}`)
  }
  if (samples.length === 0) {
    throw new UsageError(`no sample files found (looked for ${[...extensions].join(' ')} inside the directories of the source)`)
  }
  return { entries, samples, skipped }
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
