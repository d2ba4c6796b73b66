/**
 * Control files under `<mnt>/.redirfs/`. The directory answers lookups but
 * is not listed in the root: ImageFolder would take it for a class.
 */
export const CONTROL_DIR = '/.redirfs'
export const STATS_FILE = '/.redirfs/stats'

export function isControlPath (path: string): boolean {
  return path === CONTROL_DIR || path.startsWith(CONTROL_DIR + '/')
}
