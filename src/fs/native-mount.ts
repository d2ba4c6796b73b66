/**
 * The native FUSE backend (native/fuse_server.cc): libfuse3's low-level
 * API on its own threads answers lookups, attributes, listings and reads
 * without JS; JS is asked once per open, in batches, and answers with what
 * the adapter binds the open to. Reads of a sample are then served from the
 * bound Buffer where the chunk reader put it, with no hop into JS.
 *
 * The server reads the tree's own columns (src/chunks/tree.ts; entry i is
 * inode i + 1), so the tree is held once, by both.
 */
import { execFile } from 'node:child_process'
import path from 'node:path'
import type { DatasetTree } from '../chunks/tree'
import { UsageError } from '../errors'
import type { FsAdapter } from './adapter'
import { CONTROL_DIR, RESET_FILE, STATS_FILE } from './control'
import { errnoOf } from './errno'
import type { MountedFilesystem, MountOptions } from './mount'

interface NativeServer {
  mount (mountpoint: string, statfsPath: string, options: { allowOther: boolean }): void
  /** Each returns the handle number, or 0 when the opener has gone. */
  replyBytes (request: number, bytes: Buffer, directIo: boolean): number
  replyFd (request: number, fd: number, offset: number): number
  replyError (request: number, errno: number): void
  close (): void
  /** FUSE operations the server answered, the kernel's open handles, and closed handles' bytes kept for a re-open. */
  counters (): { lookups: number, getattrs: number, reads: number, opens: number, reopens: number, statThenOpens: number, openHandles: number, keptForReopen: number }
  /** Ends the bindings whose re-open window has passed. */
  sweep (): void
  /** The kernel forgets what it cached of an inode's attributes. */
  invalidate (ino: number): void
}

type ServerClass = new (tree: object, onEvents: (opens: number[] | null, releases: number[] | null) => void, options: { reopenWindowMs: number, fuseThreads: number, ownerUid: number, ownerGid: number }) => NativeServer

const ADDON = path.resolve(__dirname, '../../native/build/Release/redirfs_fuse.node')

/** The native server's class, or a one-line reason why it cannot be used. */
export function loadNativeServer (): ServerClass {
  try {
    return (require(ADDON) as { FuseServer: ServerClass }).FuseServer
  } catch (err) {
    throw new UsageError(`the native FUSE server is not built (${(err as Error).message.split('\n')[0]}); run: npm run setup (it needs Debian's libfuse3-dev), or mount with --fuse-backend fuse-native`)
  }
}

export async function mountNative (mountpoint: string, adapter: FsAdapter, tree: DatasetTree, options: MountOptions & { statfsPath: string, reopenWindowMs: number, fuseThreads: number }): Promise<MountedFilesystem> {
  const FuseServer = loadNativeServer()
  // Inode i + 1 is the tree's entry i; the control directory, the stats file and the reset file follow them.
  const statsIno = tree.count + 2
  const resetIno = tree.count + 3
  const controlFile = (ino: number): string | undefined => ino === statsIno ? STATS_FILE : ino === resetIno ? RESET_FILE : undefined
  /** Native handle number → the adapter's, so stats count open handles and pass-through files get closed. */
  const adapterHandle = new Map<number, number>()

  const open = (request: number, ino: number, flags: number, thread: number, exact: boolean): void => {
    const control = controlFile(ino)
    const bound = control !== undefined ? adapter.bind(control, flags) : adapter.bindEntry(ino - 1, flags, { exact, thread })
    bound.then(handle => {
      let number: number
      if (handle.kind === 'bytes') {
        number = server.replyBytes(request, handle.bytes, true)
      } else if ('bytes' in handle.file.native) {
        number = server.replyBytes(request, handle.file.native.bytes, false)
      } else {
        number = server.replyFd(request, handle.file.native.fd, 0)
      }
      const added = adapter.handles.add(handle)
      // The opener went away before the answer: nothing else will release it (its file, or its bytes, which another open may still take).
      if (number === 0) void adapter.abandon(added)
      else adapterHandle.set(number, added)
    }, err => {
      adapter.noteFailedOpen(controlFile(ino) ?? '/' + tree.pathOf(ino - 1), err)
      server.replyError(request, -errnoOf(err))
    })
  }

  /** Native handle numbers JS answered; JS hears of one when nothing reads its bytes any more (re-opens included). */
  const release = (number: number): void => {
    void adapter.release(adapterHandle.get(number) ?? -1)
    adapterHandle.delete(number)
  }

  let gone: (() => void) | undefined
  let closing = false
  const server: NativeServer = new FuseServer({ ...tree.columns, controlName: CONTROL_DIR.slice(1) }, (opens, releases) => {
    // The kernel ended the connection: unmounted from outside (umount, fusermount -u).
    if (opens === null || releases === null) { if (!closing) gone?.(); return }
    for (const number of releases) release(number)
    // Each open: request, inode, flags, calling thread, and whether that thread stat'ed the path just before (1).
    for (let i = 0; i < opens.length; i += 5) open(opens[i], opens[i + 1], opens[i + 2], opens[i + 3], opens[i + 4] === 1)
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
