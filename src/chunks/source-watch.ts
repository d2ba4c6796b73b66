/**
 * A chmod in the source holds through the mount at once, for the bytes
 * already in memory too (docs/design.md, "The source changing under a
 * mount"). Every read of the source is checked (source-check.ts), but a
 * sample read before the change would still be served from memory, and so
 * would a file the mount shows through a link after a directory on the
 * link's real path was closed, or a file given an ACL.
 *
 * Checking every served file's source at each open would cost a few
 * system calls per sample on the hot path (a round trip each on a network
 * filesystem). So the kernel says what changed instead: an inotify watch
 * on every directory of the tree, on the directories above the source, on
 * those a link leads through, and on each file with other hard links (a
 * chmod through another of its names says nothing to its directory).
 * Before each sample open is decided, the events pending are read, without
 * blocking, unless a read since the open arrived did (a change made before
 * the open reached the daemon is always among them), and each marks the
 * entry it names suspect. Every directory starts suspect: a change between
 * the scan and the watches raised none. An open whose file, or whose
 * answer's file, or a directory above either, is suspect waits for that entry to be checked
 * against the source again (its identity, owner, mode, ACL and, for a
 * link, the directories on its real path); an entry that fails is refused
 * for the rest of the mount (a widening waits for a remount), and an open
 * of it, or redirected to it, is not served from it. An open of entries
 * that nothing marked costs at most one read(2) of the event queue and a
 * few array lookups; a load stats only the directories not vouched for
 * (`unchangedDirectories`).
 *
 * Where inotify cannot see every change (a network filesystem, where
 * another client's chmod raises no event here; a directory past the
 * watch limit; a queue that overflowed until each entry is checked
 * again), an entry's check holds for a second only: those opens are
 * checked at most once a second per entry.
 */
import { closeSync, promises as fs } from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import { codeOf } from '../errors'
import { native } from './native'
import type { Refusal, SourceCheck, UnchangedDirectories } from './source-check'
import type { DatasetTree } from './tree'

/** How long a check holds where the kernel cannot say what changed. */
const POLL_MS = 1000

const enum State { Clear = 0, Suspect = 1, Checking = 2, Refused = 3 }

/** inotify's event bits (linux/inotify.h). */
const IN_Q_OVERFLOW = 0x4000
const IN_IGNORED = 0x8000
/** Events after which a path may lead through another directory than the one watched: moved, created, deleted, or its watch gone. */
const RENAMED = 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | IN_IGNORED

/**
 * Filesystems whose changes made elsewhere raise no inotify event here
 * (statfs f_type): NFS, SMB/CIFS, FUSE, Ceph, Lustre, GPFS, 9p, AFS, OCFS2,
 * GFS2, BeeGFS.
 */
const REMOTE_FILESYSTEMS = new Set([0x6969, 0xfe534d42, 0xff534d42, 0x517b, 0x65735546, 0x00c36400, 0x0bd00bd0, 0x47504653, 0x01021997, 0x5346414f, 0x6b414653, 0x7461636f, 0x01161970, 0x19830326])

/**
 * What a watch descriptor stands for: a directory of the tree; one above
 * the source (and the name on the way down); one on links' way (the names
 * on their way down, or every name for one that holds a link's target).
 */
type Role =
  | { readonly kind: 'directory', readonly entry: number }
  | { readonly kind: 'above', readonly next: Buffer }
  | { readonly kind: 'links', readonly next: ReadonlySet<string> | 'any' }
  | { readonly kind: 'file', readonly entry: number }

export interface SourceWatchStats {
  /** Directories watched, and those checked once a second instead (past the watch limit, or on a network filesystem). */
  watchedDirectories: number
  polledDirectories: number
  /** Change events read, entries checked again at an open, and entries refused since (each once). */
  changeEvents: number
  checksAtOpen: number
  refusedAtOpen: number
}

export class SourceWatch {
  private readonly state: Uint8Array
  private readonly refusals = new Map<number, Refusal>()
  /** The check of an entry running now; one begun before its entry was marked again is not reused (`checked`). */
  private readonly checking = new Map<number, { readonly promise: Promise<Refusal | undefined>, readonly generation: number }>()
  private readonly roles = new Map<number, Role[]>()
  /** Entries whose check holds for POLL_MS only (undefined: none), and when each was last checked. */
  private polled?: { readonly directories: Uint8Array, readonly checkedAt: Float64Array }
  private readonly linked: Uint8Array
  /**
   * A change on links' way may concern any link: rather than mark each, it
   * moves the links' generation on, and a link entry is clear only when it
   * was checked in the current one.
   */
  private linksGeneration = 1
  private readonly linkChecked: Uint32Array
  private readonly counters = { changeEvents: 0, checksAtOpen: 0, refusedAtOpen: 0 }
  private watched = 0
  /** Watches refused for the inotify limit (ENOSPC). */
  private pastLimit = 0
  private linksPolled = false
  /** Reads of the event queue so far: a request that arrived before the last one began needs no read of its own. */
  private drains = 0

