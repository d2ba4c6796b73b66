/**
 * An ImageFolder stored as objects, one per file, directories from the `/`
 * in the keys: the tree it presents, and the chunk source and file reader
 * that serve it.
 *
 * - **Listing.** `listTree` lists each first-level prefix in parallel
 *   (store.ts), so a dataset of a million objects lists in seconds, not one
 *   page after another. The tree is what a scan of the same directory
 *   would give: the same samples (extension, size, inside a directory),
 *   include list, groups and entries left out, by the scan's own rules
 *   (`finishScan`). Objects have no owner or mode: files show as the
 *   mounting user's, mode 0444 (directories 0555), times from
 *   LastModified.
 * - **Reads.** A chunk load is its files' GETs, all at once (the store
 *   bounds requests in flight): latency, not bandwidth, limits one object
 *   at a time, so a load keeps many requests out. Each GET sends the ETag
 *   seen at mount as If-Match and checks the length, so an object replaced
 *   during the mount is an error (counted as changed, EIO for the open
 *   that needed it), never other bytes.
 */
import type { Logger } from 'pino'
import type { SampleBuffers } from '../chunks/sample-buffers'
import { DEFAULT_SAMPLE_EXTENSIONS, finishScan, isSampleFile, type ScanOptions } from '../chunks/scan'
import type { ChunkRequest, ChunkSource } from '../chunks/source'
import type { FileId } from '../redirect/layout'
import { Listed } from '../chunks/native'
import { EntryKind, TreeBuilder, type DatasetTree, type FileReader, type OpenFile, type SkippedEntry } from '../chunks/tree'
import { FsError, UsageError } from '../errors'
import type { PackInput } from '../pack/writer'
import { EtagColumn } from './etags'
import { s3Url, type S3Location } from './location'
import { StoreError } from './store-error'
import type { ObjectInfo, ObjectStore } from './store'

export interface ObjectDataset {
  readonly tree: DatasetTree
  /** The ETag of each tree entry's object, as listed at mount. */
  readonly etags: EtagColumn
  readonly location: S3Location
}

/** The one stat row a scan fills for each entry in turn (the tree builder copies it): a row per object would be garbage. */
const fields = new Float64Array(Listed.fields)

/** A stat row as a listing gives it (src/chunks/native.ts, Listed), valid until the next call. */
function row (mode: number, size: number, modified: Date): Float64Array {
  const ms = modified.getTime()
  const sec = Math.floor(ms / 1000)
  const nsec = (ms - sec * 1000) * 1e6
  fields[Listed.mode] = mode
  fields[Listed.size] = size
  fields[Listed.uid] = process.getuid?.() ?? 0
  fields[Listed.gid] = process.getgid?.() ?? 0
  fields[Listed.nlink] = (mode & 0o170000) === 0o040000 ? 2 : 1
  fields[Listed.atimeSec] = fields[Listed.mtimeSec] = fields[Listed.ctimeSec] = sec
  fields[Listed.atimeNsec] = fields[Listed.mtimeNsec] = fields[Listed.ctimeNsec] = nsec
  return fields
}

const DIRECTORY_MODE = 0o40555
const FILE_MODE = 0o100444

