/**
 * `redirfs umount`: unmounts (refusing while files are open there, unless
 * forced) and stops the daemon. `--force` also recovers a mount whose
 * daemon died ("Transport endpoint is not connected").
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { isAlive, readRecord, removeRecord } from '../daemon/registry'
import { UsageError } from '../errors'
import { mountAt } from '../util/mounts'

const run = promisify(execFile)
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

async function waitForExit (pid: number, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await sleep(50)) {
    if (!isAlive(pid)) return true
  }
  return !isAlive(pid)
}

export async function unmount (mountpoint: string, force: boolean): Promise<void> {
  const mount = await mountAt(mountpoint)
  const record = await readRecord(mountpoint)
  if (mount === undefined) {
    if (record !== undefined && !isAlive(record.pid)) await removeRecord(mountpoint)
    throw new UsageError(`${mountpoint} is not mounted`)
  }
  if (mount.source !== 'redirfs') throw new UsageError(`${mountpoint} is not a redirfs mount (${mount.source}, ${mount.type})`)

  try {
    await run('umount', force ? ['-l', mountpoint] : [mountpoint])
  } catch (err) {
    const stderr = String((err as { stderr?: string }).stderr ?? '')
    if (/busy/i.test(stderr)) throw new UsageError(`${mountpoint} is busy: a process has a file open or its working directory there; close it, or use --force`)
    throw new UsageError(`cannot unmount ${mountpoint}: ${stderr.trim() || (err as Error).message}`)
  }

  if (record !== undefined && isAlive(record.pid)) {
    process.kill(record.pid, 'SIGTERM')
    if (!(await waitForExit(record.pid, force ? 2000 : 10_000))) {
      process.kill(record.pid, 'SIGKILL')
      await waitForExit(record.pid, 2000)
    }
  }
  await removeRecord(mountpoint)
}
