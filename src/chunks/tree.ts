/**
 * The dataset tree a mount presents, whether it came from scanning a
 * directory or from a pack's index: every entry's attributes, each
 * directory's children, and which files are samples.
 *
 * It is held as columns of typed arrays, one row per entry, a fraction of
 * what a tree of objects cost per file (docs/design.md, "The tree in
 * memory", has the figures). Entry 0 is the root; a
 * directory's children are consecutive entries, sorted by the bytes of
 * their names, so a lookup is a binary search and a listing a range. The
 * native FUSE server reads these same columns: the tree is held once.
 */
import { groupOf, type GroupDepth } from '../redirect/grouping'
import { reachableMode, type DirectoryAccess } from './access'
import type { SampleFile } from '../redirect/layout'
import { Listed, native } from './native'

export interface EntryAttributes {
  readonly mode: number
  readonly size: number
  readonly uid: number
  readonly gid: number
  readonly nlink: number
  /** Times in milliseconds (what Date and fuse-native take), and the nanoseconds within their second, exact. */
  readonly atimeMs: number
  readonly mtimeMs: number
  readonly ctimeMs: number
  readonly atimeNsec: number
  readonly mtimeNsec: number
  readonly ctimeNsec: number
}

/** Whole seconds of a time given as `EntryAttributes` does (exact: the nanoseconds are subtracted before rounding). */
export function secondsOf (ms: number, nsec: number): number {
  return Math.round((ms - nsec / 1e6) / 1000)
}

/** What an entry is (the native server's numbering, native/fuse_server.cc). */
export const enum EntryKind { Directory = 0, Sample = 1, Other = 2 }

/** The columns, as the native server takes them. */
export interface TreeColumns {
  readonly parent: Uint32Array
  /** Each name's UTF-8 bytes and a 0 byte; entry i's name ends (its 0 byte included) at nameEnd[i]. */
  readonly names: Buffer
  readonly nameEnd: Uint32Array
  /** A directory's children: entries firstChild .. firstChild + childCount - 1. */
  readonly firstChild: Uint32Array
  readonly childCount: Uint32Array
  readonly kind: Uint8Array
  readonly mode: Uint32Array
  readonly uid: Uint32Array
  readonly gid: Uint32Array
  readonly nlink: Uint32Array
  readonly size: Float64Array
  readonly atimeSec: Float64Array
  readonly mtimeSec: Float64Array
  readonly ctimeSec: Float64Array
  readonly atimeNsec: Uint32Array
  readonly mtimeNsec: Uint32Array
  readonly ctimeNsec: Uint32Array
  /** The sample number of a sample entry; NOT_A_SAMPLE otherwise. */
  readonly sample: Uint32Array
  /** Device and inode of a scanned entry, so a read can tell the file the scan saw from one put in its place; 0 for a pack's or a bucket's. */
  readonly dev: Float64Array
  readonly ino: Float64Array
}

const NOT_A_SAMPLE = 0xffffffff

export interface SkippedEntry {
  /** Relative path; bytes that are not UTF-8 shown as \xNN. */
  readonly path: string
  readonly why: string
}

/** Byte order of two byte ranges, as memcmp (and so the native server's lookup) sees it. */
function compareBytes (a: Uint8Array, aStart: number, aEnd: number, b: Uint8Array, bStart: number, bEnd: number): number {
  const length = Math.min(aEnd - aStart, bEnd - bStart)
  for (let k = 0; k < length; k++) {
    const d = a[aStart + k] - b[bStart + k]
    if (d !== 0) return d
  }
  return (aEnd - aStart) - (bEnd - bStart)
}

/** Where entry `entry`'s name starts: names lie back to back, each ending where `nameEnd` says. */
const nameStartIn = (nameEnd: Uint32Array, entry: number): number => entry === 0 ? 0 : nameEnd[entry - 1]

function nameIn (columns: TreeColumns, entry: number): string {
  return columns.names.toString('utf8', nameStartIn(columns.nameEnd, entry), columns.nameEnd[entry] - 1)
}

/** The relative path of an entry of a tree's columns: '' for the root, 'cat/001.jpg' for a file. */
export function pathIn (columns: TreeColumns, entry: number): string {
  let relative = ''
  for (let e = entry; e !== 0; e = columns.parent[e]) relative = relative === '' ? nameIn(columns, e) : `${nameIn(columns, e)}/${relative}`
  return relative
}

