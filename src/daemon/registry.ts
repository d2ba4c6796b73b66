/**
 * A record per running mount, so `redirfs umount` can find the daemon even
 * when the mount itself no longer answers (a killed daemon leaves
 * "Transport endpoint is not connected" behind).
 */
import { createHash } from 'node:crypto'
import { promises as fs } from 'node:fs'
import os from 'node:os'
import path from 'node:path'

export interface MountRecordFile {
  pid: number
  mountpoint: string
  source: string
  logFile?: string
  startedAt: string
}

export function registryDir (): string {
  return process.env.REDIRFS_RUNTIME_DIR ?? (process.getuid?.() === 0 ? '/run/redirfs' : path.join(os.tmpdir(), 'redirfs-run'))
}

/** Runtime files of a mount are named after a hash of its mountpoint. */
function runtimePath (mountpoint: string, extension: string): string {
  return path.join(registryDir(), createHash('sha1').update(mountpoint).digest('hex').slice(0, 16) + extension)
}

const recordPath = (mountpoint: string): string => runtimePath(mountpoint, '.json')

/** Where a background daemon logs unless told otherwise. */
export const defaultLogFile = (mountpoint: string): string => runtimePath(mountpoint, '.log')

export async function writeRecord (record: MountRecordFile): Promise<void> {
  await fs.mkdir(registryDir(), { recursive: true })
  const target = recordPath(record.mountpoint)
  await fs.writeFile(target + '.tmp', JSON.stringify(record))
  await fs.rename(target + '.tmp', target)
}

export async function readRecord (mountpoint: string): Promise<MountRecordFile | undefined> {
  try {
    return JSON.parse(await fs.readFile(recordPath(mountpoint), 'utf8')) as MountRecordFile
  } catch {
    return undefined
  }
}

export async function removeRecord (mountpoint: string): Promise<void> {
  await fs.rm(recordPath(mountpoint), { force: true })
}

export function isAlive (pid: number): boolean {
  try { process.kill(pid, 0); return true } catch { return false }
}
