/**
 * What the mount may know of the processes that open its samples, read
 * from /proc: a thread's process, a process's parent, program, command
 * line, start time and a few launcher variables of its environment.
 *
 * The native FUSE server hands each open's calling thread (the kernel's
 * request context). Nothing here is trusted for access: permissions are the
 * kernel's (default_permissions). It only tells runs apart (run-tracker.ts),
 * and every read may fail (a process that exited, one of another user that
 * a non-root daemon may not inspect): callers treat undefined as "unknown".
 */
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs'

export interface ProcessInfo {
  readonly pid: number
  readonly parent: number
  /** Clock ticks after boot at which it started: with the pid, it names one process for good (pids are reused). */
  readonly startTime: number
  /** False for a zombie (exited, not yet reaped by its parent) or a process being torn down: it reads nothing more. */
  readonly alive: boolean
  /** The program it runs (`/proc/<pid>/exe`), or its name when that cannot be read. */
  readonly program: string
  /** Whether `program` is its executable's path, not merely its name (which a program may change: PyTorch's workers do). */
  readonly programKnown?: boolean
  readonly commandLine: readonly string[]
  /** Whose it is (the owner of `/proc/<pid>`, its effective user), when known. */
  readonly uid?: number
  /**
   * Forked and not exec'd since (the kernel's PF_FORKNOEXEC): a copy of its
   * parent's program, as a DataLoader worker is; a trainer started from a
   * shell or a launcher was exec'd.
   */
  readonly forkedCopy?: boolean
  /** It leads its process group or its session (setsid, setpgid): a program that put itself in the background, not a worker. */
  readonly leader?: boolean
  /** Its process group: a forked child's is its forker's (a job's processes share one), until either changes it. */
  readonly group?: number
}

/** The environment variables by which launchers name a job (run-tracker.ts). */
export const LAUNCHER_VARIABLES = [
  'REDIRFS_RUN_ID',
  'TORCHELASTIC_RUN_ID', 'TORCHELASTIC_RESTART_COUNT',
  'SLURM_JOB_ID', 'SLURM_STEP_ID', 'SLURM_RESTART_COUNT',
  'PMIX_NAMESPACE',
  'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE'
] as const
export type LauncherVariable = typeof LAUNCHER_VARIABLES[number]

/** The process table as the run tracker sees it (a fake one in unit tests). */
export interface ProcessTable {
  /** The process a thread belongs to. */
  processOf (thread: number): number | undefined
  info (pid: number): ProcessInfo | undefined
  /** The launcher variables set in a process's environment; undefined when it cannot be read. */
  launcherVariables (pid: number): Partial<Record<LauncherVariable, string>> | undefined
  /** The processes a process started (any of its threads), as far as can be read. */
  children (pid: number): number[]
  /** Whether a process or thread is known to be gone (no such entry in /proc), not merely unreadable. */
  gone (pid: number): boolean
}

/** include/linux/sched.h: "forked but didn't exec". */
const PF_FORKNOEXEC = 0x40

interface Stat { parent: number, startTime: number, alive: boolean, name: string, forkedCopy: boolean, leader: boolean, group: number }

/** `/proc/<pid>/stat` of process `pid`: the command name is in parentheses and may hold spaces and parentheses itself. */
function parseStat (pid: number, text: string): Stat | undefined {
  const close = text.lastIndexOf(')')
  if (close < 0) return undefined
  // After the name: state (field 3), ppid (4), pgrp (5), session (6), tty_nr, tpgid, flags (9), ..., starttime (22).
  const fields = text.slice(close + 2).split(' ')
  const [parent, group, session, flags, startTime] = [1, 2, 3, 6, 19].map(i => Number(fields[i]))
  if (![parent, group, session, flags, startTime].every(Number.isFinite)) return undefined
  return {
    parent,
    startTime,
    // Z: a zombie; X: dead, being torn down.
    alive: fields[0] !== 'Z' && fields[0] !== 'X',
    name: text.slice(text.indexOf('(') + 1, close),
    forkedCopy: (flags & PF_FORKNOEXEC) !== 0,
    leader: group === pid || session === pid,
    group
  }
}

const readOrUndefined = (file: string): string | undefined => {
  try { return readFileSync(file, 'utf8') } catch { return undefined }
}

/** The start time of a process or thread, or undefined when it is gone. */
export function startTimeOf (pid: number): number | undefined {
  const stat = readOrUndefined(`/proc/${pid}/stat`)
  return stat === undefined ? undefined : parseStat(pid, stat)?.startTime
}

/** Whether the process that started at `startTime` with this pid still runs (a reused pid is another process; a zombie runs no more). */
export function isRunning (pid: number, startTime: number): boolean {
  const stat = readOrUndefined(`/proc/${pid}/stat`)
  const parsed = stat === undefined ? undefined : parseStat(pid, stat)
  return parsed?.startTime === startTime && parsed.alive
}

export const procTable: ProcessTable = {
  gone (pid) {
    try {
      statSync(`/proc/${pid}`)
      return false
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT'
    }
  },
  processOf (thread) {
    const status = readOrUndefined(`/proc/${thread}/status`)
    const tgid = status?.match(/^Tgid:\s+(\d+)$/m)
    return tgid === null || tgid === undefined ? undefined : Number(tgid[1])
  },
  info (pid) {
    const statText = readOrUndefined(`/proc/${pid}/stat`)
    const stat = statText === undefined ? undefined : parseStat(pid, statText)
    if (stat === undefined) return undefined
    let program: string
    let programKnown = true
    try { program = readlinkSync(`/proc/${pid}/exe`) } catch { program = stat.name; programKnown = false }
    const commandLine = (readOrUndefined(`/proc/${pid}/cmdline`) ?? '').split('\0').filter((arg, i, all) => i < all.length - 1 || arg !== '')
    let uid: number | undefined
    try { uid = statSync(`/proc/${pid}`).uid } catch {}
    return { pid, parent: stat.parent, startTime: stat.startTime, alive: stat.alive, program, programKnown, commandLine, uid, forkedCopy: stat.forkedCopy, leader: stat.leader, group: stat.group }
  },
  children (pid) {
    let threads: string[]
    try { threads = readdirSync(`/proc/${pid}/task`) } catch { return [] }
    return threads.flatMap(thread => (readOrUndefined(`/proc/${pid}/task/${thread}/children`) ?? '').split(' ').filter(Boolean).map(Number))
  },
  launcherVariables (pid) {
    const environ = readOrUndefined(`/proc/${pid}/environ`)
    if (environ === undefined) return undefined
    const found: Partial<Record<LauncherVariable, string>> = {}
    for (const entry of environ.split('\0')) {
      const equals = entry.indexOf('=')
      const name = entry.slice(0, equals) as LauncherVariable
      if (equals > 0 && (LAUNCHER_VARIABLES as readonly string[]).includes(name)) found[name] = entry.slice(equals + 1)
    }
    return found
  }
}