/**
 * Who may read a sample, when not everyone who can reach it: '' for a
 * file every class of users may read. Samples another set of users may
 * read are another redirect group, even in one directory: an open is never
 * answered with a file its opener could not read (docs/design.md,
 * "Permissions"). The description names each class, so two files share
 * one only when the same users may read them.
 */
function readersOf (mode: number, uid: number, gid: number): string {
  const read = mode & 0o444
  if (read === 0o444) return ''
  if (read === 0) return 'root only'
  const classes: [string, boolean][] = [[`uid ${uid}`, (mode & 0o400) !== 0], [`gid ${gid}`, (mode & 0o040) !== 0], ['others', (mode & 0o004) !== 0]]
  const named = (may: boolean): string => classes.filter(([, can]) => can === may).map(([who]) => who).join(', ')
  return `readable by ${named(true)}, not ${named(false)}`
}

/** A sample and its entry in the tree. */
export type TreeSampleFile = SampleFile & { readonly entry: number }

/**
 * What a scan followed links through: the entries that are links, the
 * real directories on their way (all, down from `/`), whose modes narrowed
 * what those entries show (access.ts), and of those the ones that hold a
 * link's target, so that a change to one of them can be noticed
 * (source-watch.ts).
 */
export interface SourceLinks {
  readonly entries: Uint32Array
  readonly directories: readonly string[]
  readonly holding: ReadonlySet<string>
}

/** A sample of the tree: its path is spelled out when asked (for a read or a message), not kept. */
class TreeSample implements SampleFile {
  constructor (private readonly tree: DatasetTree, readonly entry: number, readonly size: number, readonly group: string) {}
  get path (): string { return this.tree.pathOf(this.entry) }
}

export class DatasetTree {
  /** Sorted by path; a sample's number is its index here. */
  readonly samples: readonly TreeSampleFile[]

  /**
   * `sampleEntries` lists the sample entries in the order that numbers them
   * (by path for a scan; a pack's own order).
   */
  constructor (readonly columns: TreeColumns, sampleEntries: ArrayLike<number>, groupDepth: GroupDepth, readonly skipped: readonly SkippedEntry[] = [], readonly links?: SourceLinks) {
    // A group depends only on the directory and who may read the file: one string per such pair, not per sample.
    const groupOfDirectory = new Map<string, string>()
    const groups = new Map<string, string>()
    const samples: TreeSampleFile[] = []
    for (let id = 0; id < sampleEntries.length; id++) {
      const entry = sampleEntries[id]
      const parent = columns.parent[entry]
      const key = `${parent}:${columns.mode[entry] & 0o777}:${columns.uid[entry]}:${columns.gid[entry]}`
      let group = groupOfDirectory.get(key)
      if (group === undefined) {
        const directory = groupOf(this.pathOf(entry), groupDepth)
        // A coarser group spans directories: who may pass those below its root decides who may read the file too.
        // The description of readers is conservative, so each directory that narrows it is named: two
        // directories that keep out different users never make one group.
        const mode = columns.mode[entry]
        const through: string[] = []
        const below: DirectoryAccess[] = []
        for (let d = parent; d !== 0 && this.pathOf(d) !== directory; d = columns.parent[d]) {
          const access = { uid: columns.uid[d], gid: columns.gid[d], mode: columns.mode[d] }
          below.push(access)
          if (reachableMode(mode, columns.uid[entry], columns.gid[entry], [access]) !== mode) through.unshift(this.pathOf(d))
        }
        const readers = readersOf(reachableMode(mode, columns.uid[entry], columns.gid[entry], below), columns.uid[entry], columns.gid[entry])
        const named = readers === '' ? directory : `${directory} [${readers}${through.length > 0 ? `; through ${through.join(', ')}` : ''}]`
        group = groups.get(named) ?? named
        groups.set(group, group)
        groupOfDirectory.set(key, group)
      }
      columns.sample[entry] = id
      samples.push(new TreeSample(this, entry, columns.size[entry], group))
    }
    this.samples = samples
  }

  get count (): number { return this.columns.parent.length }

  nameOf (entry: number): string { return nameIn(this.columns, entry) }

