/**
 * Who may read what through the mount: never more than from the source.
 *
 * The kernel checks every access to the mount against the owner and mode
 * each entry shows (default_permissions), along the mount's own path. That
 * is the source's check for everything reached through the source's own
 * directories. It is not for what the source's path does not show:
 *
 * - the directories above the source itself (a dataset in `/home/alice`,
 *   mode 0700, mounted for everyone with --allow-other);
 * - the real directories a symbolic link leads through (`x.jpg ->
 *   /root/secret.jpg`: the file may be 0644, `/root` is 0700).
 *
 * So an entry reached through a link, and the mount's root, show their
 * mode with the permission bits of each class of users (owner, group,
 * others) cleared where some directory on the real path may not let that
 * class through. The rule is conservative: a class keeps its bits only if
 * every directory lets through every user it could hold; what the mode
 * bits cannot say (who is in which group, ACLs) never widens access, but
 * may narrow it. Root passes every check, as on the source.
 *
 * Links may lead anywhere a dataset may be (curated subsets are trees of
 * links into a master copy), but not into the system's own directories:
 * a link into `/etc` or `/root` is an entry the mount cannot serve, and
 * so is any directory the scan would reach below a link (a link to `/`
 * reaches `/etc`): the scan never walks a system tree (scan.ts).
 */
import path from 'node:path'

/** A directory on the way to an entry: its owner, group and mode. */
export interface DirectoryAccess { readonly uid: number, readonly gid: number, readonly mode: number }

const U = 0o100
const G = 0o010
const O = 0o001

/**
 * Whether each class of users of an entry owned by `uid`:`gid` surely may
 * pass directory `d` (search permission), whoever in that class they are.
 */
function classesPassing (d: DirectoryAccess, uid: number, gid: number): { owner: boolean, group: boolean, others: boolean } {
  const has = (...bits: number[]): boolean => bits.every(bit => (d.mode & bit) !== 0)
  // The owner is d's owner, or is judged as d's group or others (its groups are unknown here).
  const owner = uid === 0 || (d.uid === uid ? has(U) : has(G, O))
  // A member of the entry's group may be d's owner, and in d's group or not.
  const ownerClause = d.uid === 0 || d.uid === uid ? [] : [U]
  const group = has(...(d.gid === gid ? [G] : [G, O]), ...ownerClause)
  // Anyone else may be d's owner, or in d's group (unless that is the entry's own group, which they are not in).
  const others = has(O, ...(d.gid === gid ? [] : [G]), ...ownerClause)
  return { owner, group, others }
}

/**
 * The mode an entry shows: its own, less the permission bits of every class
 * that some directory of `through` may stop.
 */
export function reachableMode (mode: number, uid: number, gid: number, through: readonly DirectoryAccess[]): number {
  let shown = mode
  for (const d of through) {
    const pass = classesPassing(d, uid, gid)
    if (!pass.owner) shown &= ~0o700
    if (!pass.group) shown &= ~0o070
    if (!pass.others) shown &= ~0o007
  }
  return shown
}

/**
 * The directories a link must not lead into: the system's own, never a
 * dataset, where a planted link would show system files through the mount
 * or send the scan through a whole system tree.
 */
export const SYSTEM_DIRECTORIES = ['/bin', '/boot', '/dev', '/etc', '/lib', '/lib32', '/lib64', '/libx32', '/proc', '/root', '/run', '/sbin', '/snap', '/sys', '/usr',
  '/var/backups', '/var/cache', '/var/lib', '/var/log', '/var/mail', '/var/run', '/var/spool'] as const

const isWithin = (target: string, dir: string): boolean => target === dir || target.startsWith(dir === '/' ? '/' : dir + '/')

/**
 * Why a link whose real target is `target` may not be followed from a
 * source whose real path is `source`, or undefined. Inside the source is
 * always fine; so is a system directory the source itself lies in (a
 * dataset kept in /root by root).
 */
export function linkRefusal (target: string, source: string): string | undefined {
  if (isWithin(target, source)) return undefined
  const system = SYSTEM_DIRECTORIES.find(dir => isWithin(target, dir) && !isWithin(source, dir))
  if (system !== undefined) return `a symbolic link out of the source into ${system}, a system directory`
  return undefined
}

/** The directories from `/` down to `dir` itself (real paths), for `reachableMode`. */
export function directoriesDownTo (dir: string): string[] {
  const parts = path.resolve(dir).split('/').filter(Boolean)
  return ['/', ...parts.map((_, i) => '/' + parts.slice(0, i + 1).join('/'))]
}
