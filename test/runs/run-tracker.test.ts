// The run rule on a fake process table: which process an open is charged
// to, how runs are named, and when a new one starts a new epoch. The real
// jobs (DataLoader workers, SIGKILL, torchrun) are in restarts.test.ts.
import t from 'tap'
import { findTrainer, RunTracker, runOf } from '../../src/runs/run-tracker'
import type { ProcessInfo } from '../../src/runs/processes'
import { FakeTable, machine, PYTHON, SPAWNED, TRAIN } from '../helpers/process-table'

const trainerPid = (found: ReturnType<typeof findTrainer>): number | string | undefined => typeof found === 'object' ? found.pid : found

t.test('a forked DataLoader worker is charged to the trainer that forked it', async t => {
  const table = machine()
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  t.equal((findTrainer(table, 201) as ProcessInfo).pid, 200)
})

t.test('a spawned worker, and one forked from a fork server, are charged to the trainer', async t => {
  const table = machine()
  table.add(200, 100, TRAIN)
  table.add(201, 200, SPAWNED)
  const forkserver = ['python3', '-c', 'from multiprocessing.forkserver import main; main(8, 9, [])']
  table.add(202, 200, forkserver)
  table.add(203, 202, forkserver)
  t.equal((findTrainer(table, 201) as ProcessInfo).pid, 200)
  t.equal((findTrainer(table, 203) as ProcessInfo).pid, 200)
})

t.test('a spawned worker whose trainer is gone is an orphan', async t => {
  const table = machine()
  table.add(201, 1, SPAWNED)
  t.equal(findTrainer(table, 201), 'orphan')
})

t.test('a trainer started from a shell is its own run; torchrun ranks are one run by its run id and attempt', async t => {
  const table = machine()
  table.add(200, 100, TRAIN)
  t.equal(runOf(table, table.info(200)!, 0).key, 'process 200@1200')
  t.equal(runOf(table, table.info(200)!, 0).global, false)
  table.add(300, 100, ['python3', '/usr/bin/torchrun', '--nproc-per-node', '2', 'train.py'])
  const rank = { TORCHELASTIC_RUN_ID: 'job7', TORCHELASTIC_RESTART_COUNT: '1' }
  table.add(301, 300, ['python3', '-u', 'train.py'], PYTHON, rank)
  table.add(302, 300, ['python3', '-u', 'train.py'], PYTHON, rank)
  t.equal(runOf(table, table.info(301)!, 0).key, 'torchrun job7 attempt 1')
  t.equal(runOf(table, table.info(302)!, 0).key, 'torchrun job7 attempt 1')
  t.equal(runOf(table, table.info(301)!, 0).global, true)
})

t.test('torchrun without a run id names its job by its agent process', async t => {
  const table = machine()
  table.add(300, 100, ['python3', '/usr/bin/torchrun', 'train.py'])
  table.add(301, 300, ['python3', '-u', 'train.py'], PYTHON, { TORCHELASTIC_RUN_ID: 'none', TORCHELASTIC_RESTART_COUNT: '0' })
  t.equal(runOf(table, table.info(301)!, 0).key, 'torchrun 300@1300 attempt 0')
})

t.test('REDIRFS_RUN_ID, Slurm steps and torch.distributed rendezvous name runs', async t => {
  const table = machine()
  table.add(200, 100, TRAIN, PYTHON, { REDIRFS_RUN_ID: 'exp-3', SLURM_JOB_ID: '9' })
  table.add(201, 100, TRAIN, PYTHON, { SLURM_JOB_ID: '9', SLURM_STEP_ID: '2', SLURM_RESTART_COUNT: '1' })
  table.add(202, 100, TRAIN, PYTHON, { SLURM_JOB_ID: '9' })
  table.add(203, 100, TRAIN, PYTHON, { MASTER_ADDR: 'node0', MASTER_PORT: '29500', WORLD_SIZE: '4' })
  t.equal(runOf(table, table.info(200)!, 0).key, 'REDIRFS_RUN_ID exp-3')
  t.equal(runOf(table, table.info(201)!, 0).key, 'slurm 9.2 restart 1')
  t.equal(runOf(table, table.info(202)!, 0).key, 'process 202@1202', 'a Slurm batch script without a step is no job of its own')
  t.equal(runOf(table, table.info(203)!, 0).key, 'torch.distributed node0:29500 world 4')
})

