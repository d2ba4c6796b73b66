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
 * Symbolic links are followed, as ImageFolder follows them, but never
 * into the system's own directories, and never so that anyone could read
 * through the mount what the link's real path keeps from them (access.ts).
 *
 * Nothing vanishes silently: an entry the mount cannot serve (a name that
 * is not valid UTF-8, a broken link, a special file, anything unreadable)
 * fails the scan with a list of them, unless the caller asked to skip
 * them, and then the result says how many were left out.
 */
import { constants, promises as fs, type BigIntStats } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { clip, UsageError } from '../errors'
import type { GroupDepth } from '../redirect/grouping'
import { directoriesDownTo, linkRefusal, reachableMode, type DirectoryAccess } from './access'
import { Listed, native } from './native'
import { DatasetTree, EntryKind, pathIn, TreeBuilder, type SkippedEntry } from './tree'

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
  /**
   * Show an entry with an access ACL with its owner's permission bits only
   * (for a mount others may use: an ACL may deny a user what the mode bits
   * allow, and the mount's check sees only the bits).
   */
  foldAcls?: boolean
  onWarning?: (message: string) => void
}

/** The name the mount keeps at its root for its control files (src/fs/control.ts). */
const CONTROL_NAME = '.redirfs'

/** How many skipped entries an error message names. */
const NAMED_IN_MESSAGE = 3

const BILLION = 1_000_000_000n
/** The nanoseconds within their second, and the whole seconds, of a time in nanoseconds (before 1970 too). */
export const nsecOf = (ns: bigint): number => Number(((ns % BILLION) + BILLION) % BILLION)
export const secOf = (ns: bigint): number => Number((ns - BigInt(nsecOf(ns))) / BILLION)

/** The root's attributes (the one entry not listed by its parent), as a listing gives them. */
function statRow (stat: BigIntStats): Float64Array {
  const row = new Float64Array(Listed.fields)
  row[Listed.mode] = Number(stat.mode); row[Listed.size] = Number(stat.size); row[Listed.uid] = Number(stat.uid); row[Listed.gid] = Number(stat.gid); row[Listed.nlink] = Number(stat.nlink)
  row[Listed.atimeSec] = secOf(stat.atimeNs); row[Listed.mtimeSec] = secOf(stat.mtimeNs); row[Listed.ctimeSec] = secOf(stat.ctimeNs)
  row[Listed.atimeNsec] = nsecOf(stat.atimeNs); row[Listed.mtimeNsec] = nsecOf(stat.mtimeNs); row[Listed.ctimeNsec] = nsecOf(stat.ctimeNs)
  row[Listed.dev] = Number(stat.dev); row[Listed.ino] = Number(stat.ino)
  return row
}

const errnoName = (errno: number): string => Object.entries(os.constants.errno).find(([, value]) => value === errno)?.[0] ?? `errno ${errno}`

const typeOf = (mode: number): number => mode & constants.S_IFMT

/** Who reads the source: this process. */
interface Reader { uid: number, gid: number, groups: ReadonlySet<number> }
const thisProcess = (): Reader => ({ uid: process.geteuid?.() ?? 0, gid: process.getegid?.() ?? 0, groups: new Set(process.getgroups?.() ?? []) })

/**
 * Whether the mode bits let `reader` read a file: the class that applies
 * (owner, group, others) decides, as the kernel does. Root reads
 * everything. A denial is only a reason to ask the kernel (below).
 */
function modeLetsRead (reader: Reader, mode: number, uid: number, gid: number): boolean {
  if (reader.uid === 0) return true
  if (uid === reader.uid) return (mode & 0o400) !== 0
  if (gid === reader.gid || reader.groups.has(gid)) return (mode & 0o040) !== 0
  return (mode & 0o004) !== 0
}

/** Directories listed at once: each listing is one trip to the thread pool (4 threads), and a few keep them all busy. */
const DIRECTORIES_AT_ONCE = 8

async function inBatches<T> (items: readonly T[], each: (item: T) => Promise<void>, size: number): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each))
}

