/**
 * `redirfs umount`: unmounts (refusing while files are open there, unless
 * forced) and stops the daemon. `--force` also recovers a mount whose
 * daemon died ("Transport endpoint is not connected").
 *
 * The daemon is signalled only when the runtime record, in this user's own
 * runtime directory, names a process that is still that daemon (pid and
 * start time, running `redirfs daemon` for this mountpoint).
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { daemonRuns, readRecord, removeRecord, type MountRecordFile } from '../daemon/registry'
import { UsageError } from '../errors'
import { isRunning } from '../runs/processes'
import { isRedirfsMount, mountAt } from '../util/mounts'
import { deathOf } from './mount-control'

const run = promisify(execFile)
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

/** Waits for the record's process to be gone (an exiting process loses its command line before it is gone). */
async function waitForExit (record: MountRecordFile, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await sleep(50)) {
    if (!isRunning(record.pid, record.startTime)) return true
  }
  return !isRunning(record.pid, record.startTime)
}

/** Unmounts; gives a sentence on how the daemon ended when it had died before (else undefined). */
export async function unmount (mountpoint: string, force: boolean): Promise<string | undefined> {
  const mount = await mountAt(mountpoint)
  const record = await readRecord(mountpoint)
  if (mount === undefined) {
    if (record !== undefined && !daemonRuns(record)) await removeRecord(mountpoint)
    throw new UsageError(`${mountpoint} is not mounted`)
  }
  if (!isRedirfsMount(mount)) throw new UsageError(`${mountpoint} is not a redirfs mount (${mount.source}, ${mount.type})`)
  const died = record !== undefined && !daemonRuns(record) ? deathOf(mountpoint, record) : undefined

  try {
    await run('umount', force ? ['-l', mountpoint] : [mountpoint])
  } catch (err) {
    const stderr = String((err as { stderr?: string }).stderr ?? '')
    if (/busy/i.test(stderr)) throw new UsageError(`${mountpoint} is busy: a process has a file open or its working directory there; close it, or use --force`)
    if (/not connected/i.test(stderr) || died !== undefined) throw new UsageError(`${died ?? `the daemon of ${mountpoint} is gone`} (umount: ${stderr.trim().split('\n')[0]})`)
    throw new UsageError(`cannot unmount ${mountpoint}: ${stderr.trim() || (err as Error).message}`)
  }

  if (record !== undefined && daemonRuns(record)) {
    process.kill(record.pid, 'SIGTERM')
    if (!(await waitForExit(record, force ? 2000 : 10_000))) {
      process.kill(record.pid, 'SIGKILL')
      await waitForExit(record, 2000)
    }
  } else if (record !== undefined && isRunning(record.pid, record.startTime)) {
    // The daemon saw the unmount and is exiting by itself (its command line already gone): it is done once it has exited.
    await waitForExit(record, force ? 2000 : 10_000)
  }
  await removeRecord(mountpoint)
  return died
}