t.test('a new run after the last one ended starts a new epoch; its workers and later epochs do not', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  t.equal(runs.noteOpen(201, 0).kind, 'first')
  t.equal(runs.noteOpen(200, 10).kind, 'same', 'the trainer itself (num_workers=0, or validation)')
  table.exit(201)
  table.add(202, 200, TRAIN)
  t.equal(runs.noteOpen(202, 20).kind, 'same', 'the next epoch\'s worker')
  table.exit(202)
  table.exit(200)
  table.add(300, 100, TRAIN)
  const next = runs.noteOpen(300, 30)
  t.equal(next.kind, 'new')
  t.equal(next.kind === 'new' && next.previous.key, 'process 200@1200')
  t.same(runs.stats(), { runs: 2, concurrentRuns: 0, current: { key: 'process 300@1300', trainers: [300], trainer: 'pid 300 (python3 train.py)', since: new Date(30).toISOString() }, alongside: [], exact: true, orphanOpens: 0 })
})

t.test('another user naming the same job (REDIRFS_RUN_ID) begins a run of its own beside it, never joins it', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN, PYTHON, { REDIRFS_RUN_ID: 'job1' }, 1000)
  t.equal(runs.noteOpen(200, 0).kind, 'first')
  t.equal(runs.stats().current?.key, 'REDIRFS_RUN_ID job1 of uid 1000')
  table.add(300, 100, TRAIN, PYTHON, { REDIRFS_RUN_ID: 'job1' }, 65534)
  t.equal(runs.noteOpen(300, 10).kind, 'concurrent')
  t.equal(runs.stats().exact, false, 'the victim\'s epochs are not called exact')
  table.add(400, 100, TRAIN, PYTHON, { REDIRFS_RUN_ID: 'job1' }, 1000)
  t.equal(runs.noteOpen(400, 20).kind, 'same', 'the same user\'s second rank joins')
})

t.test('a second job while the first still reads is concurrent: not exact until a run starts after both end', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  runs.noteOpen(200, 0)
  table.add(300, 100, ['cat', 'x.jpg'], '/usr/bin/cat')
  const concurrent = runs.noteOpen(300, 10)
  t.equal(concurrent.kind, 'concurrent')
  t.equal(runs.stats().exact, false)
  t.equal(runs.stats().alongside.length, 1)
  table.exit(300)
  t.equal(runs.noteOpen(200, 2000).kind, 'same', 'the first job goes on')
  t.equal(runs.stats().exact, false, 'still not exact: the first job\'s epoch lost a sample')
  table.exit(200)
  table.add(400, 100, TRAIN)
  t.equal(runs.noteOpen(400, 3000).kind, 'new')
  t.equal(runs.stats().exact, true)
  t.equal(runs.stats().concurrentRuns, 1)
})

t.test('ranks of one job are one run; the same name after every rank exited is a new run', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  const env = { MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29500', WORLD_SIZE: '2' }
  table.add(200, 100, TRAIN, PYTHON, env)
  table.add(201, 100, TRAIN, PYTHON, env)
  t.equal(runs.noteOpen(200, 0).kind, 'first')
  t.equal(runs.noteOpen(201, 0).kind, 'same')
  table.exit(200)
  t.equal(runs.noteOpen(201, 5000).kind, 'same', 'one rank still reads')
  table.exit(201)
  table.add(210, 100, TRAIN, PYTHON, env)
  t.equal(runs.noteOpen(210, 6000).kind, 'new')
})

t.test('an orphaned worker\'s open is refused and starts no run', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  runs.noteOpen(200, 0)
  table.exit(200)
  table.add(201, 1, SPAWNED)
  t.equal(runs.noteOpen(201, 10).kind, 'orphan')
  t.equal(runs.stats().runs, 1)
  t.equal(runs.stats().orphanOpens, 1)
})

t.test('a worker left over from a run that ended is refused once the next run began', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  t.equal(runs.noteOpen(201, 0).kind, 'first')
  table.exit(200) // killed; its worker lingers (still a forked copy, now of init's)
  table.add(300, 100, TRAIN)
  t.equal(runs.noteOpen(300, 10).kind, 'new')
  t.equal(runs.noteOpen(201, 20).kind, 'orphan', 'its thread was placed in the run that ended')
})

t.test('a worker whose trainer exited is refused, even before another run begins', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, SPAWNED)
  t.equal(runs.noteOpen(201, 0).kind, 'first')
  table.exit(200)
  t.equal(runs.noteOpen(201, 2000).kind, 'orphan', 'found when the thread is checked again')
})

t.test('a forked worker whose trainer was killed is its worker still: a new thread of it opens as an orphan, and starts no run', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  t.equal(runs.noteOpen(201, 0).kind, 'first')
  table.exit(200) // killed: init adopts its worker, which now looks like a trainer started by init
  table.orphan(201)
  t.equal(runs.noteOpen(table.thread(2011, 201), 10).kind, 'orphan', 'a thread never seen, of a process known as a worker')
  table.add(300, 100, TRAIN)
  t.equal(runs.noteOpen(300, 20).kind, 'new', 'the next job: a new run, not one beside the worker')
  t.equal(runs.noteOpen(table.thread(2012, 201), 30).kind, 'orphan')
  t.same([runs.stats().runs, runs.stats().exact], [2, true])
})

