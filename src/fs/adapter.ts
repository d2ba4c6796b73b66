/**
 * The FUSE operations, kept thin: resolve the path in the scanned tree,
 * ask the engine what a sample open is bound to (`bind`, which the native
 * server uses too), read plain files through, and refuse every change with
 * EROFS. `operations()` is the fuse-native backend.
 *
 * fuse-native mounts with direct_io and uncached attributes for every file
 * (see mount.ts), because a redirected handle's bytes have another length
 * than the opened file; the native server sets both per file.
 */
import { constants as fsConstants, promises as fs } from 'node:fs'
import type { Logger } from 'pino'
import type { ChangingAttributes, DatasetTree, FileReader, OpenFile } from '../chunks/tree'
import type { SourceWatch } from '../chunks/source-watch'
import type { SampleBuffers } from '../chunks/sample-buffers'
import { OrphanedOpen, UnreadableSample, type ServedFile } from '../engine/engine'
import type { FileId } from '../redirect/layout'
import { LogRate } from '../util/log-rate'
import { CONTROL_DIR, isControlPath, RESET_FILE, STATS_FILE } from './control'
import { errno, errnoOf } from './errno'
import { HandleTable, RESET_ENTRY, STATS_ENTRY, type Handle } from './handles'
import { FsError } from '../errors'
import type { MountStats } from '../stats'

type Callback = (...args: any[]) => void

export interface AdapterOptions {
  tree: DatasetTree
  /** Serves non-sample files exactly. */
  files: FileReader
  /** A path on the filesystem holding the data, for statfs. */
  statfsPath: string
  /** Answers an open of a sample: the engine, or in a cluster the node that routes it. */
  samples: {
    /** `wanted`: whether the opener still wants an answer, asked when one is ready (the engine's `OpenOptions`). */
    open (sample: number, options?: { exact?: boolean, wanted?: () => boolean }): Promise<ServedFile>
    /** An answer that never reached its opener: the file waits for another open. */
    giveBack (served: ServedFile): void
    /** A failed open that must not count: the unreadable file it was charged with is charged to another open. */
    uncharge?: (file: FileId, generation?: number) => void
  }
  /** The pool served samples' bytes were lent from: a released handle's go back to it. */
  buffers: SampleBuffers
  /** The object `<mnt>/.redirfs/stats` shows. */
  stats: () => MountStats
  /** Starts a fresh epoch (an open of `<mnt>/.redirfs/reset`); what it did, shown to the opener. */
  reset: () => object
  /**
   * Told of every sample open before it is decided, with the calling thread
   * when the backend knows it (the native one does): a new training run
   * starts a new epoch (src/runs). False refuses the open (EIO): an
   * orphaned worker of a run that ended, or an opener gone. `recheck`:
   * asked again as an answer is ready, the thread looked at afresh.
   */
  beforeSampleOpen?: (thread: number | undefined, recheck?: boolean) => boolean
  /** How many runs have begun so far (src/runs): one that began while an open waited may have orphaned its opener. */
  runsBegun?: () => number
  /** Told how long each sample open took here (the metrics' open-wait histogram). */
  afterSampleOpen?: (seconds: number) => void
  /**
   * A directory source's changes since the scan (source-watch.ts): an open
   * of an entry, or one answered with a file, that the source no longer
   * lets its readers have is not served from it.
   */
  watch?: SourceWatch
  /**
   * How many pass-through files (non-samples, each a descriptor of the
   * daemon's) may be open at once; past it an open fails with EMFILE, as
   * it would for the opener at its own limit. Without it, users holding
   * files open would take every descriptor the daemon has, and with them
   * its loads, its cache and its log.
   */
  passThroughCap?: number
  log: Logger
}

/** How an open came: `exact`, the opener saw this path's size before opening; `thread`, who opened (native backend). */
export interface OpenOptions { exact?: boolean, thread?: number }

const WRITE_ACCESS = fsConstants.O_WRONLY | fsConstants.O_RDWR

/** Nothing is opened for writing: the mount is read-only. */
function refuseWrites (flags: number): void {
  if ((flags & WRITE_ACCESS) !== 0 || (flags & fsConstants.O_TRUNC) !== 0) throw new FsError('EROFS', 'read-only')
}

