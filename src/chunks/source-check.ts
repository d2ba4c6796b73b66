/**
 * A directory source under a live mount is a snapshot (docs/design.md,
 * "Permissions"): what the scan saw of a file and of each directory on its
 * way is what a read must still find there, or nothing is served.
 *
 * - The same file: its device and inode, so a file swapped for a link to
 *   somewhere the scan would have refused, or renamed over, is never read.
 * - Regular: a FIFO or device put in a file's place is refused, not opened
 *   into a hang.
 * - No less protected than the mount shows: the same owner and group, and
 *   every permission bit the mount shows still set. A chmod or chown in
 *   the source after the mount takes effect through the mount at once
 *   (the file or the directory becomes unreadable there); widening one
 *   does not, until a remount.
 * - For a sample, unmodified (short or different bytes would break
 *   exactly-once); a non-sample may change and is served as it is now.
 *
 * The directories above the source are checked the same way, through the
 * mode the mount's root shows (access.ts). What a link led through at the
 * scan is checked only by the identity of where it leads.
 */
import { constants, promises as fs, type BigIntStats } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import path from 'node:path'
import { FsError } from '../errors'
import { directoriesDownTo, linkRefusal, reachableMode, type DirectoryAccess } from './access'
import { Expected, native } from './native'
import type { DatasetTree } from './tree'

const PERMISSION_BITS = 0o777
/** Linux's O_PATH, which Node does not name. */
const O_PATH = 0o10000000

/** Why an entry is not served now, and the errno a direct open of it gets. */
export interface Refusal { readonly errno: 'EACCES' | 'EIO', readonly why: string }

/** Whether a directory, and every directory above it, is known unchanged since it was last found as the scan saw it. */
export type UnchangedDirectories = (directory: number) => boolean

export class SourceCheck {
  /** The root with one trailing slash: a file's path is a concatenation. */
  private readonly prefix: string

  /** `foldAcls`: with --allow-other, an entry with an ACL shows its owner's bits only (scan.ts). */
  constructor (root: string, private readonly tree: DatasetTree, private readonly realSource: string, private readonly foldAcls = false) {
    this.prefix = path.join(path.resolve(root), '/')
  }

  /** Where an entry is read from. */
  pathOf (entry: number): string { return this.prefix + this.tree.pathOf(entry) }

  /** What `readFiles` must find of each sample entry (native.ts, Expected). */
  expected (entries: readonly number[]): Float64Array {
    const c = this.tree.columns
    const expected = new Float64Array(entries.length * Expected.fields)
    entries.forEach((entry, i) => {
      expected.set([c.mtimeSec[entry], c.mtimeNsec[entry], c.dev[entry], c.ino[entry], c.mode[entry], c.uid[entry], c.gid[entry]], i * Expected.fields)
    })
    return expected
  }

  /** Why `stat`, found where entry `entry` was, is not what the mount may serve as it; undefined when it is. */
  refusal (entry: number, stat: BigIntStats, { modifiable }: { modifiable: boolean }): Refusal | undefined {
    const c = this.tree.columns
    if ((stat.mode & BigInt(constants.S_IFMT)) !== BigInt(c.mode[entry] & constants.S_IFMT)) return { errno: 'EIO', why: 'replaced in the source since the mount (another kind of file)' }
    if (Number(stat.dev) !== c.dev[entry] || Number(stat.ino) !== c.ino[entry]) return { errno: 'EIO', why: 'replaced in the source since the mount' }
    if (!modifiable && (Number(stat.mtimeNs / 1_000_000_000n) !== c.mtimeSec[entry] || Number(stat.mtimeNs % 1_000_000_000n) !== c.mtimeNsec[entry])) {
      return { errno: 'EIO', why: 'modified in the source since the mount' }
    }
    return this.narrowed(entry, Number(stat.mode), Number(stat.uid), Number(stat.gid))
  }

  /**
   * For the files `entries`, a function that says why one is not served
   * because a directory on its way changed since the scan (undefined when
   * none did). Each directory is stat'ed once per call, but for those
   * `unchanged` vouches for, with every directory above them (the kernel
   * said nothing about them since they were last found as the scan saw
   * them: source-watch.ts).
   */
  async directoriesRefusing (entries: readonly number[], unchanged: UnchangedDirectories = () => false): Promise<(entry: number) => Refusal | undefined> {
    const { parent } = this.tree.columns
    const directories = new Set<number>()
    const vouched = new Set<number>()
    for (const entry of entries) {
      for (let d = parent[entry]; !directories.has(d) && !vouched.has(d); d = parent[d]) {
        if (unchanged(d)) {
          vouched.add(d)
          break
        }
        directories.add(d)
        if (d === 0) break
      }
    }
    const refused = new Map<number, Refusal>()
    await Promise.all([...directories].map(async d => {
      const stat = await fs.stat(this.pathOf(d), { bigint: true }).catch(() => undefined)
      const refusal = stat === undefined
        ? { errno: 'EIO' as const, why: 'a directory on its way is gone from the source' }
        : d === 0 ? await this.rootRefusal(stat) : this.refusal(d, stat, { modifiable: true })
      if (refusal !== undefined) refused.set(d, { errno: refusal.errno, why: `${d === 0 ? 'the source directory' : `directory ${this.tree.pathOf(d)}`}: ${refusal.why}` })
    }))
    return entry => {
      if (refused.size === 0) return undefined
      for (let d = parent[entry]; ; d = parent[d]) {
        const refusal = refused.get(d)
        if (refusal !== undefined || d === 0) return refusal
      }
    }
  }