/** `root` is where the source is read from (it may be a /proc/self/fd path). */
export async function scanTree (root: string, options: ScanOptions = {}): Promise<DatasetTree> {
  const extensions = new Set(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)
  const builder = new TreeBuilder()
  const skipped: SkippedEntry[] = []
  const join = (relative: string, name: string): string => relative === '' ? name : `${relative}/${name}`
  const isSample = (relative: string, size: number): boolean => isSampleFile(relative, size, extensions)
  const source = await fs.realpath(root)
  const reader = thisProcess()
  const access = new DirectoryAccessCache(options.foldAcls === true)
  /** Entries shown with fewer permission bits than the source's (access.ts), for one warning. */
  let narrowed = 0
  /** The links followed (the builder's numbers) and the real directories on their way. */
  const links = { added: [] as number[], directories: new Set<string>(), holding: new Set<string>() }

  /**
   * Lists directory `entry` and everything under it into the builder;
   * undefined when it cannot be listed (it is then left out), else how
   * many samples it holds in the source and how many of them are shown.
   * `above` identifies the directories it is in (device and inode), and
   * those the source itself is in, so a link back to one of them is named
   * as a loop instead of being followed until the path is too long.
   */
  const visitDirectory = async (relative: string, entry: number, real: string, above: ReadonlySet<string>): Promise<{ found: number, shown: number } | undefined> => {
    const listing = await native().listDirectory(path.join(root, relative)).catch((err: NodeJS.ErrnoException) => {
      skipped.push({ path: relative === '' ? '.' : relative, why: `cannot list directory (${err.code ?? err.message})` })
      return undefined
    })
    if (listing === undefined) return undefined
    const { fields, targets } = listing
    // Where the links lead: the directories on the way, for the access rule (access.ts).
    await access.load(targets.filter(target => target.length > 0).map(target => path.dirname(target.toString())))
    const unreadable = await samplesNotReadable(relative, listing.names, fields)
    const subdirectories: { child: string, entry: number, real: string, identity: string }[] = []
    let found = 0
    let shown = 0
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
      if (child === CONTROL_NAME) {
        skipped.push({ path: child, why: 'the mount keeps this name at its root for its control files' })
        return
      }
      const link = fields[at + Listed.link] === 1
      const target = link ? targets[i].toString() : path.join(real, name)
      if (link && target === '') {
        skipped.push({ path: child, why: 'a symbolic link whose real path cannot be resolved' })
        return
      }
      // Every real directory the scan reaches, through a link or below one, is checked: a link to / must not walk /etc.
      const refusal = linkRefusal(target, source)
      if (refusal !== undefined) {
        skipped.push({ path: child, why: `${refusal} (${target})` })
        return
      }
      const before = fields[at + Listed.mode]
      if (link) {
        // Inside the source, the directories above it are the root's to show (below); outside, all count.
        const inside = target.startsWith(source + '/')
        fields[at + Listed.mode] = access.reachableMode(fields[at + Listed.mode], fields[at + Listed.uid], fields[at + Listed.gid], path.dirname(target), inside ? source : undefined)
      }
      if (options.foldAcls === true && fields[at + Listed.acl] === 1) fields[at + Listed.mode] &= ~0o077
      if (fields[at + Listed.mode] !== before) narrowed++
      const type = typeOf(fields[at + Listed.mode])
      let added: number | undefined
      if (type === constants.S_IFDIR) {
        const identity = `${fields[at + Listed.dev]}:${fields[at + Listed.ino]}`
        if (above.has(identity)) skipped.push({ path: child, why: 'a symbolic link back to a directory it is in, a loop' })
        else subdirectories.push({ child, entry: added = builder.add(entry, raw, EntryKind.Directory, fields, at), real: target, identity })
      } else if (type !== constants.S_IFREG) {
        skipped.push({ path: child, why: 'not a regular file or directory' })
      } else if (unreadable.has(i)) {
        // Found, never shown: a class all of whose samples this user may not read is hidden, as an include list hides one.
        found++
        skipped.push({ path: child, why: `a sample this user (uid ${reader.uid}) may not read` })
      } else {
        const sample = isSample(child, fields[at + Listed.size])
        if (sample) found++
        if (sample && options.include !== undefined && !options.include.has(child)) return
        if (sample) shown++
        added = builder.add(entry, raw, sample ? EntryKind.Sample : EntryKind.Other, fields, at)
      }
      if (link && added !== undefined) {
        links.added.push(added)
        links.holding.add(path.dirname(target))
        for (const dir of directoriesDownTo(path.dirname(target))) links.directories.add(dir)
      }
    })
    await inBatches(subdirectories, async ({ child, entry, real, identity }) => {
      const below = await visitDirectory(child, entry, real, new Set([...above, identity]))
      // A directory whose samples the include list leaves out is hidden: ImageFolder refuses an empty class.
      if (below === undefined || (below.found > 0 && below.shown === 0)) builder.remove(entry)
      found += below?.found ?? 0
      shown += below?.shown ?? 0
    }, DIRECTORIES_AT_ONCE)
    return { found, shown }
  }

  /**
   * The samples of a listing this process may not read: served, each would
   * fail every epoch. Samples the include list hides are not asked about.
   * The mode bits pick the ones to ask about (those they deny, and files
   * with an ACL); the kernel has the last word on each, since capabilities
   * or the filesystem (a FUSE or network one) may allow what the bits deny.
   */
  const samplesNotReadable = async (relative: string, names: readonly Buffer[], fields: Float64Array): Promise<Set<number>> => {
    const unreadable = new Set<number>()
    if (reader.uid === 0) return unreadable
    const doubtful: { i: number, name: string }[] = []
    names.forEach((raw, i) => {
      const at = i * Listed.fields
      const name = utf8Name(raw)
      if (name === undefined || fields[at + Listed.errno] !== 0 || typeOf(fields[at + Listed.mode]) !== constants.S_IFREG) return
      const child = join(relative, name)
      if (!isSample(child, fields[at + Listed.size]) || (options.include !== undefined && !options.include.has(child))) return
      if (fields[at + Listed.acl] === 1 || !modeLetsRead(reader, fields[at + Listed.mode], fields[at + Listed.uid], fields[at + Listed.gid])) doubtful.push({ i, name })
    })
    await inBatches(doubtful, async ({ i, name }) => {
      await fs.access(path.join(root, relative, name), constants.R_OK).catch(() => unreadable.add(i))
    }, DIRECTORIES_AT_ONCE)
    return unreadable
  }

  const rootStat = await fs.stat(root, { bigint: true })
  const rootRow = statRow(rootStat)
  // Nobody reads through the mount's root what the directories above the source keep from them.
  await access.load([path.dirname(source)])
  if (options.foldAcls === true && native().hasAcl(source)) rootRow[Listed.mode] &= ~0o077
  rootRow[Listed.mode] = access.reachableMode(rootRow[Listed.mode], rootRow[Listed.uid], rootRow[Listed.gid], path.dirname(source))
  if (rootRow[Listed.mode] !== Number(rootStat.mode)) narrowed++
  const rootEntry = builder.add(0, '', rootStat.isDirectory() ? EntryKind.Directory : EntryKind.Other, rootRow)
  if (rootStat.isDirectory()) await visitDirectory('', rootEntry, source, new Set([`${Number(rootStat.dev)}:${Number(rootStat.ino)}`, ...await identitiesAbove(source)]))
  const { tree } = finishScan(builder, skipped, options, links)
  if (narrowed > 0) {
    options.onWarning?.(`${narrowed} entr${narrowed === 1 ? 'y is' : 'ies are'} shown with fewer permission bits than the source gives (reached through a symbolic link or a private directory above the source${options.foldAcls === true ? ', or with an ACL' : ''}), so no one reads through the mount what the source keeps from them; see docs/semantics.md`)
  }
  return tree
}

