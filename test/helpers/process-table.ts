// A process table as the run tracker sees it (src/runs/processes.ts), made
// by hand: trainers, forked and spawned workers, threads, exits, zombies and
// init adopting orphans, for the run-tracker tests and the model test.
import type { LauncherVariable, ProcessInfo, ProcessTable } from '../../src/runs/processes'

export const PYTHON = '/usr/bin/python3.11'
export const TRAIN = ['python3', 'train.py', '--epochs', '3']
export const SPAWNED = ['python3', '-c', 'from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)', '--multiprocessing-fork']

export class FakeTable implements ProcessTable {
  readonly processes = new Map<number, ProcessInfo>()
  readonly environments = new Map<number, Partial<Record<LauncherVariable, string>>>()
  /** thread → process */
  readonly threads = new Map<number, number>()
  /** Threads that are not their process's first. */
  readonly otherThreads = new Map<number, ProcessInfo>()

  /**
   * A process started by `parent`: forked from it (never exec'd, as the
   * kernel's PF_FORKNOEXEC says) when it runs the parent's program and
   * command line, else exec'd.
   */
  add (pid: number, parent: number, commandLine: string[], program = PYTHON, environment: Partial<Record<LauncherVariable, string>> = {}, uid?: number): number {
    const from = this.processes.get(parent)
    const forkedCopy = from !== undefined && from.program === program && from.commandLine.join('\0') === commandLine.join('\0')
    // A child stays in its parent's process group, but a shell with job control starts each program in one of its own.
    const group = from === undefined || from.program === '/usr/bin/bash' ? pid : from.group
    this.processes.set(pid, { pid, parent, startTime: 1000 + pid, alive: true, program, programKnown: true, commandLine, uid, forkedCopy, leader: group === pid, group })
    this.environments.set(pid, environment)
    this.threads.set(pid, pid)
    return pid
  }

  /** Exited and reaped: gone from the table, its other threads with it. */
  exit (pid: number): void {
    this.processes.delete(pid)
    this.threads.delete(pid)
    this.endThreadsOf(pid)
  }

  /** Exited, not yet reaped: still in the table (its other threads are gone). */
  zombie (pid: number): void {
    this.processes.set(pid, { ...this.processes.get(pid)!, alive: false })
    this.endThreadsOf(pid)
  }

  processOf (thread: number): number | undefined { return this.threads.get(thread) }
  info (pid: number): ProcessInfo | undefined { return this.processes.get(pid) ?? this.otherThreads.get(pid) }
  gone (pid: number): boolean { return this.info(pid) === undefined }
  launcherVariables (pid: number): Partial<Record<LauncherVariable, string>> | undefined { return this.environments.get(pid) }
  children (pid: number): number[] { return [...this.processes.values()].filter(p => p.parent === pid).map(p => p.pid) }
  /** Its parent exited: init adopts it. */
  orphan (pid: number): void { this.processes.set(pid, { ...this.processes.get(pid)!, parent: 1 }) }
  /** Its executable cannot be read (another user's, to a daemon that is not root): only its name is known. */
  hideProgram (pid: number, name: string): void { this.processes.set(pid, { ...this.processes.get(pid)!, program: name, programKnown: false }) }
  /** It rewrote its command line (setproctitle). */
  retitle (pid: number, commandLine: string[]): void { this.processes.set(pid, { ...this.processes.get(pid)!, commandLine }) }
  /** It called setpgrp() or setsid(): it leads a process group (and a session) of its own. */
  setsid (pid: number): void { this.processes.set(pid, { ...this.processes.get(pid)!, leader: true, group: pid }) }
  /** Another thread of process `pid` (its own start time, as /proc/<thread>/stat has it). */
  thread (thread: number, pid: number): number { this.threads.set(thread, pid); this.otherThreads.set(thread, { ...this.processes.get(pid)!, pid: thread, startTime: 5000 + thread }); return thread }

  private endThreadsOf (pid: number): void {
    for (const [thread, of] of this.threads) {
      if (of === pid && thread !== pid) { this.threads.delete(thread); this.otherThreads.delete(thread) }
    }
  }
}

/** init (pid 1) and a shell (pid 100) that starts the jobs. */
export function machine (): FakeTable {
  const table = new FakeTable()
  table.add(1, 0, ['/sbin/init'], '/sbin/init')
  table.add(100, 1, ['bash'], '/usr/bin/bash')
  return table
}
