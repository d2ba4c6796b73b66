/**
 * `redirfs reset`: starts a fresh epoch by opening the mount's own reset
 * file (src/fs/control.ts), which only the user who mounted and root may
 * open. A new training run does this by itself (src/runs); this is for
 * what the mount cannot see, such as a loader that stopped mid-epoch in a
 * process that goes on.
 */
import { readControlFile } from './mount-control'

export async function resetEpochs (mountpoint: string): Promise<{ resets: number, droppedFiles: number }> {
  return await readControlFile(mountpoint, 'reset', { resets: 'number', droppedFiles: 'number' }) as { resets: number, droppedFiles: number }
}
