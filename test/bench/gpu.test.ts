// bench/gpu.py, the GPU trainer bench, run small on the CPU: its check
// of every batch (each sample once per epoch, with the label its bytes
// were made for) holds through a real redirfs mount as on the raw
// directory, and the run leaves nothing mounted. Its figures are the
// bench's; this checks only what it checks and counts.
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
/** Debian's, which has PyTorch and Pillow (the pyenv Python first on PATH has neither). */
const PYTHON = '/usr/bin/python3'

const run = promisify(execFile)
const SCRIPT = path.join(__dirname, '..', '..', 'bench', 'gpu.py')

interface Epoch { samples: number, exact: boolean, partial: boolean, labelMismatches: number, missing: number, duplicates: number }
interface Job { name: string, loader: string, status: number, epochs: Epoch[], redirfsSummary?: string }

t.test('every epoch through the mount delivers each sample once with its own label, as the raw directory does', async t => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-gpu-bench-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const work = path.join(dir, 'work')
  const args = [SCRIPT, '--device', 'cpu', '--model', 'tiny', '--classes', '3', '--files', '60', '--gen-workers', '2', '--workers', '1', '--batch-size', '8',
    '--epochs', '2', '--conditions', 'warm', '--no-synthetic', '--data', path.join(dir, 'data'), '--work', work, '--out', path.join(dir, 'out'),
    '--budget', '600', '--redirfs-args=--chunk-size 4']
  await run(PYTHON, args, { timeout: 700_000 })
  const results = JSON.parse(readFileSync(path.join(dir, 'out', 'results.json'), 'utf8')) as { jobs: Job[] }
  t.same(results.jobs.map(job => [job.loader, job.status]), [['pytorch', 0], ['redirfs', 0]])
  for (const job of results.jobs) {
    t.equal(job.epochs.length, 2, `${job.name}: both epochs`)
    for (const epoch of job.epochs) t.match(epoch, { samples: 60, exact: true, partial: false, labelMismatches: 0, missing: 0, duplicates: 0 }, `${job.name}: exact`)
  }
  t.match(results.jobs[1].redirfsSummary, /^120 opens, .* [1-9]\d* redirects, .* 0 failed; runs 1$/, 'the mount redirected, and no open failed')
  t.notOk(readFileSync('/proc/mounts', 'utf8').includes(work), 'nothing left mounted')
})