  private constructor (private readonly fd: number | undefined, private readonly tree: DatasetTree, private readonly check: SourceCheck, private readonly log: Logger) {
    this.state = new Uint8Array(tree.count)
    this.linked = new Uint8Array(tree.count)
    for (const entry of tree.links?.entries ?? []) this.linked[entry] = 1
    this.linkChecked = new Uint32Array(tree.links !== undefined && tree.links.entries.length > 0 ? tree.count : 0)
  }

  /**
   * Watches the tree's directories, those above the source (`realSource`)
   * and those its links lead through. Never fails a mount: what cannot be
   * watched is checked once a second instead.
   */
  static async start (tree: DatasetTree, check: SourceCheck, realSource: string, log: Logger): Promise<SourceWatch> {
    const remote = REMOTE_FILESYSTEMS.has(Number((await fs.statfs(realSource)).type))
    let fd: number | undefined
    if (!remote) {
      try { fd = native().watchOpen() } catch (err) { log.warn({ err: (err as Error).message }, 'cannot watch the source for changes; checking it once a second at opens instead') }
    }
    const watch = new SourceWatch(fd, tree, check, log)
    const unwatched: number[] = []
    // Entries on another filesystem (mounted below the source, or reached through a link) that is remote are checked once a second.
    const blind = fd === undefined ? [] : await remoteDirectories(tree, check)
    for (const entry of blind) unwatched.push(entry)
    // Above the source or on a link's way, a network filesystem says nothing of changes made from elsewhere either.
    if (fd !== undefined) {
      const parts = realSource.split('/').filter(Boolean)
      if (await anyRemote(parts.map((_, i) => '/' + parts.slice(0, i).join('/')))) unwatched.push(0)
      if (await anyRemote(tree.links?.directories ?? [])) unwatched.push(...linkDirectories(tree))
    }
    for (let entry = 0; entry < tree.count; entry++) {
      if (!tree.isDirectory(entry)) continue
      if (fd === undefined || !watch.add(check.pathOf(entry), { kind: 'directory', entry })) unwatched.push(entry)
    }
    // A file with other hard links is changed through them without a word to its directory's watch: its own watch hears it.
    if (fd !== undefined) {
      for (let entry = 0; entry < tree.count; entry++) {
        if (!tree.isDirectory(entry) && tree.columns.nlink[entry] > 1 && !watch.add(check.pathOf(entry), { kind: 'file', entry })) unwatched.push(tree.columns.parent[entry])
      }
    }
    if (fd !== undefined) {
      // What cannot be watched above the source or on a link's way is checked once a second through the entries it narrows.
      const parts = realSource.split('/').filter(Boolean)
      const above = parts.map((_, i) => watch.add('/' + parts.slice(0, i).join('/'), { kind: 'above', next: Buffer.from(parts[i]) }))
      if (above.includes(false)) unwatched.push(0)
      const directories = tree.links?.directories ?? []
      const below = new Map<string, Set<string>>()
      for (const dir of directories) if (dir !== '/') below.set(path.dirname(dir), (below.get(path.dirname(dir)) ?? new Set()).add(path.basename(dir)))
      const onLinks = directories.map(dir => watch.add(dir, { kind: 'links', next: tree.links!.holding.has(dir) ? 'any' : below.get(dir) ?? new Set() }))
      if (onLinks.includes(false)) unwatched.push(...linkDirectories(tree))
    }
    // What changed between the scan and these watches raised no event: each directory is checked once, at the first open or load under it.
    for (let entry = 0; entry < tree.count; entry++) if (tree.isDirectory(entry)) watch.suspect(entry)
    if (unwatched.length > 0) watch.poll(unwatched)
    if (blind.length > 0) log.warn({ directories: blind.length }, 'directories of the source on a network filesystem: changes made there from elsewhere are noticed within a second of an open instead of at once')
    if (watch.pastLimit > 0) {
      log.warn({ watches: watch.pastLimit }, 'past the inotify watch limit (fs.inotify.max_user_watches): changes in these directories are noticed within a second of an open instead of at once')
    }
    return watch
  }

  /** Adds a watch; false when it cannot be had (ENOSPC: past the limit). */
  private add (dir: string, role: Role): boolean {
    const wd = native().watchAdd(this.fd!, dir, role.kind !== 'file')
    if (typeof wd !== 'number') {
      if (codeOf(wd) === 'ENOSPC') this.pastLimit++
      else this.log.warn({ dir, err: wd.message }, 'cannot watch a directory of the source')
      return false
    }
    // A directory watched twice (a link into the source) is one descriptor with both roles.
    const roles = this.roles.get(wd) ?? []
    roles.push(role)
    this.roles.set(wd, roles)
    if (role.kind === 'directory') this.watched++
    return true
  }

