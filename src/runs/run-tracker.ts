/**
 * Runs: which training job an open comes from, so that a new job starts a
 * new epoch by itself (docs/design.md, "Runs").
 *
 * The mount cannot see epochs, only opens; but every open comes from a
 * thread, and a training job is a tree of processes. An open is charged to
 * its **trainer**: the process found by walking up from the opener past
 * DataLoader workers (a forked copy of its parent: same program, same
 * command line; or a Python multiprocessing child, spawned or from a fork
 * server). A multiprocessing child whose own `REDIRFS_RUN_ID` differs from
 * its parent's is a trainer itself (a sweep that spawns its trials). A
 * worker whose trainer is gone, or whose run has ended, is an orphan: its
 * opens are refused (EIO), for a sample it took would be missing from the
 * epoch of the run reading now. A worker is known as one once it or a
 * sibling opened, and before that by what the kernel says of it: forked
 * and never exec'd, and adopted (see `adopted`).
 *
 * Trainers make up a **run**, named by the job's launcher when it says so
 * in the trainer's environment: `REDIRFS_RUN_ID` (set it yourself),
 * torchrun (`TORCHELASTIC_RUN_ID` and its restart count), Slurm job steps
 * (`SLURM_JOB_ID`.`SLURM_STEP_ID` and the requeue count), PMIx (MPI), or
 * torch.distributed's own rendezvous (`MASTER_ADDR`, `MASTER_PORT`,
 * `WORLD_SIZE`). The ranks of one job are then one run, on one node or,
 * with these keys, across a cluster. Without any, a run is one trainer
 * process.
 *
 * The rule: an open from a run the mount has not seen starts a new epoch
 * once every trainer of the runs before it has exited (a job killed and
 * started again, a second job after the first). A run whose trainers have
 * all exited (zombies count as exited) is over, whatever its name: the next job of the same name
 * (a fixed MASTER_PORT, a reused REDIRFS_RUN_ID) is a new run. While one still runs, two
 * jobs read at once: nothing can keep either exact, so it is counted,
 * logged and shown in the stats until the next new run starts afresh.
 *
 * Reading /proc for every open would cost the hot path; what a thread
 * belongs to is kept, and checked again (its start time) once a second.
 */
import path from 'node:path'
import { procTable, type ProcessInfo, type ProcessTable } from './processes'

export interface Run {
  /** How the run is named (see above): the launcher's job, or one trainer process. */
  readonly key: string
  /** Named by a launcher, so every node of a cluster names it alike. */
  readonly global: boolean
  /** Its trainers seen so far: pid → start time. */
  readonly trainers: Map<number, number>
  /** A trainer, as `ps` would show it: for messages. */
  readonly description: string
  readonly startedAt: number
}

export type RunEvent =
  /** An open of a run already seen (or one the mount cannot place). */
  | { readonly kind: 'same' }
  /** The mount's first run. */
  | { readonly kind: 'first', readonly run: Run }
  /** A new run, after every earlier one ended: it starts a new epoch. */
  | { readonly kind: 'new', readonly run: Run, readonly previous: Run }
  /** A new run while another still reads: epochs are no longer exact. */
  | { readonly kind: 'concurrent', readonly run: Run, readonly others: readonly Run[] }
  /** An open by a worker whose trainer is gone or whose run ended, or (asked again) by a thread gone since: it must not take a sample. */
  | { readonly kind: 'orphan' }

export interface RunStats {
  /** Runs seen, and how many of them began while another was reading. */
  runs: number
  concurrentRuns: number
  /** The run reading now, and any reading beside it. */
  current?: { key: string, trainers: number[], trainer: string, since: string }
  alongside: { key: string, trainers: number[], trainer: string }[]
  /** False from a run that began beside another until the next run starts afresh. */
  exact: boolean
  /** Opens refused to orphaned workers (see above). */
  orphanOpens: number
}

/** How long what a thread belongs to is trusted before its start time is checked again. */
const RECHECK_MS = 1000
/** Threads remembered at most; the oldest are forgotten first. */
const THREADS_KEPT = 4096
const MAX_DEPTH = 64