t.test('a worker that had opened nothing when its trainer was killed is known from the trainer\'s children', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  table.add(202, 200, TRAIN) // started, not yet read anything
  t.equal(runs.noteOpen(201, 0).kind, 'first')
  table.exit(200)
  table.orphan(201)
  table.orphan(202)
  t.equal(runs.noteOpen(table.thread(2021, 202), 10).kind, 'orphan')
  t.equal(runs.stats().runs, 1)
})

t.test('a forked worker whose trainer was killed before any worker opened is an orphan by what the kernel says of it: it starts no run', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN) // forked, never exec'd
  table.exit(200)
  table.orphan(201) // adopted by init, which runs another program
  t.equal(runs.noteOpen(201, 10).kind, 'orphan')
  t.equal(runs.noteOpen(table.thread(2011, 201), 20).kind, 'orphan', 'and so is a thread of it')
  table.add(300, 100, TRAIN)
  t.equal(runs.noteOpen(300, 30).kind, 'first', 'the next job is the first run')
  t.same([runs.stats().runs, runs.stats().exact, runs.stats().orphanOpens], [1, true, 2])
})

t.test('an adopted forked worker is an orphan even when init\'s executable cannot be read (a container): init is in another process group', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.hideProgram(1, 'init')
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  table.exit(200)
  table.orphan(201)
  t.equal(runs.noteOpen(201, 10).kind, 'orphan')
})

t.test('a forked worker whose trainer is alive is its trainer\'s: not when either renamed itself, nor when their executables cannot be read', async t => {
  const retitled = machine()
  retitled.add(200, 100, TRAIN)
  retitled.add(201, 200, TRAIN)
  retitled.retitle(201, ['python3: dataloader worker 0']) // setproctitle in worker_init_fn
  t.equal(trainerPid(findTrainer(retitled, 201)), 200, 'the worker renamed')
  const master = machine()
  master.add(200, 100, TRAIN)
  master.add(201, 200, TRAIN)
  master.retitle(200, ['python3: master']) // the parent renamed after the fork
  t.equal(trainerPid(findTrainer(master, 201)), 200, 'the parent renamed')
  const hidden = machine()
  hidden.add(200, 100, TRAIN)
  hidden.add(201, 200, TRAIN)
  hidden.add(202, 200, SPAWNED)
  // Another user's, to a daemon that is not root: only the names PyTorch gives them.
  hidden.hideProgram(200, 'pt_main_thread')
  hidden.hideProgram(201, 'pt_data_worker')
  hidden.hideProgram(202, 'pt_data_worker')
  t.equal(trainerPid(findTrainer(hidden, 201)), 200, 'neither executable readable: a forked worker')
  t.equal(trainerPid(findTrainer(hidden, 202)), 200, 'and a spawned one')
})

t.test('a worker whose trainer moved to a process group of its own after forking it is still the trainer\'s', async t => {
  const table = machine()
  table.add(150, 100, ['python3', 'launch.py'])
  table.add(200, 150, TRAIN) // started by the launcher: in its group
  table.add(201, 200, TRAIN)
  table.setsid(200) // after the fork
  table.retitle(201, ['python3: worker'])
  t.equal(trainerPid(findTrainer(table, 201)), 200)
})

t.test('a program that forked itself into the background and leads a session of its own is a trainer', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  table.add(201, 200, TRAIN)
  table.setsid(201)
  table.exit(200)
  table.orphan(201)
  t.equal(runs.noteOpen(201, 10).kind, 'first')
  table.add(202, 201, TRAIN) // its DataLoader worker
  t.equal(runs.noteOpen(202, 20).kind, 'same')
})

t.test('a trainer whose own parent exited (nohup, a shell closed) is still a trainer', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  t.equal(runs.noteOpen(200, 0).kind, 'first')
  table.exit(100)
  table.orphan(200)
  t.equal(runs.noteOpen(table.thread(2001, 200), 10).kind, 'same')
})

t.test('a zombie trainer has exited: the next job is a new run, not a concurrent one', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  runs.noteOpen(200, 0)
  table.zombie(200)
  table.add(300, 100, TRAIN)
  t.equal(runs.noteOpen(300, 10).kind, 'new')
  t.equal(runs.stats().exact, true)
})