/** Lists `location` and builds the tree a mount shows; a prefix with no objects at all is refused with what to do. */
export async function scanBucket (store: ObjectStore, location: S3Location, options: ScanOptions = {}): Promise<ObjectDataset> {
  const where = s3Url(location.bucket, location.prefix)
  const extensions = new Set(options.extensions ?? DEFAULT_SAMPLE_EXTENSIONS)
  const builder = new TreeBuilder()
  const skipped: SkippedEntry[] = []
  let listed = 0
  let newest = new Date(0)
  const root = builder.add(0, '', EntryKind.Directory, row(DIRECTORY_MODE, 0, newest))
  const directories = new Map<string, number>([['', root]])
  const files = new Set<string>()
  /** Per directory: samples in the bucket, and shown (the include list may hide some). */
  const counts = new Map<string, { found: number, shown: number }>([['', { found: 0, shown: 0 }]])
  const etagOf = new EtagColumn()

  const directory = (relative: string, modified: Date): number | undefined => {
    const known = directories.get(relative)
    if (known !== undefined) return known
    if (files.has(relative)) return undefined
    const slash = relative.lastIndexOf('/')
    const parent = directory(slash < 0 ? '' : relative.slice(0, slash), modified)
    if (parent === undefined) return undefined
    const entry = builder.add(parent, relative.slice(slash + 1), EntryKind.Directory, row(DIRECTORY_MODE, 0, modified))
    directories.set(relative, entry)
    counts.set(relative, { found: 0, shown: 0 })
    return entry
  }

  // Each page as it arrives, in an order that settles a name clash as key order would: the objects beside the
  // classes first, then each class's keys in order (a name and the names under it are always in one of those).
  // What the endpoint says is checked as any input: a key outside the prefix asked for, a key listed twice, a
  // size no object has or a time that is not one, is left out by name.
  const add = (object: ObjectInfo): void => {
    listed++
    if (!object.key.startsWith(location.prefix)) {
      skipped.push({ path: object.key, why: `a key outside the prefix ${location.prefix} that the listing of it gave` })
      return
    }
    if (object.lastModified > newest) newest = object.lastModified
    const relative = object.key.slice(location.prefix.length)
    if (relative === '') return
    if (!Number.isSafeInteger(object.size) || object.size < 0) {
      skipped.push({ path: relative, why: `a size of ${object.size} in the listing, which no object has` })
      return
    }
    // listing-xml.ts reads LastModified as given: one that is not a date would be a NaN time, which no file has.
    if (Number.isNaN(object.lastModified.getTime())) {
      skipped.push({ path: relative, why: 'a LastModified in the listing that is not a time' })
      return
    }
    const isMarker = relative.endsWith('/')
    const parts = (isMarker ? relative.slice(0, -1) : relative).split('/')
    if (parts.some(part => part === '' || part === '.' || part === '..')) {
      skipped.push({ path: relative, why: 'a key that is not a plain path (an empty, "." or ".." part)' })
      return
    }
    if (isMarker) {
      if (directory(parts.join('/'), object.lastModified) === undefined) skipped.push({ path: relative, why: 'a directory marker under the name of a file' })
      return
    }
    if (directories.has(relative)) {
      skipped.push({ path: relative, why: 'an object with the name of a directory' })
      return
    }
    if (files.has(relative)) {
      skipped.push({ path: relative, why: 'a key the listing gave twice' })
      return
    }
    const slash = relative.lastIndexOf('/')
    const parentPath = slash < 0 ? '' : relative.slice(0, slash)
    const parent = directory(parentPath, object.lastModified)
    if (parent === undefined) {
      skipped.push({ path: relative, why: 'inside a name that is also a file' })
      return
    }
    const sample = isSampleFile(relative, object.size, extensions)
    const tally = (field: 'found' | 'shown'): void => {
      for (let at = parentPath; ; at = at.includes('/') ? at.slice(0, at.lastIndexOf('/')) : '') {
        counts.get(at)![field]++
        if (at === '') break
      }
    }
    if (sample) tally('found')
    if (sample && options.include !== undefined && !options.include.has(relative)) return
    if (sample) tally('shown')
    files.add(relative)
    const entry = builder.add(parent, parts[parts.length - 1], sample ? EntryKind.Sample : EntryKind.Other, row(FILE_MODE, object.size, object.lastModified))
    etagOf.set(entry, object.etag)
  }
  await store.listTreePages(location.prefix, page => { for (const object of page) add(object) })
  if (listed === 0) {
    throw new UsageError(`${where} holds no objects: neither a pack (redirfs pack <dir> ${where}) nor an ImageFolder (class directories of samples); check the bucket and prefix`)
  }
  builder.restat(root, row(DIRECTORY_MODE, 0, newest))
  // A class the include list empties is hidden, as a scan hides it: ImageFolder refuses an empty class.
  for (const [relative, { found, shown }] of counts) if (relative !== '' && found > 0 && shown === 0) builder.remove(directories.get(relative)!)

  const { tree, added } = finishScan(builder, skipped, { ...options, extensions: [...extensions] })
  return { tree, etags: etagOf.renumbered(added), location }
}

