/**
 * The fuse-native backend (libfuse 2, every operation a hop to the JS
 * thread): mounting and unmounting.
 *
 * - fuse-native has no option for direct_io or a zero attr_timeout and drops
 *   option values of 0, but passes the fsname through verbatim; so the
 *   options ride in the fsname (docs/design.md, "The FUSE layer").
 * - Its unmount shells out to `fusermount`, which Debian 12 does not always
 *   ship; as root, util-linux's `umount -l` does the same job.
 * - The unmount must never run synchronously from the daemon: the kernel
 *   would ask this very process (blocked) about the mount, and deadlock.
 */
import { execFile } from 'node:child_process'
import Fuse from 'fuse-native'
import type { MountedFilesystem, MountOptions } from './backend'

Fuse.unmount = (mountpoint: string, cb: (err: Error | null) => void) => {
  execFile('umount', ['-l', mountpoint], err => cb(err))
}

/** Time FUSE allows an operation; an open may wait for a chunk load on slow storage. */
const OPEN_TIMEOUT_MS = 120_000
const DEFAULT_TIMEOUT_MS = 15_000

export async function mountFilesystem (mountpoint: string, operations: Record<string, (...args: any[]) => void>, options: MountOptions): Promise<MountedFilesystem> {
  const fuse = new Fuse(mountpoint, operations, {
    // ro: the kernel itself answers EROFS (access(W_OK) too, which default_permissions would otherwise grant root).
    fsname: 'redirfs,ro,direct_io,attr_timeout=0' + (options.overSource ? ',nonempty' : ''),
    allowOther: options.allowOther,
    // The kernel checks every access against each entry's owner and mode (as the native backend does).
    defaultPermissions: true,
    timeout: { default: DEFAULT_TIMEOUT_MS, open: OPEN_TIMEOUT_MS } as unknown as number
  })
  await new Promise<void>((resolve, reject) => fuse.mount(err => (err ? reject(err) : resolve())))
  return {
    unmount: async () => await new Promise<void>((resolve, reject) => fuse.unmount(err => (err ? reject(err) : resolve())))
  }
}