const isMultiprocessingChild = (p: ProcessInfo): boolean =>
  p.commandLine.includes('--multiprocessing-fork') || p.commandLine.some(arg => arg.startsWith('from multiprocessing.'))

/**
 * Whether two programs are the same interpreter: the same file (one
 * replaced by an upgrade since shows as "(deleted)"), or two Pythons (a
 * worker started with multiprocessing.set_executable).
 */
function sameInterpreter (a: string, b: string): boolean {
  const file = (program: string): string => program.replace(/ \(deleted\)$/, '')
  const isPython = (program: string): boolean => /^python[\d.]*$/.test(path.basename(file(program)))
  return file(a) === file(b) || (isPython(a) && isPython(b))
}

const sameCommandLine = (a: ProcessInfo, b: ProcessInfo): boolean =>
  a.commandLine.length === b.commandLine.length && a.commandLine.every((arg, i) => arg === b.commandLine[i])

/**
 * The trainer an open by process `pid` is for (see the top of this file);
 * 'orphan' for a worker whose trainer is gone; undefined when unknown.
 */
export function findTrainer (table: ProcessTable, pid: number): ProcessInfo | 'orphan' | undefined {
  const first = table.info(pid)
  if (first === undefined) return undefined
  let process: ProcessInfo = first
  for (let depth = 0; depth < MAX_DEPTH; depth++) {
    // Pid 1 may be the trainer itself (a container without an init).
    const parent: ProcessInfo | undefined = process.parent >= 1 ? table.info(process.parent) : undefined
    if (isMultiprocessingChild(process)) {
      // A parent that cannot be read is unknown, not gone.
      if (process.parent >= 1 && parent === undefined) return undefined
      // Its parent (the trainer, or a fork server) runs the same interpreter; else it was adopted by init or a reaper.
      if (parent === undefined || adopted(table, process, parent)) return 'orphan'
      if (namesOwnRun(table, process, parent)) return process
      process = parent
      continue
    }
    const copyOfParent = parent !== undefined && sameInterpreter(parent.program, process.program) && sameCommandLine(parent, process)
    const forkedCopy = process.forkedCopy === true && process.leader !== true
    // A forked copy whose parent runs another program was adopted (by init, a reaper): a worker whose trainer is
    // gone, even one that had opened nothing for the tracker to know it by. One not adopted is its parent's,
    // whatever either calls itself now (setproctitle, PyTorch's names). A program that forked itself into the
    // background and leads its own session or group is a trainer.
    const away = forkedCopy && adopted(table, process, parent)
    if (parent !== undefined && (copyOfParent || (forkedCopy && !away)) && !namesOwnRun(table, process, parent)) {
      process = parent
      continue
    }
    if (!copyOfParent && away) return 'orphan'
    return process
  }
  return process
}

/**
 * Whether a child is no longer its forker's: its parent has gone, runs
 * another executable (init, systemd, tini, a shell), or is in another
 * process group that no ancestor of the parent is in either (a child stays
 * in its forker's group, or its forker's forebears' when the forker moved
 * to a group of its own later; init, whose executable even root may not
 * read in a container, is in a group of its own). Only what /proc shows
 * for sure: a name (a program may rename itself, and a daemon that is not
 * root sees only the names of another user's processes) or a command line
 * (setproctitle rewrites it) is no evidence, nor is a parent that cannot
 * be read.
 */
function adopted (table: ProcessTable, process: ProcessInfo, parent: ProcessInfo | undefined): boolean {
  if (parent === undefined) return process.parent >= 1 && table.gone(process.parent)
  if (parent.programKnown === true && process.programKnown === true && !sameInterpreter(parent.program, process.program)) return true
  if (process.group === undefined) return false
  let forebear: ProcessInfo | undefined = parent
  for (let depth = 0; forebear !== undefined && depth < MAX_DEPTH; depth++) {
    if (forebear.group === undefined || forebear.group === process.group) return false
    forebear = forebear.parent >= 1 ? table.info(forebear.parent) : undefined
  }
  return true
}

/** Whether a child's environment names a run of its own: a REDIRFS_RUN_ID that is not its parent's. */
function namesOwnRun (table: ProcessTable, child: ProcessInfo, parent: ProcessInfo): boolean {
  const own = table.launcherVariables(child.pid)?.REDIRFS_RUN_ID
  return own !== undefined && own !== '' && own !== table.launcherVariables(parent.pid)?.REDIRFS_RUN_ID
}

