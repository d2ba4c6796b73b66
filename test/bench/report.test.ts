// The bench report's table of where each loader's CPU went (bench/run.py,
// cpu_table): what a sample cost the trainer and the daemon, and how long
// the cores idled at an epoch's start, from the windows bench/cpu.py
// measures.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const run = promisify(execFile)
const BENCH = path.join(__dirname, '..', '..', 'bench')

function window (machine: number, daemon: { fuse: number, main: number, other: number }): object {
  const spent = daemon.fuse + daemon.main + daemon.other
  return { seconds: 10, coresBusy: 0.9, cores: 2, machineMicrosecondsPerSample: machine, daemonsMicrosecondsPerSample: daemon, restMicrosecondsPerSample: machine - spent, deviceBytesPerSecond: 0 }
}

/** Calls a function of bench/run.py with JSON arguments. */
async function callRun (name: string, ...args: unknown[]): Promise<any> {
  const script = `
import json, sys
sys.path.insert(0, ${JSON.stringify(BENCH)})
import run
print(json.dumps(getattr(run, sys.argv[1])(*json.loads(sys.argv[2]))))
`
  const { stdout } = await run('/usr/bin/python3', ['-c', script, name, JSON.stringify(args)])
  return JSON.parse(stdout)
}

const cpuTable = async (rows: object[]): Promise<string[]> => await callRun('cpu_table', rows)

t.test('each measured loader gets a row: cores busy, all processes, the trainer, and the daemon by thread', async t => {
  const lines = await cpuTable([
    { loader: 'noio', cpu: window(2000, { fuse: 0, main: 0, other: 0 }) },
    { loader: 'pack-pool', cpu: window(2400, { fuse: 110, main: 40, other: 30 }) },
    { loader: 'ffcv' } // measured without a window: no row
  ])
  t.same(lines.filter(line => line.startsWith('| noio') || line.startsWith('| pack-pool') || line.startsWith('| ffcv')), [
    '| noio | 90% | - | 2000 | 2000 | - | - | - |',
    '| pack-pool | 90% | - | 2400 | 2220 | 110 | 40 | 30 |'
  ])
})

t.test('no loader measured: no table', async t => {
  t.same(await cpuTable([{ loader: 'pytorch' }]), [])
})

t.test('cores idle at an epoch\'s start: from each measured epoch\'s start to the first half-second the cores were 80% busy', async t => {
  // Two epochs of 3 s; the first starts busy, the second (at 3.2 s) leaves the cores idle until 4.5 s.
  const timeline = [[0, 0, 0.9], [0.5, 0, 1], [1, 0, 1], [1.5, 0, 1], [2, 0, 1], [2.5, 0, 1], [3, 200, 0.3], [3.5, 200, 0.1], [4, 200, 0.2], [4.5, 0, 0.95], [5, 0, 1], [5.5, 0, 1]]
  t.equal(await callRun('epoch_start_stall', { seconds: 6, timeline, epochEnds: [3.2, 6] }), (0 + (4.5 - 3.2)) / 2)
  t.equal(await callRun('epoch_start_stall', { seconds: 6, timeline: timeline.map(([at, mb]) => [at, mb, 0.1]), epochEnds: [3.2, 6] }), (6 + (6 - 3.2)) / 2, 'never busy: the rest of the window')
  t.equal(await callRun('epoch_start_stall', { seconds: 6 }), null, 'no timeline: nothing to say')
})