t.test('a spawned child with a REDIRFS_RUN_ID of its own is a trainer of its own run (a sweep)', async t => {
  const table = machine()
  table.add(200, 100, TRAIN, PYTHON, { REDIRFS_RUN_ID: 'sweep' })
  table.add(201, 200, SPAWNED, PYTHON, { REDIRFS_RUN_ID: 'trial-1' })
  table.add(202, 201, SPAWNED, PYTHON, { REDIRFS_RUN_ID: 'trial-1' })
  t.equal((findTrainer(table, 202) as ProcessInfo).pid, 201, 'its workers stop at it')
  t.equal(runOf(table, table.info(201)!, 0).key, 'REDIRFS_RUN_ID trial-1')
})

t.test('a trainer is described by its program and script, never its arguments', async t => {
  const table = machine()
  table.add(200, 100, ['python3', 'train.py', '--api-key', 'secret'])
  t.equal(runOf(table, table.info(200)!, 0).description, 'pid 200 (python3 train.py)')
})

t.test('a thread is looked up once, and again when its id is reused', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  runs.noteOpen(200, 0)
  table.exit(200)
  // A new process with the same id (pids wrap): a new start time.
  table.processes.set(200, { pid: 200, parent: 100, startTime: 99_999, alive: true, program: PYTHON, commandLine: TRAIN })
  table.threads.set(200, 200)
  t.equal(runs.noteOpen(200, 500).kind, 'same', 'within a second the cache answers')
  t.equal(runs.noteOpen(200, 1500).kind, 'new', 'after that the start time is checked')
})

t.test('asked again as its answer is ready, an opener whose thread is gone is an orphan; unreadable or unasked, it stays unknown', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  table.add(200, 100, TRAIN)
  t.equal(runs.noteOpen(200, 0).kind, 'first')
  table.exit(200) // killed while its open waited on a load
  t.equal(runs.noteOpen(200, 500).kind, 'same', 'within a second the cache answers')
  t.equal(runs.noteOpen(200, 600, true).kind, 'orphan', 'a recheck looks at the thread now')
  t.equal(runs.stats().orphanOpens, 1)
  const unasked = new RunTracker(table)
  table.add(300, 100, TRAIN)
  unasked.noteOpen(300, 0)
  table.exit(300)
  t.equal(unasked.noteOpen(300, 1500).kind, 'same', 'the once-a-second check alone takes a vanished thread for unknown')
  const unreadable = new RunTracker(table)
  table.add(400, 100, TRAIN)
  unreadable.noteOpen(400, 0)
  table.exit(400)
  table.gone = () => false // /proc could not be read (EMFILE, another namespace): not known to be gone
  t.equal(unreadable.noteOpen(400, 600, true).kind, 'same', 'a thread that cannot be read is not taken for gone')
})

t.test('a job restarted under the same name while another job reads is that other job\'s neighbour, and its opens go on', async t => {
  const table = machine()
  const runs = new RunTracker(table)
  const env = { MASTER_ADDR: '127.0.0.1', MASTER_PORT: '29500', WORLD_SIZE: '1' }
  table.add(200, 100, TRAIN, PYTHON, env)
  t.equal(runs.noteOpen(200, 0).kind, 'first')
  table.add(300, 100, ['cat', 'x.jpg'], '/usr/bin/cat')
  t.equal(runs.noteOpen(300, 10).kind, 'concurrent')
  table.exit(200)
  table.add(210, 100, TRAIN, PYTHON, env)
  table.add(211, 210, SPAWNED)
  t.equal(runs.noteOpen(210, 20).kind, 'concurrent', 'the restart reads beside the other job')
  t.equal(runs.noteOpen(211, 30).kind, 'same', 'its worker belongs to it')
  t.equal(runs.noteOpen(211, 5000).kind, 'same', 'and still does when checked again')
  t.equal(runs.noteOpen(210, 5000).kind, 'same')
  t.equal(runs.stats().runs, 3)
})

t.test('a worker whose trainer is pid 1 (a container without an init) is the trainer\'s, not an orphan', async t => {
  const table = new FakeTable()
  table.add(1, 0, TRAIN)
  table.add(20, 1, SPAWNED)
  t.equal((findTrainer(table, 20) as ProcessInfo).pid, 1)
})

t.test('a worker of an interpreter replaced since, or started with another Python, is still its trainer\'s', async t => {
  const table = machine()
  table.add(200, 100, TRAIN, `${PYTHON} (deleted)`)
  table.add(201, 200, SPAWNED)
  table.add(300, 100, TRAIN, '/usr/bin/python3.11')
  table.add(301, 300, SPAWNED, '/opt/venv/bin/python3')
  t.equal((findTrainer(table, 201) as ProcessInfo).pid, 200)
  t.equal((findTrainer(table, 301) as ProcessInfo).pid, 300)
})
