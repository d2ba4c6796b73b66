/**
 * Pauses at chosen points, for the tests of what a stalled node does
 * (docs/development.md): REDIRFS_PAUSE_AT names points (comma-separated)
 * where the daemon stops itself with SIGSTOP the first time it gets there,
 * as a pause that happened to strike at that moment would. A test resumes
 * it with SIGCONT. Unset, as in any real mount, a point costs one lookup.
 */
const points = new Set((process.env.REDIRFS_PAUSE_AT ?? '').split(',').filter(point => point !== ''))

export type PausePoint =
  /** A successor learned a death and is about to ask the survivors what they received of the dead node's VCs. */
  | 'takeover-asks'
  /** Every survivor reported; the successor is about to adopt the VCs. */
  | 'takeover-adopts'
  /** The successor adopted the VCs and is about to wake the opens that wait on them. */
  | 'takeover-wakes'

export function pausePoint (point: PausePoint): void {
  if (points.size === 0 || !points.delete(point)) return
  process.kill(process.pid, 'SIGSTOP')
}