  /** Relative path: '' for the root, 'cat/001.jpg' for a file. */
  pathOf (entry: number): string { return pathIn(this.columns, entry) }

  /** The entry at a relative path ('' is the root), or -1. */
  find (relative: string): number {
    let entry = 0
    if (relative === '') return entry
    for (const component of relative.split('/')) {
      entry = this.child(entry, Buffer.from(component))
      if (entry < 0) return -1
    }
    return entry
  }

  /** The child of directory `directory` named by these bytes, or -1. */
  child (directory: number, name: Uint8Array): number {
    if (!this.isDirectory(directory)) return -1
    const { names, nameEnd, firstChild, childCount } = this.columns
    let low = firstChild[directory]
    let high = low + childCount[directory] - 1
    while (low <= high) {
      const middle = (low + high) >>> 1
      const order = compareBytes(names, nameStartIn(nameEnd, middle), nameEnd[middle] - 1, name, 0, name.length)
      if (order === 0) return middle
      if (order < 0) low = middle + 1
      else high = middle - 1
    }
    return -1
  }

  kindOf (entry: number): EntryKind { return this.columns.kind[entry] }
  isDirectory (entry: number): boolean { return this.columns.kind[entry] === EntryKind.Directory }

  /** The sample number of a sample entry. */
  sampleOf (entry: number): number | undefined {
    const sample = this.columns.sample[entry]
    return sample === NOT_A_SAMPLE ? undefined : sample
  }

  /** A directory's children's names, in the tree's order; undefined for a file. */
  childNames (entry: number): string[] | undefined {
    if (!this.isDirectory(entry)) return undefined
    const first = this.columns.firstChild[entry]
    return Array.from({ length: this.columns.childCount[entry] }, (_, k) => this.nameOf(first + k))
  }

  attributes (entry: number): EntryAttributes {
    const c = this.columns
    const ms = (sec: number, nsec: number): number => sec * 1000 + nsec / 1e6
    return {
      mode: c.mode[entry],
      size: c.size[entry],
      uid: c.uid[entry],
      gid: c.gid[entry],
      nlink: c.nlink[entry],
      atimeMs: ms(c.atimeSec[entry], c.atimeNsec[entry]),
      mtimeMs: ms(c.mtimeSec[entry], c.mtimeNsec[entry]),
      ctimeMs: ms(c.ctimeSec[entry], c.ctimeNsec[entry]),
      atimeNsec: c.atimeNsec[entry],
      mtimeNsec: c.mtimeNsec[entry],
      ctimeNsec: c.ctimeNsec[entry]
    }
  }

  /**
   * Takes an entry's new size and times (a non-sample that changed in the
   * source); false when they are what the tree has. The native server reads
   * the same columns, so it sees them at once.
   */
  updateAttributes (entry: number, now: ChangingAttributes): boolean {
    const c = this.columns
    if (c.size[entry] === now.size && c.mtimeSec[entry] === now.mtimeSec && c.mtimeNsec[entry] === now.mtimeNsec && c.ctimeSec[entry] === now.ctimeSec && c.ctimeNsec[entry] === now.ctimeNsec) return false
    c.size[entry] = now.size
    c.mtimeSec[entry] = now.mtimeSec; c.mtimeNsec[entry] = now.mtimeNsec
    c.ctimeSec[entry] = now.ctimeSec; c.ctimeNsec[entry] = now.ctimeNsec
    return true
  }

  /** Every entry, ordered by relative path (as a pack lists them). */
  entriesByPath (): { entry: number, path: string }[] {
    return Array.from({ length: this.count }, (_, entry) => ({ entry, path: this.pathOf(entry) })).sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))
  }
}

/**
 * Collects entries in any order (a scan adds a directory's entries as it
 * lists it), then lays them out as a tree's columns. Attributes are given
 * in the order of a native listing's fields (src/chunks/native.ts, Listed).
 */
export class TreeBuilder {
  private size = 0
  private capacity = 1024
  private parent = scratch(Uint32Array, this.capacity)
  private nameEnd = scratch(Uint32Array, this.capacity)
  private kind = scratch(Uint8Array, this.capacity)
  private stats = scratch(Float64Array, this.capacity * Listed.fields)
  private names = scratch(Uint8Array, this.capacity * 16)
  private nameBytes = 0
  private readonly removed = new Set<number>()