/** The run a trainer belongs to: its launcher's job when the environment names one, else the trainer itself. */
export function runOf (table: ProcessTable, trainer: ProcessInfo, now: number): Run {
  const v = table.launcherVariables(trainer.pid) ?? {}
  // A job's name is its user's: another user naming the same job (REDIRFS_RUN_ID is in the stats, a rendezvous
  // address is guessable) starts a run of its own beside it, never joins the victim's and counts as its epochs.
  const user = trainer.uid === undefined ? '' : ` of uid ${trainer.uid}`
  const named = (key: string, global: boolean): Run => ({ key: global ? key + user : key, global, trainers: new Map([[trainer.pid, trainer.startTime]]), description: describe(trainer), startedAt: now })
  if (v.REDIRFS_RUN_ID !== undefined && v.REDIRFS_RUN_ID !== '') return named(`REDIRFS_RUN_ID ${v.REDIRFS_RUN_ID}`, true)
  if (v.TORCHELASTIC_RUN_ID !== undefined) {
    const attempt = v.TORCHELASTIC_RESTART_COUNT ?? '0'
    if (v.TORCHELASTIC_RUN_ID !== 'none') return named(`torchrun ${v.TORCHELASTIC_RUN_ID} attempt ${attempt}`, true)
    // torchrun without --rdzv-id (one node): its agent, the ranks' parent, names the job.
    const agent = table.info(trainer.parent)
    if (agent !== undefined) return named(`torchrun ${agent.pid}@${agent.startTime} attempt ${attempt}`, false)
  }
  if (v.SLURM_JOB_ID !== undefined && v.SLURM_STEP_ID !== undefined) return named(`slurm ${v.SLURM_JOB_ID}.${v.SLURM_STEP_ID} restart ${v.SLURM_RESTART_COUNT ?? '0'}`, true)
  if (v.PMIX_NAMESPACE !== undefined && v.PMIX_NAMESPACE !== '') return named(`pmix ${v.PMIX_NAMESPACE}`, true)
  if (v.MASTER_ADDR !== undefined && v.MASTER_PORT !== undefined) return named(`torch.distributed ${v.MASTER_ADDR}:${v.MASTER_PORT} world ${v.WORLD_SIZE ?? '?'}`, true)
  return named(`process ${trainer.pid}@${trainer.startTime}`, false)
}

/**
 * A trainer for messages and the stats, which anyone who sees the mount may
 * read: its program and script only, never its arguments (they may hold a
 * token or a password).
 */
function describe (p: ProcessInfo): string {
  const program = path.basename(p.commandLine[0] ?? p.program)
  const script = p.commandLine.slice(1).find(arg => /\.py$/.test(arg) && !arg.startsWith('-'))
  return `pid ${p.pid} (${script !== undefined ? `${program} ${path.basename(script)}` : program})`
}

interface KnownThread {
  readonly startTime: number
  /** The run it reads for; 'orphan'; undefined: unknown. */
  readonly run: Run | 'orphan' | undefined
  /** The trainer its process works for, when it is a worker: its other workers are looked for once a second. */
  readonly trainer?: ProcessInfo
  checkedAt: number
}

/** A process known to be a trainer's worker (pid → it, and whose it is): a worker for good, whatever becomes of its parent. */
interface KnownWorker {
  readonly startTime: number
  readonly trainer: { readonly pid: number, readonly startTime: number }
}

/** Workers remembered at most; past that, those that exited are forgotten. */
const WORKERS_KEPT = 4096

export class RunTracker {
  private current: Run | undefined
  /** Runs that began while another was reading, by key. */
  private readonly alongside = new Map<string, Run>()
  private readonly threads = new Map<number, KnownThread>()
  /**
   * Processes found to be workers: a worker whose trainer was killed is
   * adopted by init (or a reaper) and no longer looks like anyone's, and a
   * new thread of it (a dataset that reads on threads, a thread pool) is
   * a thread never seen. By process, it is still known for what it is.
   */
  private readonly workers = new Map<number, KnownWorker>()
  /** When each trainer's children were last looked through: trainer pid → ms. */
  private readonly childrenSeenAt = new Map<number, number>()
  private runs = 0
  private concurrentRuns = 0
  private exact = true
  private orphanOpens = 0

