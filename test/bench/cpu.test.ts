// Where the bench says the CPU went (bench/cpu.py): a real process's
// threads, sampled while they spin, and the machine around them.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const run = promisify(execFile)
const BENCH = path.join(__dirname, '..', '..', 'bench')

/** A process whose main thread and one other thread each spin for a while, then wait to be told to go. */
const SPINNER = `
import sys, threading, time
def spin(seconds):
    until = time.time() + seconds
    while time.time() < until: pass
hold = threading.Event()
worker = threading.Thread(target=lambda: (spin(0.4), hold.wait()))
worker.start()
spin(0.4)
worker.join(0.5)
print('spun', flush=True)
sys.stdin.read()
hold.set()
`

async function sampleSpinner (): Promise<any> {
  const script = `
import json, subprocess, sys, time
sys.path.insert(0, ${JSON.stringify(BENCH)})
import cpu
child = subprocess.Popen([sys.executable, '-c', ${JSON.stringify(SPINNER)}], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
try:
    with cpu.Sampler([child.pid]) as sampler:
        start = time.time()
        child.stdout.readline()
        end = time.time()
        total = cpu.cpu_seconds(child.pid)
    kinds = {child.pid: cpu.thread_kinds(child.pid, cpu.thread_cpu(child.pid))}
    window = sampler.window(start, end, 1000, kinds)
finally:
    child.stdin.close()
    child.wait()
print(json.dumps({"window": window, "timeline": sampler.timeline(start, end, 0.2), "totalMicrosecondsPerSample": total * 1e6 / 1000, "tick": 1e6 / cpu.TICK / 1000}))
`
  const { stdout } = await run('/usr/bin/python3', ['-c', script])
  return JSON.parse(stdout)
}

t.test('a process\'s CPU over a window is split into its main thread and its other threads', async t => {
  const { window, totalMicrosecondsPerSample, tick } = await sampleSpinner()
  const split = window.daemonsMicrosecondsPerSample
  t.ok(split.main > 0, 'the spinning main thread')
  t.ok(split.other > 0, 'the spinning worker thread')
  t.equal(split.fuse, 0, 'no thread of it waits on /dev/fuse')
  // The window starts with the process already running: it holds at most what the process spent in all.
  t.ok(split.main + split.other <= totalMicrosecondsPerSample + 2 * tick)
})

t.test('the machine\'s busy CPU over the window holds the process\'s, and the rest is the difference', async t => {
  const { window, tick } = await sampleSpinner()
  const servers = Object.values(window.daemonsMicrosecondsPerSample as Record<string, number>).reduce((a, b) => a + b, 0)
  t.ok(window.machineMicrosecondsPerSample + 4 * tick >= servers, 'the machine spent at least what the process did')
  t.ok(Math.abs(window.restMicrosecondsPerSample - (window.machineMicrosecondsPerSample - servers)) < 1e-6)
  t.ok(window.coresBusy > 0 && window.coresBusy <= 1.05, 'a share of the cores')
  t.equal(window.cores, (await import('node:os')).cpus().length)
})

t.test('the timeline covers the window in steps, each with the device\'s MB/s and the cores\' busy share', async t => {
  const { timeline } = await sampleSpinner()
  t.ok(timeline.length >= 2, `${timeline.length} steps`)
  t.same(timeline.map((point: number[]) => point[0]), timeline.map((_: number[], i: number) => Math.round(i * 0.2 * 100) / 100), 'one point per step from the start')
  t.ok(timeline.every((point: number[]) => point[1] === 0), 'no device was given: no bytes')
  t.ok(timeline.every((point: number[]) => point[2] >= 0 && point[2] <= 1.05), 'a share of the cores')
})

t.test('the disk\'s idle time is the steps under a tenth of the profile\'s bandwidth', async t => {
  const script = `
import json, sys
sys.path.insert(0, ${JSON.stringify(BENCH)})
import run
cpu = {"seconds": 2.0, "timeline": [[0.0, 190.0, 0.5], [0.5, 19.0, 0.9], [1.0, 21.0, 0.9], [1.5, 0.0, 1.0]]}
print(json.dumps([run.idle_seconds(cpu, 200e6), run.idle_seconds(cpu, 0), run.idle_seconds({"seconds": 1.0}, 200e6)]))
`
  const { stdout } = await run('/usr/bin/python3', ['-c', script])
  t.same(JSON.parse(stdout), ['1.0 s of 2.0 s', '-', '-'], 'two half-seconds under 20 MB/s; none without a throttle or a timeline')
})
