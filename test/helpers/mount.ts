// Mounting through the real CLI, with teardown that leaves nothing
// mounted and no daemon running even when the test fails.
import { execFile } from 'node:child_process'
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { readStats } from '../../src/cli/stats-command'
import type { MountStats } from '../../src/stats'

const run = promisify(execFile)
export const CLI = path.resolve(__dirname, '../../bin/redirfs')

/** Directories `emptyDir` made, removed when the test process exits. */
const made: string[] = []
process.on('exit', () => {
  // To read the daemons' logs of a failed run: REDIRFS_TEST_KEEP_LOGS=<dir> keeps a copy of them there.
  const keep = process.env.REDIRFS_TEST_KEEP_LOGS
  if (keep !== undefined && keep !== '') cpSync(RUNTIME_DIR, path.join(keep, `${path.basename(RUNTIME_DIR)}-${process.pid}`), { recursive: true })
  // Never through a mount that a failed teardown left: only what is not mounted goes.
  for (const dir of made) if (!isMounted(dir)) rmSync(dir, { recursive: true, force: true })
})

/** A fresh directory under the system's temporary one (a mountpoint, or a place for a test's files); removed at exit. */
export function emptyDir (prefix = 'redirfs-mnt-'): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix))
  made.push(dir)
  return dir
}

/**
 * The runtime directory (records and logs) of this test process's mounts:
 * its own (mkdtemp makes it 0700), removed at exit, so that tests leave no
 * logs behind in the machine's.
 */
export const RUNTIME_DIR = emptyDir('redirfs-run-')
process.env.REDIRFS_RUNTIME_DIR = RUNTIME_DIR

/**
 * The environment a user runs redirfs in: without tap's NODE_OPTIONS, whose
 * preloaded hooks would install signal handlers in the daemon before its own.
 */
export const CLI_ENV: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'NODE_OPTIONS'))

export interface CliResult { code: number, stdout: string, stderr: string }

export async function redirfs (...args: string[]): Promise<CliResult> {
  return await redirfsWith(CLI_ENV, ...args)
}

/** The CLI with an environment of the test's (an S3 server's keys and endpoint). */
export async function redirfsWith (env: NodeJS.ProcessEnv, ...args: string[]): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run(CLI, args, { timeout: 120_000, env })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number, stdout?: string, stderr?: string }
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

export function isMounted (mountpoint: string): boolean {
  return readFileSync('/proc/mounts', 'utf8').split('\n').some(line => line.split(' ')[1] === mountpoint.replace(/ /g, '\\040'))
}

interface Teardown { teardown: (fn: () => Promise<void> | void) => void, fail: (msg: string) => void }

/** Mounts and registers an unmount for teardown; fails the test if the mount does not come up. */
export async function mount (t: Teardown, source: string, mountpoint: string, ...options: string[]): Promise<void> {
  await mountWith(t, CLI_ENV, source, mountpoint, ...options)
}

/** `mount` with an environment of the test's (an S3 server's keys and endpoint). */
export async function mountWith (t: Teardown, env: NodeJS.ProcessEnv, source: string, mountpoint: string, ...options: string[]): Promise<CliResult> {
  t.teardown(async () => { await forceUnmount(mountpoint) })
  const result = await redirfsWith(env, 'mount', source, mountpoint, ...options)
  if (result.code !== 0) throw new Error(`mount failed: ${result.stderr}`)
  return result
}

export async function forceUnmount (mountpoint: string): Promise<void> {
  if (!isMounted(mountpoint)) return
  await redirfs('umount', '--force', mountpoint)
  if (isMounted(mountpoint)) await run('umount', ['-l', mountpoint]).catch(() => {})
}

/** Whether a process still runs: a zombie (exited, its parent not yet told) has stopped. */
export function isAlive (pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return !/^[ZX]$/.test(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0])
  } catch {
    return false
  }
}

/**
 * The mount's stats once its reads in flight are done (readahead, a
 * chunk's write to the disk cache): two reads 300 ms apart that agree on
 * the protocol's and the source's counters. For a test that compares
 * counts taken at two moments.
 */
export async function settledStats (mountpoint: string): Promise<MountStats> {
  const moving = (a: MountStats, b: MountStats): boolean => JSON.stringify([a.protocol, a.source]) !== JSON.stringify([b.protocol, b.source])
  let last = await readStats(mountpoint)
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
    await new Promise(resolve => setTimeout(resolve, 300))
    const now = await readStats(mountpoint)
    if (!moving(last, now)) return now
    last = now
  }
  throw new Error(`the stats of ${mountpoint} still moved after a minute`)
}

/**
 * Waits until `condition` holds, or `ms` (two minutes) passed: a test never
 * bounds by time what a loaded machine may take longer to do. True when it
 * holds.
 */
export async function waitUntil (condition: () => boolean | Promise<boolean>, ms = 120_000, step = 25): Promise<boolean> {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise(resolve => setTimeout(resolve, step))) {
    if (await condition()) return true
  }
  return await condition()
}