const keyOf = (dataset: ObjectDataset, entry: number): string => dataset.location.prefix + dataset.tree.pathOf(entry)

/** The chunk source of an ImageFolder stored as objects. */
export class ObjectSource implements ChunkSource {
  readonly readsFileByFile = true
  private filesRead = 0
  private readErrors = 0
  private readonly changedFiles = new Set<number>()

  constructor (private readonly store: ObjectStore, private readonly dataset: ObjectDataset, private readonly buffers: SampleBuffers, private readonly log: Logger) {}

  async fetch (request: ChunkRequest): Promise<Map<FileId, Buffer>> {
    const delivered = new Map<FileId, Buffer>()
    const { tree, etags } = this.dataset
    await Promise.all(request.files.map(async id => {
      const sample = tree.samples[id]
      let target: Buffer | undefined
      try {
        target = this.buffers.take(sample.size) // a file too large for a Buffer fails alone, not its whole load
        const bytes = await this.store.getObject(keyOf(this.dataset, sample.entry), { ifMatch: etags.get(sample.entry), expectedLength: sample.size, into: target })
        delivered.set(id, bytes)
        this.filesRead++
      } catch (err) {
        if (target !== undefined) this.buffers.give(target)
        if (err instanceof StoreError && err.kind === 'changed') this.changedFiles.add(id)
        else this.readErrors++
        this.log.error({ file: sample.path, err: (err as Error).message }, 'cannot serve sample object')
      }
    }))
    return delivered
  }

  stats (): Record<string, number | string> {
    const { bucket, prefix } = this.dataset.location
    return { kind: 'objects', bucket, prefix, filesRead: this.filesRead, readErrors: this.readErrors, changedFiles: this.changedFiles.size, ...this.store.stats() }
  }

  async close (): Promise<void> { await this.store.close() }
}

/** Non-sample objects, read whole at open, as they are now (a label file rewritten is served new). */
export class ObjectFileReader implements FileReader {
  constructor (private readonly store: ObjectStore, private readonly dataset: ObjectDataset) {}

  async open (relativePath: string): Promise<OpenFile> {
    const entry = this.dataset.tree.find(relativePath)
    if (entry < 0) throw new FsError('ENOENT', 'no such file')
    const bytes = await this.store.getObject(keyOf(this.dataset, entry)).catch((err: unknown) => {
      throw new FsError('EIO', `cannot read ${relativePath}: ${(err as Error).message}`, { cause: err })
    })
    const { mtimeSec, mtimeNsec, ctimeSec, ctimeNsec } = this.dataset.tree.columns
    return {
      read: async (buffer, length, position) => bytes.copy(buffer, 0, position, Math.min(position + length, bytes.length)),
      close: async () => {},
      native: { bytes },
      attributesNow: async () => ({ size: bytes.length, mtimeSec: mtimeSec[entry], mtimeNsec: mtimeNsec[entry], ctimeSec: ctimeSec[entry], ctimeNsec: ctimeNsec[entry] })
    }
  }
}

/** An ImageFolder in a bucket as the input of `redirfs pack`: its files read by GET, each pinned to its listed ETag and size. */
export function bucketInput (store: ObjectStore, dataset: ObjectDataset): PackInput {
  return {
    where: s3Url(dataset.location.bucket, dataset.location.prefix),
    tree: dataset.tree,
    read: async (entries, buffers) => await Promise.all(entries.map(async entry => {
      const size = dataset.tree.columns.size[entry]
      const target = buffers.take(size)
      try {
        return await store.getObject(keyOf(dataset, entry), { ifMatch: dataset.etags.get(entry), expectedLength: size, into: target })
      } catch (err) {
        buffers.give(target)
        throw err instanceof StoreError && err.kind === 'changed'
          ? new UsageError(`${dataset.tree.pathOf(entry)} changed in the bucket while packing: ${err.message}`)
          : err
      }
    }))
  }
}