  constructor (private readonly table: ProcessTable = procTable) {}

  /**
   * Places an open by `thread`; what it changes (see RunEvent). `recheck`:
   * look at the thread again now, not once a second (an answer about to go
   * to an opener that may have gone while it waited).
   */
  noteOpen (thread: number, now = Date.now(), recheck = false): RunEvent {
    const known = this.threads.get(thread)
    if (known !== undefined) {
      const due = recheck || now - known.checkedAt >= RECHECK_MS
      const info = due ? this.table.info(thread) : undefined
      if (!due || info?.startTime === known.startTime) {
        // Still the thread it was: still of its run, unless that run ended (checked with the thread, once a second).
        if (due) {
          known.checkedAt = now
          if (known.run !== undefined && known.run !== 'orphan' && !this.isReading(known.run)) this.threads.set(thread, { ...known, run: 'orphan' })
          else if (known.trainer !== undefined) this.noteWorkersOf(known.trainer, now)
        }
        return this.placed(this.threads.get(thread)!.run)
      }
      this.threads.delete(thread)
      // Asked as an answer is ready: a thread seen before and gone now (its process killed while its open waited) is
      // an orphan, for no answer can reach it. Only when /proc says it is gone: an unreadable one stays unknown.
      if (recheck && info === undefined && this.table.gone(thread)) return this.placed('orphan')
    }
    const threadStart = this.table.info(thread)?.startTime
    const pid = this.table.processOf(thread)
    const trainer = pid === undefined ? undefined : this.trainerOf(pid, now)
    if (threadStart === undefined || trainer === undefined || trainer === 'orphan') {
      const unplaced = trainer === 'orphan' ? 'orphan' : undefined
      if (threadStart !== undefined) this.remember(thread, { startTime: threadStart, run: unplaced, checkedAt: now })
      return this.placed(unplaced)
    }
    const run = runOf(this.table, trainer, now)
    const event = this.place(run, trainer)
    // The run object the tracker keeps under that key: a thread belongs to that run, not to a later one of the same name.
    this.remember(thread, { startTime: threadStart, run: this.runNamed(run.key) ?? run, trainer: trainer.pid !== pid ? trainer : undefined, checkedAt: now })
    return event
  }

  /**
   * The trainer process `pid` works for: a known worker's own (or 'orphan'
   * once that trainer is gone), else found by walking up (`findTrainer`);
   * a worker found so is remembered, with its trainer's other workers.
   */
  private trainerOf (pid: number, now: number): ProcessInfo | 'orphan' | undefined {
    const known = this.workers.get(pid)
    const info = known === undefined ? undefined : this.table.info(pid)
    if (known !== undefined && info?.startTime === known.startTime) {
      const trainer = this.table.info(known.trainer.pid)
      return trainer?.startTime === known.trainer.startTime && trainer.alive ? trainer : 'orphan'
    }
    if (known !== undefined) this.workers.delete(pid) // a reused pid
    const trainer = findTrainer(this.table, pid)
    if (trainer === undefined || trainer === 'orphan') return trainer
    for (let p = this.table.info(pid); p !== undefined && p.pid !== trainer.pid; p = this.table.info(p.parent)) this.noteWorker(p, trainer)
    this.noteWorkersOf(trainer, now)
    return trainer
  }

  /**
   * Remembers the trainer's workers that have not opened anything yet (a
   * worker is started with the trainer's whole prefetch queue to read), so
   * that one whose trainer is killed before its first open is known too.
   * Once a second at most per trainer.
   */
  private noteWorkersOf (trainer: ProcessInfo, now: number): void {
    if (now - (this.childrenSeenAt.get(trainer.pid) ?? -Infinity) < RECHECK_MS) return
    this.childrenSeenAt.set(trainer.pid, now)
    const pending = [trainer.pid]
    for (let depth = 0; depth < MAX_DEPTH && pending.length > 0; depth++) {
      for (const child of this.table.children(pending.shift()!)) {
        const info = this.table.info(child)
        if (info === undefined || this.workers.get(child)?.startTime === info.startTime) continue
        const its = findTrainer(this.table, child)
        if (its === undefined || its === 'orphan' || its.pid !== trainer.pid || its.startTime !== trainer.startTime) continue
        this.noteWorker(info, trainer)
        pending.push(child)
      }
    }
  }