/** A sample: a regular, non-empty file with a sample extension inside some directory of the root. */
export function isSampleFile (relative: string, size: number, extensions: ReadonlySet<string>): boolean {
  return size > 0 && relative.includes('/') && extensions.has(path.extname(relative).toLowerCase())
}

/**
 * The end of every scan (a directory's, a bucket's): the include list's
 * unusable lines join the entries left out, which fail the scan by name
 * unless skipping was asked for; then the tree, its samples numbered in
 * path order (the layout, and a pack written from this tree, depend on it),
 * and for each of its entries the number the builder gave it.
 */
export function finishScan (builder: TreeBuilder, skipped: SkippedEntry[], options: ScanOptions, links?: { added: number[], directories: Set<string>, holding: Set<string> }): { tree: DatasetTree, added: Uint32Array } {
  const warn = options.onWarning ?? (() => {})
  if (options.include !== undefined) skipped.push(...unusableIncludes(options.include, builder))
  if (skipped.length > 0 && options.skipUnservable !== true) {
    skipped.sort((a, b) => (a.path < b.path ? -1 : 1))
    const named = skipped.slice(0, NAMED_IN_MESSAGE).map(entry => `${clip(entry.path, 80)} (${entry.why})`).join(', ')
    const more = skipped.length > NAMED_IN_MESSAGE ? `, and ${skipped.length - NAMED_IN_MESSAGE} more` : ''
    throw new UsageError(`${skipped.length} entr${skipped.length === 1 ? 'y' : 'ies'} of the source${options.include !== undefined ? ' or the include list' : ''} cannot be served: ${named}${more}; ` +
      `fix or remove ${skipped.length === 1 ? 'it' : 'them'}, or pass --skip-unservable to leave ${skipped.length === 1 ? 'it' : 'them'} out`)
  }
  for (const entry of skipped) warn(`left out ${entry.path}: ${entry.why}`)
  const { columns, added } = builder.finish()
  const byPath: { entry: number, path: string }[] = []
  columns.kind.forEach((kind, entry) => { if (kind === EntryKind.Sample) byPath.push({ entry, path: pathIn(columns, entry) }) })
  byPath.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
  if (byPath.length === 0) {
    throw new UsageError(`no sample files found (looked for ${[...(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)].join(' ')} inside the directories of the source)`)
  }
  // The builder numbered entries as added; the tree renumbers them (breadth first). A link left out is no entry.
  const treeEntryOf = new Map<number, number>()
  if (links !== undefined) added.forEach((builderEntry, treeEntry) => treeEntryOf.set(builderEntry, treeEntry))
  const sourceLinks = links === undefined
    ? undefined
    : { entries: Uint32Array.from(links.added.flatMap(entry => treeEntryOf.has(entry) ? [treeEntryOf.get(entry)!] : [])), directories: [...links.directories].sort(), holding: links.holding }
  return { tree: new DatasetTree(columns, byPath.map(sample => sample.entry), options.groupDepth, skipped, sourceLinks), added }
}