  /** Puts every link entry's check on polling, once. */
  private pollLinks (): void {
    if (this.linksPolled) return
    this.linksPolled = true
    this.poll(linkDirectories(this.tree))
  }

  /** Directories whose entries' checks hold for a second only. */
  private poll (directories: readonly number[]): void {
    this.polled ??= { directories: new Uint8Array(this.tree.count), checkedAt: new Float64Array(this.tree.count).fill(-Infinity) }
    for (const dir of directories) this.polled.directories[dir] = 1
  }

  /** Reads the changes pending now and marks what they name suspect. */
  drain (): void {
    this.drains++
    if (this.fd === undefined) return
    const events = native().watchRead(this.fd)
    if (events === undefined) return
    const { wds, masks, names } = events
    for (let i = 0; i < wds.length; i++) {
      this.counters.changeEvents++
      if ((masks[i] & IN_Q_OVERFLOW) !== 0) {
        this.log.warn('the source changed faster than its events could be kept: every entry is checked again at its next open')
        for (let entry = 0; entry < this.tree.count; entry++) this.suspect(entry)
        this.linksGeneration++
        continue
      }
      for (const role of this.roles.get(wds[i]) ?? []) this.apply(role, masks[i], names[i])
    }
  }

  /** A mark for a request (an open) that has just arrived, for `drainSince`. */
  arrival (): number {
    return this.drains
  }

  /**
   * Before deciding a request that arrived at `arrival`: reads the changes
   * pending, unless a read since it arrived did. Any read after a request
   * arrived has every change made before it (the kernel queues an event as
   * the change is made), so the opens of one batch cost one read between
   * them.
   */
  drainSince (arrival: number): void {
    if (this.drains === arrival) this.drain()
  }

  private apply (role: Role, mask: number, name: Buffer): void {
    if (role.kind === 'links') {
      if (name.length === 0 || role.next === 'any' || role.next.has(name.toString())) {
        this.linksGeneration++
        // A directory on a link's way moved or made anew: its real path may now lead through directories no watch
        // hears, and its checks hold for a second from now. (A name replaced where a target lies is a new identity,
        // which the check refuses.)
        if ((mask & RENAMED) !== 0 && (role.next !== 'any' || name.length === 0)) this.pollLinks()
      }
    } else if (role.kind === 'file') {
      this.suspect(role.entry)
      if ((mask & IN_IGNORED) !== 0) this.poll([this.tree.columns.parent[role.entry]])
    } else if (role.kind === 'above') {
      if (name.length === 0 || name.equals(role.next)) {
        this.suspect(0)
        // The source's path may now lead through a directory no watch hears (moved away, made anew): its check holds for a second from now.
        if ((mask & RENAMED) !== 0) this.poll([0])
      }
    } else if (name.length === 0) {
      this.suspect(role.entry)
      // Its watch is gone (the directory moved, deleted, or its filesystem unmounted): check it once a second from now.
      if ((mask & IN_IGNORED) !== 0) this.poll([role.entry])
    } else {
      const child = this.tree.child(role.entry, name)
      if (child >= 0) this.suspect(child)
    }
  }

  private suspect (entry: number): void {
    if (this.state[entry] !== State.Refused) this.state[entry] = State.Suspect
  }

  /** Whether nothing on the way to `entry` needs checking: the open may go on at once. */
  isClear (entry: number): boolean {
    const { parent } = this.tree.columns
    const now = this.polled === undefined ? 0 : Date.now()
    for (let e = entry; ; e = parent[e]) {
      if (this.state[e] !== State.Clear || this.linkIsStale(e) || (this.polled !== undefined && this.isStale(e, now))) return false
      if (e === 0) return true
    }
  }

  /**
   * For a load, after the changes pending are read: the directories the
   * kernel vouches for, each with every directory above it watched and
   * unchanged since it was last found as the scan saw it, so the load need
   * not stat them again. None where any directory is checked once a second
   * instead (that check holds for a second, and a load's for none).
   */
  unchangedDirectories (): UnchangedDirectories {
    if (this.fd === undefined) return () => false
    this.drain()
    const { parent } = this.tree.columns
    return directory => {
      for (let d = directory; ; d = parent[d]) {
        if (this.state[d] !== State.Clear || this.linkIsStale(d) || this.polled?.directories[d] === 1) return false
        if (d === 0) return true
      }
    }
  }

  private linkIsStale (entry: number): boolean {
    return this.linked[entry] === 1 && this.linkChecked[entry] !== this.linksGeneration
  }