  /**
   * Why one entry may not be served now, or undefined (source-watch.ts,
   * when it changed): the scan's file, no less protected; with
   * --allow-other, no ACL where the mount shows bits beyond the owner's;
   * for a link (`linked`), still leading where a link may, through
   * directories that let through everyone it shows.
   */
  async entryRefusal (entry: number, { linked }: { linked: boolean }): Promise<Refusal | undefined> {
    const where = this.pathOf(entry)
    const name = entry === 0 ? 'the source directory' : this.tree.pathOf(entry)
    const stat = await fs.stat(where, { bigint: true }).catch(() => undefined)
    let refusal: Refusal | undefined = stat === undefined
      ? { errno: 'EIO', why: 'gone from the source since the mount' }
      : entry === 0 ? await this.rootRefusal(stat) : this.refusal(entry, stat, { modifiable: true })
    if (refusal === undefined && this.foldAcls && (this.tree.columns.mode[entry] & 0o077) !== 0 && native().hasAcl(where)) {
      refusal = { errno: 'EACCES', why: 'given an ACL in the source since the mount' }
    }
    if (refusal === undefined && linked && stat !== undefined) refusal = await this.realPathRefusal(entry, where, stat)
    return refusal === undefined ? undefined : { errno: refusal.errno, why: `${name}: ${refusal.why}` }
  }

  /** A link's real path: still one a link may take, through directories that let through every class the mount shows. */
  private async realPathRefusal (entry: number, where: string, stat: BigIntStats): Promise<Refusal | undefined> {
    const real = await fs.realpath(where).catch(() => undefined)
    if (real === undefined) return { errno: 'EIO', why: 'its link leads nowhere now' }
    const leads = linkRefusal(real, this.realSource)
    if (leads !== undefined) return { errno: 'EIO', why: `now ${leads}` }
    const inside = real.startsWith(this.realSource + '/')
    const through = await Promise.all(directoriesDownTo(path.dirname(real)).filter(dir => !inside || dir.startsWith(this.realSource + '/')).map(async dir => await this.directoryAccess(dir)))
    const reachable = reachableMode(Number(stat.mode), Number(stat.uid), Number(stat.gid), through)
    if ((this.tree.columns.mode[entry] & ~reachable & PERMISSION_BITS) !== 0) return { errno: 'EACCES', why: 'a directory on its link\'s real path was closed since the mount' }
    return undefined
  }

  /** Opens a non-sample file to serve it: the file the scan saw, regular, and no less protected; else an FsError. */
  async open (entry: number): Promise<FileHandle> {
    const refusing = await this.directoriesRefusing([entry])
    const onTheWay = refusing(entry)
    if (onTheWay !== undefined) throw new FsError(onTheWay.errno, onTheWay.why)
    // Looked at through an O_PATH open first, which has no effect on what it names (a device put in
    // the file's place is never really opened); the reading open goes through it, so what is read is
    // what was checked.
    const located = await fs.open(this.pathOf(entry), O_PATH)
    try {
      const refusal = this.refusal(entry, await located.stat({ bigint: true }), { modifiable: true })
      if (refusal !== undefined) throw new FsError(refusal.errno, `${this.tree.pathOf(entry)}: ${refusal.why}`)
      return await fs.open(`/proc/self/fd/${located.fd}`, constants.O_RDONLY | constants.O_NOCTTY)
    } finally {
      await located.close()
    }
  }

  /** The rule both the file and its directories keep: same owner and group, and every bit the mount shows still set. */
  private narrowed (entry: number, mode: number, uid: number, gid: number): Refusal | undefined {
    const c = this.tree.columns
    if (uid !== c.uid[entry] || gid !== c.gid[entry] || (c.mode[entry] & ~mode & PERMISSION_BITS) !== 0) return { errno: 'EACCES', why: 'owner or permissions changed in the source since the mount' }
    return undefined
  }

  /**
   * Who a directory lets through now: a gone one no one; with --allow-other,
   * one with an ACL its owner only (an ACL may shut out a user the mode
   * lets in, and the mount cannot ask for each user).
   */
  private async directoryAccess (dir: string): Promise<DirectoryAccess> {
    const on = await fs.stat(dir).catch(() => undefined)
    if (on === undefined) return { uid: 0, gid: 0, mode: 0 }
    return { uid: on.uid, gid: on.gid, mode: this.foldAcls && native().hasAcl(dir) ? on.mode & ~0o077 : on.mode }
  }

  /** The source directory itself: its mode as the directories above it let it through now (access.ts). */
  private async rootRefusal (stat: BigIntStats): Promise<Refusal | undefined> {
    const c = this.tree.columns
    if (Number(stat.dev) !== c.dev[0] || Number(stat.ino) !== c.ino[0]) return { errno: 'EIO', why: 'replaced since the mount' }
    const above = await Promise.all(directoriesDownTo(path.dirname(this.realSource)).map(async dir => await this.directoryAccess(dir)))
    return this.narrowed(0, reachableMode(Number(stat.mode), Number(stat.uid), Number(stat.gid), above), Number(stat.uid), Number(stat.gid))
  }
}