/**
 * The lines of an include list that name nothing the mount can show: a
 * path that leaves the source or is absolute, and a path that is not a
 * sample of the source (missing, or not a sample file). Never dropped in
 * silence: the subset would be smaller than the user thinks.
 */
function unusableIncludes (include: ReadonlySet<string>, builder: TreeBuilder): SkippedEntry[] {
  const unusable: SkippedEntry[] = []
  const samples = builder.samplePaths()
  for (const listed of include) {
    const why = listed.startsWith('/')
      ? 'an absolute path: the include list names paths relative to the source'
      : listed.split('/').some(part => part === '..' || part === '.' || part === '')
        ? 'not a plain relative path (it has "..", "." or an empty part)'
        : samples.has(listed) ? undefined : 'not a sample of the source (missing, empty, or not a sample extension)'
    if (why !== undefined) unusable.push({ path: `include list: ${listed}`, why })
  }
  return unusable
}

/** The identities (device and inode) of the directories the source is in, from its parent up to `/`. */
async function identitiesAbove (source: string): Promise<string[]> {
  const above = directoriesDownTo(path.dirname(source))
  const stats = await Promise.all(above.map(async dir => await fs.stat(dir).catch(() => undefined)))
  return stats.flatMap(stat => stat === undefined ? [] : [`${stat.dev}:${stat.ino}`])
}

/**
 * The owner, group and mode of real directories, each stat'ed once, for
 * the modes of entries reached through links and of the root (access.ts).
 */
class DirectoryAccessCache {
  private readonly known = new Map<string, DirectoryAccess>()

  /** `foldAcls`: a directory with an ACL lets only its owner through (scan.ts, ScanOptions). */
  constructor (private readonly foldAcls: boolean) {}

  /** Stats every directory on the way to each of `dirs` not stat'ed yet. */
  async load (dirs: readonly string[]): Promise<void> {
    const wanted = new Set<string>()
    for (const dir of new Set(dirs)) for (const on of directoriesDownTo(dir)) if (!this.known.has(on)) wanted.add(on)
    await Promise.all([...wanted].map(async dir => {
      // A directory that cannot be stat'ed lets nobody through (mode 0).
      const stat = await fs.stat(dir).catch(() => undefined)
      const mode = stat === undefined ? 0 : this.foldAcls && native().hasAcl(dir) ? stat.mode & ~0o077 : stat.mode
      this.known.set(dir, stat === undefined ? { uid: 0, gid: 0, mode: 0 } : { uid: stat.uid, gid: stat.gid, mode })
    }))
  }

  /** `mode` less what the directories down to `dir` (loaded) keep from each class; below `from` only, when given. */
  reachableMode (mode: number, uid: number, gid: number, dir: string, from?: string): number {
    const through = directoriesDownTo(dir).filter(on => from === undefined || on.startsWith(from + '/'))
    return reachableMode(mode, uid, gid, through.map(on => this.known.get(on)!))
  }
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

/** The largest include list read: tens of millions of paths. */
const INCLUDE_LIST_MAX_BYTES = 1024 * 1024 * 1024

/** Reads an include list: one relative path per line; blank lines and # comments ignored. A regular file only (a pipe or device could hang or never end). */
export async function readIncludeList (file: string): Promise<Set<string>> {
  const cannot = (why: string): UsageError => new UsageError(`cannot read include list ${file}: ${why}`)
  const handle = await fs.open(file, constants.O_RDONLY | constants.O_NONBLOCK).catch((err: NodeJS.ErrnoException) => { throw cannot(err.code ?? err.message) })
  let text: string
  try {
    const stat = await handle.stat()
    if (!stat.isFile()) throw cannot('not a regular file (write the list to a file)')
    if (stat.size > INCLUDE_LIST_MAX_BYTES) throw cannot(`larger than ${INCLUDE_LIST_MAX_BYTES / 1024 ** 3} GiB`)
    text = await handle.readFile('utf8')
  } finally {
    await handle.close()
  }
  const paths = text.split('\n').map(line => line.trim().replace(/^\.\//, '')).filter(line => line !== '' && !line.startsWith('#'))
  if (paths.length === 0) throw new UsageError(`include list ${file} names no paths`)
  return new Set(paths)
}
