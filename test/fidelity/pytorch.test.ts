// Unmodified torchvision ImageFolder + DataLoader over real mounts: every
// (sample, label) pair right, every sample exactly once per epoch, with
// worker processes, persistent workers, DistributedSampler over 2 ranks,
// and the loaders users actually use.
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { emptyDir, mount } from '../helpers/mount'

const run = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const READER = path.join(__dirname, 'torch_reader.py')
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-torch-'))
const data = path.join(work, 'data')
const table = path.join(work, 'table.json')
t.teardown(() => rmSync(work, { recursive: true, force: true }))

interface ReaderReport { samples: number, epochs: { received: string[], wrongLabels: number }[] }

async function readMount (mountpoint: string, ...args: string[]): Promise<ReaderReport> {
  const { stdout } = await run(PYTHON, [READER, 'read', mountpoint, table, ...args], { timeout: 300_000, maxBuffer: 64 * 2 ** 20 })
  return JSON.parse(stdout.trim().split('\n').pop()!)
}

const everyIdentity = (): string[] => Object.keys(JSON.parse(readFileSync(table, 'utf8'))).sort()

function checkEpochs (t: Tap.Test, epochs: { received: string[], wrongLabels: number }[]): void {
  epochs.forEach((epoch, e) => {
    t.equal(epoch.wrongLabels, 0, `epoch ${e}: no wrong label`)
    t.same([...epoch.received].sort(), everyIdentity(), `epoch ${e}: every sample exactly once`)
  })
}

async function freshMount (t: Tap.Test, mode: string): Promise<string> {
  const mountpoint = emptyDir()
  // About 40% of the ~460 KB dataset (its ~15 groups need one chunk each), so redirection has work to do.
  await mount(t, data, mountpoint, '--memory', '200K', '--chunk-size', '4', '--redirect', mode, '--seed', '1')
  return mountpoint
}

t.before(async () => {
  mkdirSync(data)
  await run(PYTHON, [READER, 'generate', data])
})

for (const mode of ['strict', 'pool']) {
  t.test(`${mode}: ImageFolder + DataLoader(shuffle, 4 workers), 3 epochs`, async t => {
    const report = await readMount(await freshMount(t, mode), '--workers', '4', '--epochs', '3')
    t.equal(report.epochs.length, 3)
    checkEpochs(t, report.epochs)
  })

  t.test(`${mode}: persistent_workers=True, 3 epochs`, async t => {
    const report = await readMount(await freshMount(t, mode), '--workers', '4', '--epochs', '3', '--persistent')
    checkEpochs(t, report.epochs)
  })

  t.test(`${mode}: DistributedSampler over 2 ranks reading one mount: the union is every sample once per epoch`, async t => {
    const mountpoint = await freshMount(t, mode)
    const port = String(29500 + Math.floor(Math.random() * 1000))
    const ranks = await Promise.all([0, 1].map(async rank =>
      await readMount(mountpoint, '--workers', '2', '--epochs', '3', '--world', '2', '--rank', String(rank), '--port', port)))
    for (let e = 0; e < 3; e++) {
      t.equal(ranks[0].epochs[e].wrongLabels + ranks[1].epochs[e].wrongLabels, 0, `epoch ${e}: no wrong label on either rank`)
      t.same([...ranks[0].epochs[e].received, ...ranks[1].epochs[e].received].sort(), everyIdentity(), `epoch ${e}: union is every sample once`)
    }
  })
}

for (const loader of ['cv2decode', 'numpy']) {
  t.test(`loader ${loader} works under redirection (pool, 2 epochs)`, async t => {
    const report = await readMount(await freshMount(t, 'pool'), '--loader', loader, '--workers', '2', '--epochs', '2')
    checkEpochs(t, report.epochs)
  })
}

t.test('cv2.imread is unsupported under redirection: it opens every file twice, so labels stay right but each open is a sample', async t => {
  const mountpoint = await freshMount(t, 'pool')
  const report = await readMount(mountpoint, '--loader', 'cv2', '--workers', '0', '--epochs', '1')
  t.equal(report.epochs[0].wrongLabels, 0, 'labels are still right')
  const stats = await readStats(mountpoint)
  t.equal(stats.protocol.opens, 2 * report.samples, 'two opens per imread')
  t.ok(new Set(report.epochs[0].received).size < report.samples, 'so the epoch misses samples that the format probe consumed')
})

t.test('torchvision.io.read_file is unsupported under redirection (it maps stat(path) bytes) and works with --redirect off', async t => {
  await t.rejects(readMount(await freshMount(t, 'pool'), '--loader', 'tvio', '--workers', '0', '--epochs', '1'),
    /size is smaller than the required mapping size|Unsupported image|decode|corrupt/i)
  const report = await readMount(await freshMount(t, 'off'), '--loader', 'tvio', '--workers', '0', '--epochs', '2')
  checkEpochs(t, report.epochs)
})
