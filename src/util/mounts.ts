/** What the kernel's mount table says about a path (/proc/self/mountinfo). */
import { promises as fs } from 'node:fs'

export interface MountRecord {
  readonly source: string
  readonly target: string
  /** The filesystem type: `fuse.redirfs` for the native backend. */
  readonly type: string
  /** The device numbers of the mounted filesystem, as stat's st_dev gives them. */
  readonly device: number
  /** The superblock's options (for FUSE: user_id=, group_id=, allow_other, default_permissions). */
  readonly options: readonly string[]
}

// mountinfo escapes space, tab, newline and backslash as octal.
const unescape = (field: string): string => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)))

/** The kernel's encoding of major:minor into st_dev (new_encode_dev), which Node's stat gives. */
const encodeDevice = (major: number, minor: number): number => (minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)

export async function readMounts (): Promise<MountRecord[]> {
  const text = await fs.readFile('/proc/self/mountinfo', 'utf8')
  return text.split('\n').filter(Boolean).map(line => {
    // id parent major:minor root target options [optional fields] - type source super-options
    const fields = line.split(' ')
    const separator = fields.indexOf('-', 6)
    const [major, minor] = fields[2].split(':').map(Number)
    return {
      source: unescape(fields[separator + 2]),
      target: unescape(fields[4]),
      type: fields[separator + 1],
      device: encodeDevice(major, minor),
      options: (fields[separator + 3] ?? '').split(',')
    }
  })
}

/** The newest mount at `target`, if any. */
export async function mountAt (target: string): Promise<MountRecord | undefined> {
  return (await readMounts()).filter(m => m.target === target).pop()
}

/** A redirfs mount, as the mount table shows one: the native backend's type, or fuse-native's source. */
export function isRedirfsMount (mount: MountRecord | undefined): boolean {
  return mount !== undefined && mount.source === 'redirfs' && (mount.type === 'fuse.redirfs' || mount.type === 'fuse')
}

/** The uid that made a FUSE mount (its `user_id=` option), if the table says. */
export function fuseOwnerOf (mount: MountRecord): number | undefined {
  const option = mount.options.find(o => o.startsWith('user_id='))
  return option === undefined ? undefined : Number(option.slice('user_id='.length))
}
