/**
 * How the CLI talks to a mount: through the mount itself, after proving it
 * is one. A path is a redirfs mount when the kernel's mount table says so
 * for it, and the control file opened there lives on that very mount
 * (same device). Nothing is read from a file a user could plant, and no
 * process is named by one: `reset` opens the mount's own reset file, whose
 * owner and mode the kernel enforces.
 *
 * A mount whose daemon died says so, and why when it can be told: the
 * runtime record names the daemon and the memory cgroup it ran under, so a
 * kill by the kernel's OOM killer is told apart from other deaths.
 */
import { appendFileSync, constants, promises as fs } from 'node:fs'
import path from 'node:path'
import { codeOf, UsageError } from '../errors'
import { limitNow, oomKillsSince } from '../daemon/memory-limit'
import { daemonRuns, readRecord, type MountRecordFile } from '../daemon/registry'
import { formatSize } from '../util/size'
import { isRedirfsMount, mountAt, type MountRecord } from '../util/mounts'

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

/** The mount at `mountpoint` when it is a live redirfs mount; otherwise a one-line error that says what it is. */
export async function redirfsMountAt (mountpoint: string): Promise<MountRecord> {
  const mount = await mountAt(mountpoint)
  if (!isRedirfsMount(mount)) {
    const record = await readRecord(mountpoint)
    if (record !== undefined && !daemonRuns(record) && mount === undefined) throw new UsageError(deathOf(mountpoint, record))
    throw new UsageError(`${mountpoint} is not a redirfs mount${mount !== undefined ? ` (${mount.source}, ${mount.type})` : ''}`)
  }
  return mount!
}

/**
 * Reads `<mnt>/.redirfs/<name>` of a proven redirfs mount, as JSON; a
 * one-line error when what comes back is not a JSON object with `keys`.
 * The reset file resets only when opened non-blocking (src/fs/adapter.ts).
 */
export async function readControlFile (mountpoint: string, name: 'stats' | 'reset', keys: readonly string[]): Promise<Record<string, unknown>> {
  return parseControl(mountpoint, name, await readControlText(mountpoint, name), keys)
}

/** What a control file's text holds: a JSON object with `keys`; a one-line error for anything else (fuzz/stats.fuzz.ts sends it anything). */
export function parseControl (mountpoint: string, name: 'stats' | 'reset', text: string, keys: readonly string[]): Record<string, unknown> {
  let parsed: unknown
  try { parsed = JSON.parse(text) } catch {}
  const missing = typeof parsed === 'object' && parsed !== null ? keys.filter(key => !(key in parsed!)) : keys
  if (missing.length > 0) throw new UsageError(`${mountpoint} answered ${name} that redirfs cannot read (${parsed === undefined ? 'not JSON' : `no ${missing.join(', ')}`}); is its daemon another version? remount it`)
  return parsed as Record<string, unknown>
}

/** The text of `<mnt>/.redirfs/<name>` of a proven redirfs mount. */
export async function readControlText (mountpoint: string, name: 'stats' | 'reset'): Promise<string> {
  const mount = await redirfsMountAt(mountpoint)
  let handle: fs.FileHandle
  try {
    handle = await fs.open(path.join(mountpoint, '.redirfs', name), constants.O_RDONLY | constants.O_NOFOLLOW | (name === 'reset' ? constants.O_NONBLOCK : 0))
  } catch (err) {
    throw await controlError(mountpoint, name, err)
  }
  try {
    // The file must be on that mount: a path swapped meanwhile is refused.
    if ((await handle.stat()).dev !== mount.device) throw new UsageError(`${mountpoint} is not a redirfs mount`)
    return await handle.readFile('utf8')
  } catch (err) {
    throw await controlError(mountpoint, name, err)
  } finally {
    await handle.close()
  }
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
