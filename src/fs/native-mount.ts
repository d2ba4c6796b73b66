/**
 * The native FUSE backend (native/fuse_server.cc): libfuse3's low-level
 * API on its own threads answers lookups, attributes, listings and reads
 * without JS; JS is asked once per open, in batches, and answers with what
 * the adapter binds the open to. Reads of a sample are then served from the
 * bound Buffer where the chunk reader put it, with no hop into JS.
 *
 * The tree crosses once, at mount, as flat arrays (entry i is inode i + 1,
 * the root first); names travel as bytes.
 */
import { execFile } from 'node:child_process'
import path from 'node:path'
import { secondsOf, type DatasetTree } from '../chunks/tree'
import { UsageError } from '../errors'
import type { FsAdapter } from './adapter'
import { CONTROL_DIR, STATS_FILE } from './control'
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
}

type ServerClass = new (tree: object, onEvents: (opens: number[], releases: number[]) => void, options: { reopenWindowMs: number }) => NativeServer

const ADDON = path.resolve(__dirname, '../../native/build/Release/redirfs_fuse.node')

/** The native server's class, or a one-line reason why it cannot be used. */
export function loadNativeServer (): ServerClass {
  try {
    return (require(ADDON) as { FuseServer: ServerClass }).FuseServer
  } catch (err) {
    throw new UsageError(`the native FUSE server is not built (${(err as Error).message.split('\n')[0]}); run: npm run setup (it needs Debian's libfuse3-dev), or mount with --fuse-backend fuse-native`)
  }
}

/** The tree as the native server takes it: parents, names and attributes by entry, the root first. */
function flatTree (tree: DatasetTree): { arrays: Record<string, unknown>, paths: string[] } {
  const paths = [...tree.entries.keys()].sort()
  // Only directories are parents: a map of those alone, not of every path (500,000 entries' worth of garbage at mount).
  const directoryIndex = new Map<string, number>()
  paths.forEach((p, i) => { if (tree.entries.get(p)!.children !== undefined) directoryIndex.set(p, i) })
  const nameStart = (relative: string): number => relative.lastIndexOf('/') + 1
  let nameBytes = 0
  for (const relative of paths) nameBytes += Buffer.byteLength(relative.slice(nameStart(relative)))
  const names = Buffer.allocUnsafe(nameBytes)
  const n = paths.length
  const parent = new Uint32Array(n); const nameEnd = new Uint32Array(n)
  const mode = new Uint32Array(n); const uid = new Uint32Array(n); const gid = new Uint32Array(n); const nlink = new Uint32Array(n)
  const kind = new Uint8Array(n)
  const size = new Float64Array(n)
  // Times as whole seconds and nanoseconds, exact.
  const atimeSec = new Float64Array(n); const mtimeSec = new Float64Array(n); const ctimeSec = new Float64Array(n)
  const atimeNsec = new Uint32Array(n); const mtimeNsec = new Uint32Array(n); const ctimeNsec = new Uint32Array(n)
  let end = 0
  paths.forEach((relative, i) => {
    const entry = tree.entries.get(relative)!
    const a = entry.attributes
    const start = nameStart(relative)
    parent[i] = relative === '' ? 0 : directoryIndex.get(start === 0 ? '' : relative.slice(0, start - 1))!
    end += names.write(relative.slice(start), end)
    nameEnd[i] = end
    mode[i] = a.mode; uid[i] = a.uid; gid[i] = a.gid; nlink[i] = a.nlink
    kind[i] = entry.children !== undefined ? 0 : entry.sample !== undefined ? 1 : 2
    size[i] = a.size
    atimeSec[i] = secondsOf(a.atimeMs, a.atimeNsec); mtimeSec[i] = secondsOf(a.mtimeMs, a.mtimeNsec); ctimeSec[i] = secondsOf(a.ctimeMs, a.ctimeNsec)
    atimeNsec[i] = a.atimeNsec; mtimeNsec[i] = a.mtimeNsec; ctimeNsec[i] = a.ctimeNsec
  })
  const arrays = { parent, nameEnd, names, mode, uid, gid, nlink, kind, size, atimeSec, mtimeSec, ctimeSec, atimeNsec, mtimeNsec, ctimeNsec, controlName: CONTROL_DIR.slice(1) }
  return { arrays, paths }
}

export async function mountNative (mountpoint: string, adapter: FsAdapter, tree: DatasetTree, options: MountOptions & { statfsPath: string, reopenWindowMs: number }): Promise<MountedFilesystem> {
  const FuseServer = loadNativeServer()
  const { arrays, paths } = flatTree(tree)
  const statsIno = paths.length + 2
  const fusePathOf = (ino: number): string => ino === statsIno ? STATS_FILE : '/' + paths[ino - 1]
  /** Native handle number → the adapter's, so stats count open handles and pass-through files get closed. */
  const adapterHandle = new Map<number, number>()

  const open = (request: number, ino: number, flags: number, exact: boolean): void => {
    const fusePath = fusePathOf(ino)
    adapter.bind(fusePath, flags, { exact }).then(handle => {
      let number: number
      if (handle.kind === 'bytes') {
        number = server.replyBytes(request, handle.bytes, true)
      } else if ('bytes' in handle.file.native) {
        number = server.replyBytes(request, handle.file.native.bytes, false)
      } else {
        number = server.replyFd(request, handle.file.native.fd, 0)
      }
      if (number === 0) {
        // The opener went away before the answer: nothing will release it.
        if (handle.kind === 'passthrough') void handle.file.close().catch(() => {})
        return
      }
      adapterHandle.set(number, adapter.handles.add(handle))
    }, err => {
      adapter.noteFailedOpen(fusePath, err)
      server.replyError(request, -errnoOf(err))
    })
  }

  /** Native handle numbers JS answered; JS hears of one when nothing reads its bytes any more (re-opens included). */
  const release = (number: number): void => {
    void adapter.release(adapterHandle.get(number) ?? -1)
    adapterHandle.delete(number)
  }

  const server: NativeServer = new FuseServer(arrays, (opens, releases) => {
    for (const number of releases) release(number)
    // Each open: request, inode, flags, calling thread, and whether that thread stat'ed the path just before (1).
    for (let i = 0; i < opens.length; i += 5) open(opens[i], opens[i + 1], opens[i + 2], opens[i + 4] === 1)
  }, { reopenWindowMs: options.reopenWindowMs })
  try {
    server.mount(mountpoint, options.statfsPath, { allowOther: options.allowOther })
  } catch (err) {
    server.close()
    throw err
  }
  // An idle mount lets go of bytes kept for a re-open once the window has passed.
  const sweeper = options.reopenWindowMs > 0 ? setInterval(() => server.sweep(), Math.max(50, options.reopenWindowMs)).unref() : undefined
  return {
    counters: () => server.counters(),
    unmount: async () => {
      clearInterval(sweeper)
      // Lazily, from a child process: the kernel may ask this process about the mount while it goes.
      await new Promise<void>((resolve, reject) => execFile('umount', ['-l', mountpoint], err => (err ? reject(err) : resolve())))
      server.close()
    }
  }
}