const EROFS_OPS = ['write', 'create', 'truncate', 'ftruncate', 'unlink', 'rename', 'mkdir', 'rmdir', 'symlink', 'link', 'chmod', 'chown', 'utimens', 'mknod', 'setxattr', 'removexattr']

export class FsAdapter {
  readonly handles = new HandleTable()
  readonly counters = { passthroughOpens: 0, failedOpens: 0, changedOthers: 0 }
  /** Failed opens are counted (stats) each, and logged 60 a minute at most, with how many were not. */
  private readonly failedOpenLines = new LogRate(60)
  /** Pass-through files open or being opened (AdapterOptions.passThroughCap). */
  private passThroughFiles = 0
  /** Set by a backend that caches attributes in the kernel: an entry's attributes changed. */
  onEntryChanged?: (entry: number) => void
  private readonly mountedAt = new Date()

  constructor (private readonly options: AdapterOptions) {}

  /** The tree's entry at a FUSE path ('/cat/001.jpg'), or -1. */
  private entry (fusePath: string): number {
    return this.options.tree.find(fusePath === '/' ? '' : fusePath.slice(1))
  }

  private attributes (fusePath: string): object | undefined {
    if (fusePath === CONTROL_DIR) return this.syntheticAttributes(0o40555, 0)
    // An open handle's snapshot decides the size, as for samples: fstat must match what reads return.
    if (fusePath === STATS_FILE) return this.syntheticAttributes(0o100444, this.handles.boundSize(STATS_ENTRY) ?? this.statsBytes().length)
    // Owned by whoever mounted, readable by them only: the kernel (default_permissions) keeps others from resetting.
    if (fusePath === RESET_FILE) return { ...this.syntheticAttributes(0o100400, this.handles.boundSize(RESET_ENTRY) ?? 0), uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 }
    const entry = this.entry(fusePath)
    if (entry < 0) return undefined
    const a = this.options.tree.attributes(entry)
    return {
      mode: a.mode,
      uid: a.uid,
      gid: a.gid,
      size: this.handles.boundSize(entry) ?? a.size,
      nlink: a.nlink,
      atime: new Date(a.atimeMs),
      mtime: new Date(a.mtimeMs),
      ctime: new Date(a.ctimeMs)
    }
  }

  private syntheticAttributes (mode: number, size: number): object {
    const root = this.options.tree.attributes(0)
    return { mode, size, uid: root.uid, gid: root.gid, nlink: 1, atime: this.mountedAt, mtime: new Date(), ctime: this.mountedAt }
  }

  private statsBytes (): Buffer {
    return Buffer.from(JSON.stringify(this.options.stats(), null, 2) + '\n')
  }

  /**
   * What an open of `fusePath` is bound to: the one decision both FUSE
   * backends serve. A sample asks the protocol (the bytes may be another
   * file's, unless `exact`: the opener saw this path's size before
   * opening); the stats file is a snapshot; anything else passes through.
   */
  async bind (fusePath: string, flags: number, options: OpenOptions = {}): Promise<Handle> {
    if (!isControlPath(fusePath)) {
      const entry = this.entry(fusePath)
      if (entry < 0) throw new FsError('ENOENT', 'no such file')
      return await this.bindEntry(entry, flags, options)
    }
    refuseWrites(flags)
    if (fusePath === STATS_FILE) return { kind: 'bytes', entry: STATS_ENTRY, bytes: this.statsBytes() }
    if (fusePath === RESET_FILE) {
      // Only a deliberate open resets (redirfs reset opens it non-blocking): never a stray read by a backup or a search.
      if ((flags & fsConstants.O_NONBLOCK) === 0) throw new FsError('EPERM', 'the reset file resets only when opened with O_NONBLOCK; run: redirfs reset <mountpoint>')
      return { kind: 'bytes', entry: RESET_ENTRY, bytes: Buffer.from(JSON.stringify(this.options.reset()) + '\n') }
    }
    if (fusePath === CONTROL_DIR) throw new FsError('EISDIR', 'is a directory')
    throw new FsError('ENOENT', 'no such file')
  }

