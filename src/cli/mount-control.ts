/**
 * How the CLI talks to a mount: through the mount itself, after proving it
 * is one. A path is a redirfs mount when the kernel's mount table says so
 * for it, and the control file opened there lives on that very mount
 * (same device). Nothing is read from a file a user could plant, and no
 * process is named by one: `reset` opens the mount's own reset file, whose
 * owner and mode the kernel enforces.
 *
 * Any user may make a FUSE mount that calls itself redirfs, so the table's
 * name is not enough: the mount must also be the caller's own or root's,
 * by the owner the table gives it (`user_id=`), which fusermount sets to
 * the real uid of whoever mounts and only root can set otherwise. What such
 * a mount answers is what its owner's process says, and that is checked
 * too: the JSON this version writes, within a few seconds, else one line.
 *
 * A mount whose daemon died says so, and why when it can be told: the
 * runtime record names the daemon and the memory cgroup it ran under, so a
 * kill by the kernel's OOM killer is told apart from other deaths.
 */
import { spawn } from 'node:child_process'
import { appendFileSync } from 'node:fs'
import path from 'node:path'
import { codeOf, UsageError } from '../errors'
import { limitNow, oomKillsSince } from '../daemon/memory-limit'
import { daemonRuns, readRecord, type MountRecordFile } from '../daemon/registry'
import { formatSize } from '../util/size'
import { fuseOwnerOf, isRedirfsMount, mountAt, type MountRecord } from '../util/mounts'

/** How long a control file may take to answer; a daemon answers at once, from memory. */
const ANSWER_MS = 5000

/** Why a mount's daemon is gone, as one sentence; written to its log too, once. */
export function deathOf (mountpoint: string, record: MountRecordFile | undefined): string {
  if (record === undefined) return `the daemon of ${mountpoint} is gone (no record of it is left); run: redirfs umount --force ${mountpoint}`
  const kills = record.memoryLimit !== undefined ? oomKillsSince(record.memoryLimit) : 0
  const oom = kills > 0
  const why = oom
    ? `was probably killed by the kernel's OOM killer (${kills} kill${kills === 1 ? '' : 's'} in its memory cgroup ${record.memoryLimit!.cgroup}, limit ${formatSize(limitNow(record.memoryLimit!))}, since the mount); give the job more memory or the mount a smaller --memory`
    : 'died'
  const sentence = `the daemon of ${mountpoint} (pid ${record.pid}) ${why}${record.logFile !== undefined ? `; its log: ${record.logFile}` : ''}; run: redirfs umount --force ${mountpoint}`
  if (record.logFile !== undefined) {
    try { appendFileSync(record.logFile, JSON.stringify({ level: 50, time: Date.now(), msg: sentence, oomKilled: oom }) + '\n') } catch {}
  }
  return sentence
}

/**
 * The mount at `mountpoint` when it is a redirfs mount of the caller's or
 * root's; otherwise a one-line error that says what it is.
 */
export async function redirfsMountAt (mountpoint: string): Promise<MountRecord> {
  const mount = await mountAt(mountpoint)
  if (mount === undefined || !isRedirfsMount(mount)) {
    const record = await readRecord(mountpoint)
    if (record !== undefined && !daemonRuns(record) && mount === undefined) throw new UsageError(deathOf(mountpoint, record))
    throw new UsageError(`${mountpoint} is not a redirfs mount${mount !== undefined ? ` (${mount.source}, ${mount.type})` : ''}`)
  }
  const owner = fuseOwnerOf(mount)
  const me = process.getuid?.() ?? 0
  if (owner !== me && owner !== 0) {
    throw new UsageError(`${mountpoint} is a FUSE mount of uid ${owner ?? 'unknown'}: redirfs trusts only your own mounts and root's (run this as uid ${owner ?? 'unknown'})`)
  }
  return mount
}

/**
 * Reads `<mnt>/.redirfs/<name>` of a proven redirfs mount, as JSON; a
 * one-line error when what comes back is not a JSON object with `keys`.
 * The reset file resets only when opened non-blocking (src/fs/adapter.ts).
 */
export async function readControlFile (mountpoint: string, name: 'stats' | 'reset', keys: Readonly<Record<string, 'number' | 'string' | 'object'>>): Promise<Record<string, unknown>> {
  return parseControl(mountpoint, name, await readControlText(mountpoint, name), keys)
}

