/**
 * The native chunk reader (native/redirfs_native.cc), loaded once.
 * Built by `npm run setup`; its absence is a clear error, not a stack trace.
 */
import { closeSync, constants, fstatSync, openSync, type BigIntStats } from 'node:fs'
import path from 'node:path'
import { UsageError } from '../errors'

interface NativeBinding {
  readAligned (fd: number, offset: number, length: number, direct: boolean): Promise<Buffer>
  /** Copies piece i into targets[i]; `copied` says how many were (none when the read was short). */
  readChunk (fd: number, offset: number, length: number, direct: boolean, pieces: Float64Array, targets: Buffer[]): Promise<ChunkRead>
  /**
   * Reads file i into targets[i]: the bytes read, or a Buffer of its own for a file that filled its target (it grew), or why it
   * could not be read. Regular files only, opened without blocking. With `expected` (`Expected.fields` numbers per file, what
   * the scan saw), another file in its place or one modified since is an ESTALE error, and one whose owner changed or whose
   * mode lost a bit the mount shows is an EACCES error.
   */
  readFiles (paths: string[], targets: Buffer[], expected?: Float64Array): Promise<(number | Buffer | Error)[]>
  /** zlib's CRC-32 as the chunk reader computes it (native/crc32.h). */
  crc32 (bytes: Buffer, initial?: number): number
  /** Frees the memory of a Buffer that is its only view, now; every view of it becomes empty. */
  discard (bytes: Buffer): boolean
  /**
   * A directory's entries (names as raw bytes) and their attributes, links followed: `Listed.fields` numbers per
   * entry (see `Listed`); for each symbolic link, the real path it leads to (empty when it leads nowhere, and for other entries).
   */
  listDirectory (path: string): Promise<{ names: Buffer[], fields: Float64Array, targets: Buffer[] }>
  /** Whether an entry (links followed) has a POSIX or NFSv4 ACL, or one cannot be ruled out. */
  hasAcl (path: string): boolean
  /** An inotify instance, non-blocking (source-watch.ts). */
  watchOpen (): number
  /** Watches a directory (or, `directory` false, a file) for what can change who may read its entries; the watch descriptor, or why not (code ENOSPC: past the limit). */
  watchAdd (fd: number, path: string, directory: boolean): number | Error
  /** The events pending now (a name is empty for the directory's own); undefined when none is. */
  watchRead (fd: number): { wds: Int32Array, masks: Uint32Array, names: Buffer[] } | undefined
  /** Makes glibc serve sample-sized buffers by mmap, so freed samples leave the process (the daemon calls it once at start). */
  tuneAllocator (): void
}

/**
 * Where each attribute of an entry sits in `listDirectory`'s fields (native/redirfs_native.cc, ListedField); errno is 0 when
 * the stat worked; dev and ino identify an entry (a directory reached twice, a file replaced since); link is 1 for a symbolic
 * link; acl is 1 for an entry with an access ACL.
 */
export const enum Listed { mode, size, uid, gid, nlink, atimeSec, atimeNsec, mtimeSec, mtimeNsec, ctimeSec, ctimeNsec, errno, dev, ino, link, acl, fields }

/** What `readFiles` checks of each file, in this order (native/redirfs_native.cc, ExpectedField): the mode is the one the mount shows. */
export const enum Expected { mtimeSec, mtimeNsec, dev, ino, mode, uid, gid, fields }

/** A chunk (or a run of it) as read: its length, its CRC-32 (where the reader takes one), how many pieces were copied into their targets, and their CRC-32s (none when the read is short). */
export interface ChunkRead {
  length: number
  /** Undefined where the reader takes none of the run whole (a bucket's scatters it into the targets): each file's CRC is checked anyway. */
  crc?: number
  copied: number
  fileCrcs: number[]
}

/**
 * Where a native addon (`redirfs_native`, `redirfs_fuse`) is: native/build/,
 * or with REDIRFS_NATIVE_BUILD=build-asan the build with AddressSanitizer and
 * UndefinedBehaviorSanitizer (npm run build:asan, in native/build-asan/; see
 * docs/development.md). Only a build directory of this package's native/
 * can be named: the variable chooses a build, never a path to load code from.
 */
export function addonPath (name: 'redirfs_native' | 'redirfs_fuse'): string {
  const build = process.env.REDIRFS_NATIVE_BUILD ?? ''
  if (build === '' || build === 'build') return path.resolve(__dirname, '../../native/build/Release', `${name}.node`)
  if (!/^build-[a-z0-9]+$/.test(build)) throw new UsageError(`REDIRFS_NATIVE_BUILD names a build directory of native/ (build, build-asan), not '${build}'`)
  return path.resolve(__dirname, '../../native', build, 'build/Release', `${name}.node`)
}

let binding: NativeBinding | undefined

export function native (): NativeBinding {
  if (binding === undefined) {
    const addon = addonPath('redirfs_native')
    try {
      binding = require(addon) as NativeBinding
    } catch (err) {
      throw new UsageError(`the native chunk reader is not built (${addon}: ${(err as Error).message.split('\n')[0]}); run: npm run setup`)
    }
  }
  return binding
}

/**
 * A file read in aligned ranges, with O_DIRECT where the filesystem allows
 * it, so the page cache does not keep a second copy of chunk bytes.
 */
export class ChunkFile {
  private constructor (readonly fd: number, readonly direct: boolean) {}

  /** `noFollow`: a symbolic link in the file's place is not followed (ELOOP). */
  static open (file: string, { noFollow = false } = {}): ChunkFile {
    native()
    const flags = constants.O_RDONLY | (noFollow ? constants.O_NOFOLLOW : 0)
    try {
      return new ChunkFile(openSync(file, flags | constants.O_DIRECT), true)
    } catch (err) {
      // tmpfs and some FUSE filesystems refuse O_DIRECT: read buffered, then drop the pages.
      if ((err as NodeJS.ErrnoException).code !== 'EINVAL') throw err
      return new ChunkFile(openSync(file, flags), false)
    }
  }

  /** The open file's attributes. */
  stat (): BigIntStats { return fstatSync(this.fd, { bigint: true }) }

  async read (offset: number, length: number): Promise<Buffer> {
    return await native().readAligned(this.fd, offset, length, this.direct)
  }

  /**
   * Reads [offset, offset + length) and returns its CRC-32, and copies the
   * pieces (each a start relative to offset, and a size) into `targets`,
   * one each, done on the thread pool: the chunk's buffer never reaches JS.
   */
  async readPieces (offset: number, length: number, pieces: ReadonlyArray<{ start: number, size: number }>, targets: Buffer[]): Promise<ChunkRead> {
    return await native().readChunk(this.fd, offset, length, this.direct, Float64Array.from(pieces.flatMap(p => [p.start, p.size])), targets)
  }

  close (): void { closeSync(this.fd) }
}
