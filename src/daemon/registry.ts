/**
 * A record per running mount, in a runtime directory only its user can
 * write, so `redirfs umount` can find the daemon even when the mount no
 * longer answers (a killed daemon leaves "Transport endpoint is not
 * connected" behind), and say why it died when that is known.
 *
 * The directory is root's `/run/redirfs`, or the user's own: under
 * `$XDG_RUNTIME_DIR`, else `redirfs-<uid>` in the temporary directory
 * (made 0700). It is used only when it is a real directory (not a link),
 * owned by the user, that nobody else can write; its files are created with O_EXCL and
 * opened with O_NOFOLLOW, so nobody can plant a link that makes the
 * daemon write elsewhere.
 *
 * A record names its daemon by pid *and* start time: a command acts on that
 * process only while it is the same process, running redirfs's daemon.
 */
import { createHash, randomBytes } from 'node:crypto'
import { constants, promises as fs, readFileSync, readlinkSync, writeSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { UsageError, codeOf, describeSystemError } from '../errors'
import { isRunning, startTimeOf } from '../runs/processes'
import type { MemoryLimit } from './memory-limit'

export interface MountRecordFile {
  pid: number
  /** The daemon's start time (clock ticks after boot, /proc/<pid>/stat): with the pid, it names that process only. */
  startTime: number
  uid: number
  mountpoint: string
  source: string
  logFile?: string
  startedAt: string
  /** The memory limit the daemon runs under, and its OOM-kill count at mount, to tell later whether the kernel killed it. */
  memoryLimit?: MemoryLimit
}

const uid = (): number => process.getuid?.() ?? 0

/** The runtime directory's path (not yet checked; see `runtimeDirectory`). */
export function registryDir (): string {
  if (process.env.REDIRFS_RUNTIME_DIR !== undefined && process.env.REDIRFS_RUNTIME_DIR !== '') return process.env.REDIRFS_RUNTIME_DIR
  if (uid() === 0) return '/run/redirfs'
  const xdg = process.env.XDG_RUNTIME_DIR
  return xdg !== undefined && xdg !== '' ? path.join(xdg, 'redirfs') : path.join(os.tmpdir(), `redirfs-${uid()}`)
}

/** The runtime directory, made if missing, and checked to be this user's alone. */
export async function runtimeDirectory (): Promise<string> {
  const dir = registryDir()
  await fs.mkdir(dir, { recursive: true, mode: 0o700 }).catch((err: unknown) => {
    if (codeOf(err) !== 'EEXIST') throw new UsageError(`cannot create the runtime directory ${dir}: ${codeOf(err) ?? (err as Error).message}; set REDIRFS_RUNTIME_DIR to a directory of yours`)
  })
  const stat = await fs.lstat(dir)
  const problem = !stat.isDirectory()
    ? 'is not a directory (a link?)'
    : stat.uid !== uid()
      ? `belongs to uid ${stat.uid}, not to you (uid ${uid()})`
      : (stat.mode & 0o022) !== 0 ? `can be written by other users (mode ${(stat.mode & 0o777).toString(8)})` : undefined
  if (problem !== undefined) throw new UsageError(`the runtime directory ${dir} ${problem}: someone else may have made it; remove it, or set REDIRFS_RUNTIME_DIR to a directory only you can write`)
  return dir
}

/** Runtime files of a mount are named after a hash of its mountpoint. */
function runtimeName (mountpoint: string, extension: string): string {
  return createHash('sha1').update(mountpoint).digest('hex').slice(0, 16) + extension
}

/** A log of the runtime directory is kept this long after its last line, unless its mount is live. */
const LOG_KEPT_MS = 7 * 24 * 3600 * 1000
/** A mount's log longer than this at mount is moved to `<name>.log.old` (replacing the one before), so it never grows without end. */
const LOG_ROTATED_BYTES = 16 * 1024 * 1024

/**
 * Where a background daemon logs unless told otherwise (the directory is
 * checked). Logs are per mountpoint and outlive their mount, for a look
 * after the fact; those of mounts gone for a week are removed here.
 */
export async function defaultLogFile (mountpoint: string): Promise<string> {
  const dir = await runtimeDirectory()
  const file = path.join(dir, runtimeName(mountpoint, '.log'))
  await pruneLogs(dir)
  const stat = await fs.lstat(file).catch(() => undefined)
  if (stat?.isFile() === true && stat.size > LOG_ROTATED_BYTES) await fs.rename(file, `${file}.old`).catch(() => {})
  return file
}

async function pruneLogs (dir: string): Promise<void> {
  const names = await fs.readdir(dir).catch(() => [] as string[])
  const live = new Set(names.filter(name => name.endsWith('.json')).map(name => name.slice(0, -'.json'.length)))
  await Promise.all(names.filter(name => /\.log(\.old)?$/.test(name) && !live.has(name.replace(/\.log(\.old)?$/, ''))).map(async name => {
    const stat = await fs.lstat(path.join(dir, name)).catch(() => undefined)
    if (stat?.isFile() === true && Date.now() - stat.mtimeMs > LOG_KEPT_MS) await fs.rm(path.join(dir, name), { force: true })
  }))
}

/**
 * Opens a log for appending: a file of the runtime directory never through
 * a link (O_NOFOLLOW), created 0600; a path the user gave, as given. A
 * write of nothing tells a file that takes no writes (/proc/version,
 * /dev/full), which would otherwise end the daemon before it can say why.
 */
export async function openLog (file: string, inRuntimeDirectory: boolean): Promise<fs.FileHandle> {
  const flags = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | (inRuntimeDirectory ? constants.O_NOFOLLOW : 0)
  const handle = await fs.open(file, flags, 0o600).catch((err: unknown) => {
    throw new UsageError(`cannot open the log ${file}: ${codeOf(err) === 'ELOOP' ? 'it is a symbolic link' : describeSystemError(err)}`)
  })
  try {
    // Synchronous: the promise API skips a write of nothing.
    writeSync(handle.fd, Buffer.alloc(0))
  } catch (err) {
    await handle.close()
    throw new UsageError(`cannot write the log ${file}: ${describeSystemError(err)}`)
  }
  return handle
}

export async function writeRecord (record: Omit<MountRecordFile, 'uid' | 'startTime'>): Promise<void> {
  const dir = await runtimeDirectory()
  const target = path.join(dir, runtimeName(record.mountpoint, '.json'))
  const full: MountRecordFile = { ...record, uid: uid(), startTime: startTimeOf(record.pid) ?? 0 }
  // A fresh name, created exclusively: nothing planted in its place can be written through.
  const temporary = `${target}.${randomBytes(6).toString('hex')}.tmp`
  const handle = await fs.open(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  try {
    await handle.writeFile(JSON.stringify(full))
  } finally {
    await handle.close()
  }
  await fs.rename(temporary, target)
}

/** The record of the mount at `mountpoint`, if this user's runtime directory has a sound one. */
export async function readRecord (mountpoint: string): Promise<MountRecordFile | undefined> {
  let dir: string
  try { dir = await runtimeDirectory() } catch { return undefined }
  try {
    const handle = await fs.open(path.join(dir, runtimeName(mountpoint, '.json')), constants.O_RDONLY | constants.O_NOFOLLOW)
    try {
      const record = JSON.parse(await handle.readFile('utf8')) as MountRecordFile
      return typeof record.pid === 'number' && record.mountpoint === mountpoint ? record : undefined
    } finally {
      await handle.close()
    }
  } catch {
    return undefined
  }
}

export async function removeRecord (mountpoint: string): Promise<void> {
  await fs.rm(path.join(registryDir(), runtimeName(mountpoint, '.json')), { force: true })
}

/**
 * Whether the record's daemon still runs: the same process (pid and start
 * time, not a zombie), running redirfs's daemon for that mountpoint, or
 * `redirfs mount --foreground` (whose mountpoint may be given relative to
 * its working directory). A pid that was reused by any other process is not it.
 */
export function daemonRuns (record: MountRecordFile): boolean {
  if (record.startTime === 0 || !isRunning(record.pid, record.startTime)) return false
  try {
    const args = readFileSync(`/proc/${record.pid}/cmdline`, 'utf8').split('\0')
    let cwd = '/'
    try { cwd = readlinkSync(`/proc/${record.pid}/cwd`) } catch {}
    return (args.includes('daemon') || args.includes('mount')) && args.some(arg => arg !== '' && path.resolve(cwd, arg) === record.mountpoint)
  } catch {
    return false
  }
}