/** What a control file's text holds: a JSON object with `keys` of their types; a one-line error for anything else (fuzz/stats.fuzz.ts sends it anything). */
export function parseControl (mountpoint: string, name: 'stats' | 'reset', text: string, keys: Readonly<Record<string, 'number' | 'string' | 'object'>>): Record<string, unknown> {
  let parsed: unknown
  try { parsed = JSON.parse(text) } catch {}
  const object = typeof parsed === 'object' && parsed !== null ? parsed as Record<string, unknown> : undefined
  const typeOf = (value: unknown): string => value === null ? 'null' : typeof value
  const wrong = Object.keys(keys).filter(key => typeOf(object?.[key]) !== keys[key])
  if (wrong.length > 0) throw unreadable(mountpoint, name, parsed === undefined ? 'not JSON' : `no ${wrong.join(', ')}`)
  return object!
}

/** What a mount answered that this version cannot read, as one line. */
export function unreadable (mountpoint: string, name: string, why: string): UsageError {
  return new UsageError(`${mountpoint} answered ${name} that redirfs cannot read (${why}); is its daemon another version? remount it`)
}

/**
 * Reads a control file in a child process: a FUSE request the mount has
 * taken cannot be abandoned (the process that made it waits for the
 * answer even once killed), so the CLI gives up on a child after
 * `ANSWER_MS`, not on itself, and exits on time. The child ends when the
 * mount answers or goes. It opens the file without following a link and
 * reports the device the file is on, which must be the mount's.
 */
const READER = `
const fs = require('node:fs')
const [file, flags] = process.argv.slice(1)
try {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | (flags === 'nonblock' ? fs.constants.O_NONBLOCK : 0))
  const dev = fs.fstatSync(fd).dev
  process.stdout.write(JSON.stringify({ dev, text: fs.readFileSync(fd, 'utf8') }))
} catch (err) {
  process.stdout.write(JSON.stringify({ code: err.code, message: err.message }))
}
`

interface ReaderOutput { dev?: number, text?: string, code?: string, message?: string }

/** The text of `<mnt>/.redirfs/<name>` of a proven redirfs mount. */
export async function readControlText (mountpoint: string, name: 'stats' | 'reset'): Promise<string> {
  const mount = await redirfsMountAt(mountpoint)
  const child = spawn(process.execPath, ['-e', READER, path.join(mountpoint, '.redirfs', name), name === 'reset' ? 'nonblock' : ''], { stdio: ['ignore', 'pipe', 'ignore'], detached: true, env: {} })
  const output = await new Promise<string | undefined>((resolve, reject) => {
    let text = ''
    const timer = setTimeout(() => resolve(undefined), ANSWER_MS)
    child.stdout.setEncoding('utf8').on('data', (piece: string) => { text += piece })
    child.once('error', err => { clearTimeout(timer); reject(err) })
    child.once('close', () => { clearTimeout(timer); resolve(text) })
  })
  if (output === undefined) {
    child.stdout.destroy()
    child.kill('SIGKILL')
    child.unref()
    throw new UsageError(`${mountpoint} did not answer ${name} within ${ANSWER_MS / 1000} s: its daemon is stuck or overloaded; see its log, or unmount it (redirfs umount --force ${mountpoint})`)
  }
  let result: ReaderOutput = {}
  try { result = JSON.parse(output) as ReaderOutput } catch {}
  if (result.text === undefined) throw await controlError(mountpoint, name, Object.assign(new Error(result.message ?? 'no answer'), { code: result.code }))
  // The file must be on that mount: a path swapped meanwhile is refused.
  if (result.dev !== mount.device) throw new UsageError(`${mountpoint} is not a redirfs mount`)
  return result.text
}

async function controlError (mountpoint: string, name: string, err: unknown): Promise<UsageError> {
  if (err instanceof UsageError) return err
  const code = codeOf(err)
  if (code === 'ENOTCONN' || code === 'ECONNABORTED') return new UsageError(deathOf(mountpoint, await readRecord(mountpoint)))
  if (code === 'EACCES' || code === 'EPERM') {
    return new UsageError(name === 'reset'
      ? `only the user who mounted ${mountpoint}, or root, may reset it`
      : `you may not read the stats of ${mountpoint}`)
  }
  if (code === 'ENOENT') return new UsageError(`${mountpoint} is not a redirfs mount`)
  return new UsageError(`cannot read ${name} of ${mountpoint}: ${code ?? (err as Error).message}`)
}