  /** `bind` for a tree entry the caller has already found (the native server knows it by inode). */
  async bindEntry (entry: number, flags: number, options: OpenOptions = {}): Promise<Handle> {
    const arrival = this.options.watch?.arrival()
    refuseWrites(flags)
    const tree = this.options.tree
    if (tree.isDirectory(entry)) throw new FsError('EISDIR', 'is a directory')
    const sample = tree.sampleOf(entry)
    if (sample !== undefined) {
      if (this.options.beforeSampleOpen?.(options.thread) === false) throw new OrphanedOpen()
      const runs = this.options.runsBegun?.()
      // A run that began while this open waited (on a load) may have made its opener a worker of one that ended
      // (its trainer killed): its answer, or the failure it was charged with, is the new run's, and goes back:
      // the engine does it as soon as the answer is ready (`wanted`); a source that does not ask, here after.
      const orphaned = (): boolean => runs !== undefined && this.options.runsBegun!() !== runs && this.options.beforeSampleOpen?.(options.thread, true) === false
      const started = process.hrtime.bigint()
      let served: ServedFile
      try {
        served = await this.serveSample(sample, options.exact === true, () => !orphaned(), arrival)
      } catch (err) {
        if (err instanceof UnreadableSample && err.charged !== undefined && orphaned()) {
          this.options.samples.uncharge?.(err.charged, err.generation)
          throw new OrphanedOpen()
        }
        throw err
      }
      if (orphaned()) {
        this.options.samples.giveBack(served)
        throw new OrphanedOpen()
      }
      this.options.afterSampleOpen?.(Number(process.hrtime.bigint() - started) / 1e9)
      return { kind: 'bytes', entry, bytes: served.bytes, served: served.file }
    }
    await this.refuseChanged(entry, 'EACCES', arrival)
    if (this.passThroughFiles >= (this.options.passThroughCap ?? Infinity)) throw new FsError('EMFILE', 'as many files are open through the mount as the daemon allows')
    this.counters.passthroughOpens++
    this.passThroughFiles++
    let file: OpenFile | undefined
    try {
      file = await this.options.files.open(tree.pathOf(entry))
      if (file.attributesNow !== undefined) this.refresh(entry, await file.attributesNow())
    } catch (err) {
      this.passThroughFiles--
      await file?.close().catch(() => {})
      throw err
    }
    return { kind: 'passthrough', entry, file }
  }

  /**
   * A sample's answer, never from a file that changed in the source since
   * the scan so that the opener may not have it (it, or a directory above
   * it: source-watch.ts). What the opener gets is what must be readable to
   * them, whatever path they opened (any sample of its group will do). An
   * answer from such a file fails the open with EIO and is let go, as a
   * load that finds a file changed fails the open it was for: each such
   * file costs one open, and is lost to the epoch.
   */
  private async serveSample (sample: number, exact: boolean, wanted: () => boolean, arrival: number | undefined): Promise<ServedFile> {
    const served = await this.options.samples.open(sample, { exact, wanted })
    const watch = this.options.watch
    if (watch === undefined) return served
    const answered = this.options.tree.samples[served.file].entry
    watch.drainSince(arrival!)
    const refusal = watch.isClear(answered) ? undefined : await watch.refusal(answered)
    if (refusal === undefined) return served
    this.options.buffers.give(served.bytes)
    throw new FsError('EIO', refusal.why)
  }

  /** Fails an open of a non-sample the source no longer lets its readers have (source-watch.ts). */
  private async refuseChanged (entry: number, errno: 'EACCES', arrival: number | undefined): Promise<void> {
    const watch = this.options.watch
    if (watch === undefined) return
    watch.drainSince(arrival!)
    if (watch.isClear(entry)) return
    const refusal = await watch.refusal(entry)
    if (refusal !== undefined) throw new FsError(errno, refusal.why)
  }

  /**
   * A non-sample passes through exactly, so it is served as the source has
   * it now: one that changed since the scan (a label file rewritten, a log
   * that grew) shows its new size and times from this open on.
   */
  private refresh (entry: number, now: ChangingAttributes): void {
    if (!this.options.tree.updateAttributes(entry, now)) return
    this.counters.changedOthers++
    this.options.log.info({ path: this.options.tree.pathOf(entry), size: now.size }, 'a non-sample file changed in the source since the mount; serving it as it is now')
    this.onEntryChanged?.(entry)
  }

