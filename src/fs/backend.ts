/**
 * What either FUSE backend gives the daemon: the native server
 * (native-mount.ts) or fuse-native (fuse-native-mount.ts).
 */
export interface MountOptions {
  allowOther: boolean
  /** libfuse 2 refuses a non-empty mountpoint without this; an overmount is non-empty by definition. */
  overSource: boolean
}

export interface MountedFilesystem {
  unmount (): Promise<void>
  /** The native server's own counts of FUSE operations (absent on fuse-native). */
  counters?: () => Record<string, number>
  /** Called when the mount goes from outside (umount, fusermount -u): native backend. */
  onGone?: (listener: () => void) => void
}
