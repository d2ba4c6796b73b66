// bench/rpc-cost.js, the RPC layer alone: it moves every sample it asks
// for through redirfs's real peer server and client (two processes on
// loopback) and reports each end's CPU per sample. Its figures are the
// bench's; this checks only what it counts.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'

const run = promisify(execFile)
const SCRIPT = path.join(__dirname, '..', '..', 'bench', 'rpc-cost.js')

t.test('every call brings back the samples it asked for, and both ends report their CPU per sample', async t => {
  const { stdout } = await run('node', [SCRIPT, '--sample-bytes', '5000', '--per-call', '3', '--calls', '40', '--concurrency', '2'], { timeout: 60_000 })
  const report = JSON.parse(stdout.trim().split('\n').at(-1) as string)
  t.match(report, { sampleBytes: 5000, samplesPerCall: 3, calls: 40, concurrency: 2, samples: 120 })
  t.ok(report.senderCpuMicrosecondsPerSample > 0, 'the sending process reports its CPU')
  t.ok(report.receiverCpuMicrosecondsPerSample > 0, 'the receiving process reports its CPU')
})

t.test('a bad option is refused with a message, not a hang', async t => {
  const failed = await run('node', [SCRIPT, '--per-call', 'many'], { timeout: 30_000 }).then(() => undefined, (err: { code: number, stderr: string }) => err)
  t.equal(failed?.code, 1)
  t.match(failed?.stderr, /rpc-cost: --per-call must be/)
})