  /**
   * Ends a handle: a pass-through file is closed; bound bytes are nobody
   * else's (the protocol hands each file's bytes to one open), so their
   * buffer goes back for the next load to fill, instead of waiting for the
   * garbage collector, which at thousands of samples a second would be most
   * of the daemon's CPU.
   */
  async release (number: number): Promise<void> {
    const handle = this.handles.remove(number)
    if (handle?.kind === 'passthrough') {
      this.passThroughFiles--
      await handle.file.close().catch(() => {})
    }
    if (handle?.kind === 'bytes') this.options.buffers.give(handle.bytes)
  }

  /**
   * Ends a handle whose opener went away before the answer reached it (the
   * backend could not deliver it): a sample goes back to wait for another
   * open, so a trainer killed in the middle of an open loses no sample.
   */
  async abandon (number: number): Promise<void> {
    const handle = this.handles.get(number)
    if (handle?.kind === 'bytes' && handle.served !== undefined) {
      this.handles.remove(number)
      this.options.samples.giveBack({ file: handle.served, bytes: handle.bytes })
      return
    }
    await this.release(number)
  }

  /** Counts and logs an open that failed for want of data (EIO); other errors are the caller's. */
  noteFailedOpen (fusePath: string, err: unknown): void {
    if (errnoOf(err) !== errno('EIO')) return
    this.counters.failedOpens++
    const line = this.failedOpenLines.take()
    if (line.log) this.options.log.error({ path: fusePath, err: (err as Error).message, ...(line.held > 0 ? { notLogged: line.held } : {}) }, 'open failed')
  }

  /** The operations object for fuse-native. */
  operations (): Record<string, Callback> {
    const ops: Record<string, Callback> = {
      getattr: (fusePath: string, cb: Callback) => {
        const attributes = this.attributes(fusePath)
        attributes === undefined ? cb(errno('ENOENT')) : cb(0, attributes)
      },
      readdir: (fusePath: string, cb: Callback) => {
        if (fusePath === CONTROL_DIR) return cb(0, ['reset', 'stats'])
        const entry = isControlPath(fusePath) ? -1 : this.entry(fusePath)
        if (entry < 0) return cb(errno('ENOENT'))
        const names = this.options.tree.childNames(entry)
        if (names === undefined) return cb(errno('ENOTDIR'))
        cb(0, names)
      },
      access: (fusePath: string, mode: number, cb: Callback) => {
        if (this.attributes(fusePath) === undefined) return cb(errno('ENOENT'))
        cb((mode & fsConstants.W_OK) !== 0 ? errno('EROFS') : 0)
      },
      statfs: (_fusePath: string, cb: Callback) => {
        fs.statfs(this.options.statfsPath).then(
          s => cb(0, { bsize: s.bsize, frsize: s.bsize, blocks: s.blocks, bfree: 0, bavail: 0, files: s.files, ffree: 0, favail: 0, fsid: 0, flag: 1, namemax: 255 }),
          err => cb(errnoOf(err)))
      },
      open: (fusePath: string, flags: number, cb: Callback) => {
        this.bind(fusePath, flags).then(
          handle => cb(0, this.handles.add(handle)),
          err => {
            this.noteFailedOpen(fusePath, err)
            cb(errnoOf(err))
          })
      },
      read: (_fusePath: string, number: number, buffer: Buffer, length: number, position: number, cb: Callback) => {
        const handle = this.handles.get(number)
        if (handle === undefined) return cb(errno('EBADF'))
        if (handle.kind === 'bytes') {
          if (position >= handle.bytes.length) return cb(0)
          return cb(handle.bytes.copy(buffer, 0, position, Math.min(position + length, handle.bytes.length)))
        }
        handle.file.read(buffer, length, position).then(bytesRead => cb(bytesRead), err => cb(errnoOf(err)))
      },
      release: (_fusePath: string, number: number, cb: Callback) => {
        void this.release(number).then(() => cb(0))
      }
    }
    for (const name of EROFS_OPS) ops[name] = (...args: any[]) => (args[args.length - 1] as Callback)(errno('EROFS'))
    return ops
  }
}