  private noteWorker (worker: ProcessInfo, trainer: ProcessInfo): void {
    if (this.workers.size >= WORKERS_KEPT) {
      for (const [pid, known] of this.workers) if (this.table.info(pid)?.startTime !== known.startTime) this.workers.delete(pid)
      if (this.workers.size >= WORKERS_KEPT) this.workers.delete(this.workers.keys().next().value!)
    }
    if (this.childrenSeenAt.size >= WORKERS_KEPT) this.childrenSeenAt.delete(this.childrenSeenAt.keys().next().value!)
    this.workers.set(worker.pid, { startTime: worker.startTime, trainer: { pid: trainer.pid, startTime: trainer.startTime } })
  }

  /** What an open by a thread already placed means: nothing new, unless its run is no longer reading. */
  private placed (run: Run | 'orphan' | undefined): RunEvent {
    if (run === 'orphan' || (run !== undefined && this.runNamed(run.key) !== run)) {
      this.orphanOpens++
      return { kind: 'orphan' }
    }
    return { kind: 'same' }
  }

  /** The run the tracker keeps under a name: one reading beside the current run first (a restart of an ended current one). */
  private runNamed (key: string): Run | undefined {
    return this.alongside.get(key) ?? (this.current?.key === key ? this.current : undefined)
  }

  private place (run: Run, trainer: ProcessInfo): RunEvent {
    const known = this.runNamed(run.key)
    if (known !== undefined && (known.trainers.get(trainer.pid) === trainer.startTime || this.isReading(known))) {
      known.trainers.set(trainer.pid, trainer.startTime)
      return { kind: 'same' }
    }
    // A run of that name whose trainers all exited is over: this one is new.
    if (known !== undefined) this.alongside.delete(known.key)
    this.runs++
    if (this.current === undefined) {
      this.current = run
      return { kind: 'first', run }
    }
    const live = [this.current, ...this.alongside.values()].filter(other => this.isReading(other))
    if (live.length > 0) {
      this.alongside.set(run.key, run)
      this.concurrentRuns++
      this.exact = false
      return { kind: 'concurrent', run, others: live }
    }
    const previous = this.current
    this.current = run
    this.alongside.clear()
    this.exact = true
    return { kind: 'new', run, previous }
  }

  /** Whether any trainer of a run still runs (a zombie does not). */
  private isReading (run: Run): boolean {
    for (const [pid, startTime] of run.trainers) {
      const info = this.table.info(pid)
      if (info?.startTime === startTime && info.alive) return true
    }
    return false
  }

  /** The runs named by a launcher whose trainers read now: what a cluster node tells its peers. */
  readingGlobalRuns (): string[] {
    return [this.current, ...this.alongside.values()].flatMap(run => run !== undefined && run.global && this.isReading(run) ? [run.key] : [])
  }

  /**
   * Another node's trainers read a run while this node's read another: two
   * jobs at once across the cluster, counted and made NOT EXACT as a run
   * beside another here is, until a run starts after both ended.
   */
  noteRunElsewhere (): void {
    this.concurrentRuns++
    this.exact = false
  }

  private remember (thread: number, known: KnownThread): void {
    if (this.threads.size >= THREADS_KEPT) this.threads.delete(this.threads.keys().next().value!)
    this.threads.set(thread, known)
  }

  stats (): RunStats {
    const show = (run: Run): { key: string, trainers: number[], trainer: string } => ({ key: run.key, trainers: [...run.trainers.keys()], trainer: run.description })
    return {
      runs: this.runs,
      concurrentRuns: this.concurrentRuns,
      ...(this.current !== undefined ? { current: { ...show(this.current), since: new Date(this.current.startedAt).toISOString() } } : {}),
      alongside: [...this.alongside.values()].map(show),
      exact: this.exact,
      orphanOpens: this.orphanOpens
    }
  }
}
