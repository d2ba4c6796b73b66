/**
 * `redirfs reset`: signals the daemon (SIGUSR1) and waits until its reset
 * counter shows the reset was done.
 */
import { UsageError } from '../errors'
import { readStats } from './stats-command'

export async function resetEpochs (mountpoint: string): Promise<void> {
  const before = await readStats(mountpoint)
  process.kill(before.pid, 'SIGUSR1')
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise(resolve => setTimeout(resolve, 20))) {
    if ((await readStats(mountpoint)).protocol.resets > before.protocol.resets) return
  }
  throw new UsageError(`the daemon of ${mountpoint} (pid ${before.pid}) did not confirm the reset`)
}