  private isStale (entry: number, now: number): boolean {
    const polled = this.polled!
    const directory = this.tree.isDirectory(entry) ? entry : this.tree.columns.parent[entry]
    return polled.directories[directory] === 1 && now - polled.checkedAt[entry] >= POLL_MS
  }

  /**
   * Why `entry` may not be served now, or undefined: every directory on its
   * way, from the root down, and then the entry itself, checked again where
   * marked (or stale).
   */
  async refusal (entry: number): Promise<Refusal | undefined> {
    const way: number[] = []
    for (let e = entry; ; e = this.tree.columns.parent[e]) {
      way.unshift(e)
      if (e === 0) break
    }
    for (const e of way) {
      const refused = await this.checked(e)
      if (refused !== undefined) return refused
    }
    return undefined
  }

  private async checked (entry: number): Promise<Refusal | undefined> {
    if (this.state[entry] === State.Refused) return this.refusals.get(entry)
    const now = Date.now()
    if (this.state[entry] === State.Clear && !this.linkIsStale(entry) && (this.polled === undefined || !this.isStale(entry, now))) return undefined
    let running = this.checking.get(entry)
    // A check running since before the entry was marked again may have looked before the change: this open needs a new one.
    if (running === undefined || this.state[entry] === State.Suspect || (this.linked[entry] === 1 && running.generation !== this.linksGeneration)) {
      this.state[entry] = State.Checking
      const generation = this.linksGeneration
      this.counters.checksAtOpen++
      const check: { promise: Promise<Refusal | undefined>, readonly generation: number } = { promise: Promise.resolve(undefined), generation }
      check.promise = this.check.entryRefusal(entry, { linked: this.linked[entry] === 1 }).then(refusal => {
        if (refusal !== undefined) {
          if (this.state[entry] === State.Refused) return this.refusals.get(entry)
          this.state[entry] = State.Refused
          this.refusals.set(entry, refusal)
          this.counters.refusedAtOpen++
          this.log.error({ path: this.tree.pathOf(entry), err: `${refusal.why}; remount to serve it` }, 'refused at open: changed in the source since the mount')
        } else if (this.state[entry] === State.Checking && this.checking.get(entry) === check) {
          // A change that came in while it was checked leaves it suspect (or its link's generation behind), as a newer check does.
          this.state[entry] = State.Clear
          if (this.linked[entry] === 1) this.linkChecked[entry] = generation
          if (this.polled !== undefined) this.polled.checkedAt[entry] = now
        }
        return refusal
      }).finally(() => { if (this.checking.get(entry) === check) this.checking.delete(entry) })
      this.checking.set(entry, check)
      running = check
    }
    return await running.promise
  }

  stats (): SourceWatchStats {
    const polledDirectories = this.polled?.directories.reduce((sum, bit) => sum + bit, 0) ?? 0
    return { watchedDirectories: this.watched, polledDirectories, ...this.counters }
  }

  close (): void {
    if (this.fd !== undefined) closeSync(this.fd)
  }
}

/**
 * The directories whose entries lie on a network filesystem other than
 * the source's own (one mounted below it, or reached through a link): a
 * change made there from another host raises no event here. One
 * statfs(2) per device.
 */
async function remoteDirectories (tree: DatasetTree, check: SourceCheck): Promise<number[]> {
  const { dev, parent } = tree.columns
  const remoteDevices = new Map<number, boolean>([[dev[0], false]])
  const remote: number[] = []
  for (let entry = 0; entry < tree.count; entry++) {
    let isRemote = remoteDevices.get(dev[entry])
    if (isRemote === undefined) {
      isRemote = await onNetworkFilesystem(check.pathOf(entry))
      remoteDevices.set(dev[entry], isRemote)
    }
    // A file on another device (a link to one) is checked through its directory's polling.
    if (isRemote) remote.push(tree.isDirectory(entry) ? entry : parent[entry])
  }
  return remote
}

/** Whether any of these directories is on a network filesystem (or cannot be asked). */
async function anyRemote (directories: readonly string[]): Promise<boolean> {
  for (const directory of directories) if (await onNetworkFilesystem(directory)) return true
  return false
}

/** One that cannot be asked is taken for remote: a check a second costs little, a missed change much. */
async function onNetworkFilesystem (where: string): Promise<boolean> {
  const type = await fs.statfs(where).then(stat => Number(stat.type), () => undefined)
  return type === undefined || REMOTE_FILESYSTEMS.has(type)
}

/** The directories whose polling covers the link entries: each directory link, and each file link's directory. */
function linkDirectories (tree: DatasetTree): number[] {
  return Array.from(tree.links?.entries ?? [], entry => tree.isDirectory(entry) ? entry : tree.columns.parent[entry])
}