  /** Adds an entry and returns its number here; the root comes first (its parent is ignored). */
  add (parent: number, name: string | Buffer, kind: EntryKind, stat: ArrayLike<number>, at = 0): number {
    if (this.size === this.capacity) this.grow()
    const bytes = typeof name === 'string' ? Buffer.from(name) : name
    while (this.nameBytes + bytes.length + 1 > this.names.length) this.names = larger(this.names, this.names.length * 2)
    const entry = this.size++
    this.names.set(bytes, this.nameBytes)
    this.nameBytes += bytes.length
    this.names[this.nameBytes++] = 0
    this.nameEnd[entry] = this.nameBytes
    this.parent[entry] = parent
    this.kind[entry] = kind
    for (let f = 0; f < Listed.fields; f++) this.stats[entry * Listed.fields + f] = stat[at + f] ?? 0
    return entry
  }

  /** The relative paths of the samples added so far. */
  samplePaths (): Set<string> {
    const nameOf = (e: number): string => Buffer.from(this.names.buffer, this.names.byteOffset + nameStartIn(this.nameEnd, e), this.nameEnd[e] - 1 - nameStartIn(this.nameEnd, e)).toString('utf8')
    const paths = new Set<string>()
    for (let e = 1; e < this.size; e++) {
      if (this.kind[e] !== EntryKind.Sample) continue
      let relative = nameOf(e)
      for (let p = this.parent[e]; p !== 0; p = this.parent[p]) relative = `${nameOf(p)}/${relative}`
      paths.add(relative)
    }
    return paths
  }

  /** Gives an entry added earlier other attributes (a directory whose time is known only once all it holds is). */
  restat (entry: number, stat: ArrayLike<number>): void {
    for (let f = 0; f < Listed.fields; f++) this.stats[entry * Listed.fields + f] = stat[f] ?? 0
  }

  /** Leaves an entry out, and everything under it (a directory that could not be listed, or one with nothing to show). */
  remove (entry: number): void { this.removed.add(entry) }

  /** The columns, and for each entry of them the number `add` gave it. The builder is spent. */
  finish (): { columns: TreeColumns, added: Uint32Array } {
    const n = this.size
    // Each kept entry's children, by parent (counting sort).
    const childrenEnd = scratch(Uint32Array, n + 1).fill(0)
    const kept = (e: number): boolean => e !== 0 && !this.removed.has(e)
    for (let e = 1; e < n; e++) if (kept(e)) childrenEnd[this.parent[e] + 1]++
    for (let e = 0; e < n; e++) childrenEnd[e + 1] += childrenEnd[e]
    const byParent = scratch(Uint32Array, childrenEnd[n])
    const filled = scratch(Uint32Array, n)
    filled.set(childrenEnd.subarray(0, n))
    for (let e = 1; e < n; e++) if (kept(e)) byParent[filled[this.parent[e]]++] = e
    const nameStart = (e: number): number => nameStartIn(this.nameEnd, e)
    const byName = (a: number, b: number): number => compareBytes(this.names, nameStart(a), this.nameEnd[a] - 1, this.names, nameStart(b), this.nameEnd[b] - 1)

    // Breadth first from the root: every directory's children get consecutive numbers, in byte order of name.
    const count = 1 + byParent.length
    const added = new Uint32Array(count)
    const numberOf = scratch(Uint32Array, n)
    numberOf[0] = 0
    const firstChild = new Uint32Array(count)
    const childCount = new Uint32Array(count)
    let next = 1
    for (let k = 0; k < next; k++) {
      const e = added[k]
      const children = byParent.subarray(childrenEnd[e], childrenEnd[e + 1]).sort(byName)
      firstChild[k] = next
      childCount[k] = children.length
      for (const child of children) { numberOf[child] = next; added[next++] = child }
    }

    const column = <T extends Uint32Array | Float64Array | Uint8Array>(array: T, of: (e: number) => number): T => {
      for (let k = 0; k < count; k++) array[k] = of(added[k])
      return array
    }
    const stat = (field: Listed) => (e: number) => this.stats[e * Listed.fields + field]
    let nameBytes = 0
    for (let k = 0; k < count; k++) nameBytes += this.nameEnd[added[k]] - nameStart(added[k])
    const names = Buffer.allocUnsafe(nameBytes)
    const nameEnd = new Uint32Array(count)
    let end = 0
    for (let k = 0; k < count; k++) {
      names.set(this.names.subarray(nameStart(added[k]), this.nameEnd[added[k]]), end)
      end += this.nameEnd[added[k]] - nameStart(added[k])
      nameEnd[k] = end
    }
    const columns: TreeColumns = {
      parent: column(new Uint32Array(count), e => e === 0 ? 0 : numberOf[this.parent[e]]),
      names,
      nameEnd,
      firstChild,
      childCount,
      kind: column(new Uint8Array(count), e => this.kind[e]),
      mode: column(new Uint32Array(count), stat(Listed.mode)),
      uid: column(new Uint32Array(count), stat(Listed.uid)),
      gid: column(new Uint32Array(count), stat(Listed.gid)),
      nlink: column(new Uint32Array(count), stat(Listed.nlink)),
      size: column(new Float64Array(count), stat(Listed.size)),
      atimeSec: column(new Float64Array(count), stat(Listed.atimeSec)),
      mtimeSec: column(new Float64Array(count), stat(Listed.mtimeSec)),
      ctimeSec: column(new Float64Array(count), stat(Listed.ctimeSec)),
      atimeNsec: column(new Uint32Array(count), stat(Listed.atimeNsec)),
      mtimeNsec: column(new Uint32Array(count), stat(Listed.mtimeNsec)),
      ctimeNsec: column(new Uint32Array(count), stat(Listed.ctimeNsec)),
      sample: new Uint32Array(count).fill(NOT_A_SAMPLE),
      dev: column(new Float64Array(count), stat(Listed.dev)),
      ino: column(new Float64Array(count), stat(Listed.ino))
    }
    for (const spent of [childrenEnd, byParent, filled, numberOf, this.parent, this.nameEnd, this.kind, this.stats, this.names]) free(spent)
    return { columns, added }
  }

