/**
 * The memory limit the daemon runs under: a container's or a Slurm job's
 * memory cgroup (v1 or v2). A daemon whose --memory does not fit under it
 * is killed by the kernel mid-epoch, leaving a dead mount and nothing in
 * its log; so the mount compares the two first, and records the cgroup's
 * OOM-kill count, so that a later `redirfs stats` or `umount` can tell a
 * daemon the kernel killed for memory from one that died otherwise.
 */
import { readFileSync } from 'node:fs'
import path from 'node:path'

export interface MemoryLimit {
  /** The cgroup whose limit is the tightest (its directory under /sys/fs/cgroup). */
  readonly cgroup: string
  readonly limitBytes: number
  /** Bytes the cgroup holds now (this process and any other in it). */
  readonly usageBytes: number
  /** The OOM kills the kernel counted in each cgroup from the process's own up to the limiting one, when read. */
  readonly oomKills: Record<string, number>
}

const V1_ROOT = '/sys/fs/cgroup/memory'
const V2_ROOT = '/sys/fs/cgroup'
/** Above this a v1 limit means none (the kernel's "unlimited" is about 2^63). */
const UNLIMITED = 2 ** 60

const read = (file: string): string | undefined => {
  try { return readFileSync(file, 'utf8').trim() } catch { return undefined }
}

/** The memory cgroup directories of a process, its own first, then each parent up to the root. */
function cgroupChain (pid: number | 'self'): { version: 1 | 2, dirs: string[] } | undefined {
  const lines = read(`/proc/${pid}/cgroup`)?.split('\n') ?? []
  const v1 = lines.map(line => line.split(':')).find(([, controllers]) => controllers.split(',').includes('memory'))
  const v2 = lines.find(line => line.startsWith('0::'))
  const [version, root, relative] = v1 !== undefined ? [1, V1_ROOT, v1.slice(2).join(':')] as const : v2 !== undefined ? [2, V2_ROOT, v2.slice(3)] as const : [undefined, '', '']
  if (version === undefined) return undefined
  const dirs: string[] = []
  // A container may show a path its view of /sys/fs/cgroup lacks: start from the deepest that exists.
  for (let at = relative; ; at = path.dirname(at)) {
    const dir = path.join(root, at)
    if (read(path.join(dir, version === 1 ? 'memory.limit_in_bytes' : 'cgroup.procs')) !== undefined) dirs.push(dir)
    if (at === '/' || at === '.' || at === '') break
  }
  return { version, dirs }
}

function limitOf (dir: string, version: 1 | 2): number {
  const text = read(path.join(dir, version === 1 ? 'memory.limit_in_bytes' : 'memory.max'))
  const bytes = text === undefined || text === 'max' ? Infinity : Number(text)
  return Number.isFinite(bytes) && bytes < UNLIMITED ? bytes : Infinity
}

function oomKillsOf (dir: string, version: 1 | 2): number | undefined {
  const text = read(path.join(dir, version === 1 ? 'memory.oom_control' : 'memory.events'))
  const match = text?.match(/^oom_kill (\d+)$/m)
  return match === null || match === undefined ? undefined : Number(match[1])
}

/** The tightest memory limit over a process's cgroup and its ancestors; undefined when there is none. */
export function memoryLimitOf (pid: number | 'self' = 'self'): MemoryLimit | undefined {
  const chain = cgroupChain(pid)
  if (chain === undefined) return undefined
  let tightest: { dir: string, bytes: number } | undefined
  const oomKills: Record<string, number> = {}
  for (const dir of chain.dirs) {
    const bytes = limitOf(dir, chain.version)
    const kills = oomKillsOf(dir, chain.version)
    if (kills !== undefined) oomKills[dir] = kills
    if (bytes < (tightest?.bytes ?? Infinity)) tightest = { dir, bytes }
  }
  if (tightest === undefined) return undefined
  const usage = Number(read(path.join(tightest.dir, chain.version === 1 ? 'memory.usage_in_bytes' : 'memory.current')) ?? 0)
  // Only the cgroups up to the limiting one can have killed for its sake.
  const upTo = chain.dirs.indexOf(tightest.dir)
  for (const dir of chain.dirs.slice(upTo + 1)) delete oomKills[dir]
  return { cgroup: tightest.dir, limitBytes: tightest.bytes, usageBytes: usage, oomKills }
}

/**
 * How many times the kernel's OOM killer struck in the recorded cgroups
 * since the record was made (the most any one of them counted). It names
 * no victim: a kill there is likely the daemon's, not certainly.
 */
export function oomKillsSince (recorded: MemoryLimit): number {
  return Math.max(0, ...Object.entries(recorded.oomKills).map(([dir, before]) => {
    const version = dir.startsWith(V1_ROOT + '/') || dir === V1_ROOT ? 1 : 2
    return (oomKillsOf(dir, version) ?? before) - before
  }))
}

/** The recorded cgroup's limit now (it may have been changed since the mount), or the recorded one. */
export function limitNow (recorded: MemoryLimit): number {
  const version = recorded.cgroup.startsWith(V1_ROOT + '/') || recorded.cgroup === V1_ROOT ? 1 : 2
  const bytes = limitOf(recorded.cgroup, version)
  return Number.isFinite(bytes) ? bytes : recorded.limitBytes
}
