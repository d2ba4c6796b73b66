/**
 * Control files under `<mnt>/.redirfs/`. The directory answers lookups but
 * is not listed in the root: ImageFolder would take it for a class.
 *
 * - `stats`: the mount's counters as JSON, readable by whoever may see the mount.
 * - `reset`: opening it starts a fresh epoch and reads back what was done. It
 *   belongs to the user who mounted, mode 0400, and the kernel checks that
 *   (default_permissions), so the mount is controlled through itself: no
 *   command ever signals a process named by a file someone else could write.
 */
export const CONTROL_DIR = '/.redirfs'
export const STATS_FILE = '/.redirfs/stats'
export const RESET_FILE = '/.redirfs/reset'

export function isControlPath (path: string): boolean {
  return path === CONTROL_DIR || path.startsWith(CONTROL_DIR + '/')
}