  private grow (): void {
    this.capacity *= 2
    this.parent = larger(this.parent, this.capacity)
    this.nameEnd = larger(this.nameEnd, this.capacity)
    this.kind = larger(this.kind, this.capacity)
    this.stats = larger(this.stats, this.capacity * Listed.fields)
  }
}

/*
 * The builder's working arrays are freed the moment they are done with,
 * not when the garbage collector gets to them: for a large tree they are
 * hundreds of bytes per file, which V8 (whose heap the daemon starts large)
 * otherwise kept until load made it collect, a large share of the daemon's
 * RSS after mount.
 */
type Scratch = Uint32Array | Float64Array | Uint8Array
interface ScratchKind<T> { new (buffer: ArrayBuffer, offset: number, length: number): T, readonly BYTES_PER_ELEMENT: number }

function scratch<T extends Scratch> (Kind: ScratchKind<T>, length: number): T {
  return new Kind(Buffer.allocUnsafeSlow(Math.max(1, length) * Kind.BYTES_PER_ELEMENT).buffer as ArrayBuffer, 0, length)
}

function larger<T extends Scratch> (array: T, length: number): T {
  const copy = scratch(array.constructor as ScratchKind<T>, length)
  copy.set(array)
  free(array)
  return copy
}

/** Frees a scratch array's memory now (it is unusable after). */
function free (array: Scratch): void {
  native().discard(Buffer.from(array.buffer))
}

/** What of a file can change in the source under a live mount: its size and times. */
export interface ChangingAttributes { size: number, mtimeSec: number, mtimeNsec: number, ctimeSec: number, ctimeNsec: number }

/** An open non-sample file, served exactly. */
export interface OpenFile {
  read (buffer: Buffer, length: number, position: number): Promise<number>
  close (): Promise<void>
  /** Its size and times now, where the source can change (a directory; a pack cannot). */
  attributesNow?: () => Promise<ChangingAttributes>
  /** For the native FUSE server, which reads without JS: the open descriptor, or the whole bytes. */
  readonly native: { fd: number } | { bytes: Buffer }
}

/** Where the bytes of non-sample files come from. */
export interface FileReader {
  open (relativePath: string): Promise<OpenFile>
}
