/**
 * The native FUSE backend (native/fuse_server.cc): libfuse3's low-level
 * API on its own threads answers lookups, attributes, listings and reads
 * without JS; JS is asked once per open, in batches, and answers with what
 * the adapter binds the open to. Reads of a sample are then served from the
 * bound Buffer where the chunk reader put it, with no hop into JS.
 *
 * The server reads the tree's own columns (src/chunks/tree.ts; entry i is
 * inode i + 1), so the tree is held once, by both; and it numbers its
 * handles with the adapter's numbers (src/fs/handles.ts), so a handle is
 * known by one number on both sides.
 */
import { execFile } from 'node:child_process'
import type { DatasetTree } from '../chunks/tree'
import { addonPath } from '../chunks/native'
import { UsageError } from '../errors'
import type { FsAdapter } from './adapter'
import { CONTROL_DIR, RESET_FILE, STATS_FILE } from './control'
import { errnoOf } from './errno'
import type { MountedFilesystem, MountOptions } from './backend'

interface NativeServer {
  mount (mountpoint: string, statfsPath: string, options: { allowOther: boolean }): void
  /** Each answers an open with the adapter's handle `handle`; false when the opener has gone (nobody got it). */
  replyBytes (request: number, handle: number, bytes: Buffer, directIo: boolean): boolean
  replyFd (request: number, handle: number, fd: number, offset: number): boolean
  replyError (request: number, errno: number): void
  close (): void
  /** FUSE operations the server answered, the kernel's open handles, and closed handles' bytes kept for a re-open. */
  counters (): { lookups: number, getattrs: number, reads: number, opens: number, reopens: number, statThenOpens: number, openHandles: number, keptForReopen: number }
  /** Ends the bindings whose re-open window has passed. */
  sweep (): void
  /** The kernel forgets what it cached of an inode's attributes. */
  invalidate (ino: number): void
}

/**
 * The server hands JS batches of opens, each a record of `fields` numbers
 * at these offsets (native/fuse_events.h), and releases, each one handle
 * number; `null` for both when the kernel ended the connection.
 */
type OnEvents = (opens: number[] | null, releases: number[] | null) => void
interface OpenRecord { request: number, inode: number, flags: number, thread: number, exact: number, fields: number }

type ServerClass = new (tree: object, onEvents: OnEvents, options: { reopenWindowMs: number, fuseThreads: number, ownerUid: number, ownerGid: number }) => NativeServer
interface Addon { FuseServer: ServerClass, openRecord: OpenRecord }

/** The native server's addon, or a one-line reason why it cannot be used. */
export function loadNativeServer (): Addon {
  try {
    return require(addonPath('redirfs_fuse')) as Addon
  } catch (err) {
    if (err instanceof UsageError) throw err
    throw new UsageError(`the native FUSE server is not built (${(err as Error).message.split('\n')[0]}); run: npm run setup (it needs Debian's libfuse3-dev), or mount with --fuse-backend fuse-native`)
  }
}

export async function mountNative (mountpoint: string, adapter: FsAdapter, tree: DatasetTree, options: MountOptions & { statfsPath: string, reopenWindowMs: number, fuseThreads: number }): Promise<MountedFilesystem> {
  const { FuseServer, openRecord } = loadNativeServer()
  // Inode i + 1 is the tree's entry i; the control directory, the stats file and the reset file follow them.
  const statsIno = tree.count + 2
  const resetIno = tree.count + 3
  const controlFile = (ino: number): string | undefined => ino === statsIno ? STATS_FILE : ino === resetIno ? RESET_FILE : undefined

  const open = (request: number, ino: number, flags: number, thread: number, exact: boolean): void => {
    const control = controlFile(ino)
    const bound = control !== undefined ? adapter.bind(control, flags) : adapter.bindEntry(ino - 1, flags, { exact, thread })
    bound.then(handle => {
      const number = adapter.handles.add(handle)
      const delivered = handle.kind === 'bytes'
        ? server.replyBytes(request, number, handle.bytes, true)
        : 'bytes' in handle.file.native
          ? server.replyBytes(request, number, handle.file.native.bytes, false)
          : server.replyFd(request, number, handle.file.native.fd, 0)
      // The opener went away before the answer: nothing else will release it (its file, or its bytes, which another open may still take).
      if (!delivered) void adapter.abandon(number)
    }, err => {
      adapter.noteFailedOpen(controlFile(ino) ?? '/' + tree.pathOf(ino - 1), err)
      server.replyError(request, -errnoOf(err))
    })
  }

  let gone: (() => void) | undefined
  let closing = false
  const server: NativeServer = new FuseServer({ ...tree.columns, controlName: CONTROL_DIR.slice(1) }, (opens, releases) => {
    // The kernel ended the connection: unmounted from outside (umount, fusermount -u).
    if (opens === null || releases === null) { if (!closing) gone?.(); return }
    // A handle JS answered is released once nothing reads its bytes or file any more (its re-opens included).
    for (const number of releases) void adapter.release(number)
    // Each open: the request, the inode, its flags, the calling thread, and whether that thread stat'ed the path just before (1).
    const r = openRecord
    for (let i = 0; i < opens.length; i += r.fields) open(opens[i + r.request], opens[i + r.inode], opens[i + r.flags], opens[i + r.thread], opens[i + r.exact] === 1)
  }, { reopenWindowMs: options.reopenWindowMs, fuseThreads: options.fuseThreads, ownerUid: process.getuid?.() ?? 0, ownerGid: process.getgid?.() ?? 0 })
  try {
    server.mount(mountpoint, options.statfsPath, { allowOther: options.allowOther })
  } catch (err) {
    server.close()
    throw err
  }
  // A non-sample that changed since the scan: the kernel must ask for its attributes again.
  adapter.onEntryChanged = entry => server.invalidate(entry + 1)
  // An idle mount lets go of bytes kept for a re-open once the window has passed.
  const sweeper = options.reopenWindowMs > 0 ? setInterval(() => server.sweep(), Math.max(50, options.reopenWindowMs)).unref() : undefined
  return {
    counters: () => server.counters(),
    onGone: listener => { gone = listener },
    unmount: async () => {
      closing = true
      clearInterval(sweeper)
      // Lazily, from a child process: the kernel may ask this process about the mount while it goes.
      await new Promise<void>((resolve, reject) => execFile('umount', ['-l', mountpoint], err => (err ? reject(err) : resolve())))
      server.close()
    }
  }
}
