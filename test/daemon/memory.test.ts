// The daemon keeps to its --memory budget on a real mount: over many epochs
// its peak RSS (VmHWM) stays within the budget plus the overhead the README
// states, for a directory and for a pack. Samples are large (100 KiB) so
// that bytes kept past their release would show within a few epochs.
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { emptyDir, mount, redirfs } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const MiB = 2 ** 20
/** The README's bound: the budget, plus the runtime (Node, and the JS heap V8 may fill before it collects), plus the tree per file. */
const overheadBytes = (files: number): number => 160 * MiB + 1536 * files

const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-big-'))
t.teardown(() => { rmSync(root, { recursive: true, force: true }) })
const samples: string[] = []
for (let c = 0; c < 4; c++) {
  mkdirSync(path.join(root, `class${c}`))
  for (let i = 0; i < 60; i++) {
    const relative = `class${c}/img${i}.jpg`
    writeFileSync(path.join(root, relative), Buffer.alloc(100 * 1024, c * 64 + (i % 64)))
    samples.push(relative)
  }
}
const datasetBytes = samples.length * 100 * 1024

const peakRss = (pid: number): number => Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmHWM:\s+(\d+) kB/)![1]) * 1024

for (const source of ['directory', 'pack'] as const) {
  t.test(`${source}: 12 epochs with 8 readers keep the daemon's peak RSS within --memory plus the stated overhead`, async t => {
    let mounted = root
    if (source === 'pack') {
      const work = emptyDir('redirfs-big-pack-')
      t.teardown(() => { rmSync(work, { recursive: true, force: true }) })
      mounted = path.join(work, 'pack')
      const packed = await redirfs('pack', root, mounted, '--chunk-size', '8')
      t.equal(packed.code, 0, packed.stderr)
    }
    const budget = 4 * MiB // a sixth of the dataset
    const mountpoint = emptyDir()
    await mount(t, mounted, mountpoint, '--memory', String(budget), ...(source === 'directory' ? ['--chunk-size', '8'] : []))
    const { pid } = await readStats(mountpoint)
    for (let epoch = 0; epoch < 12; epoch++) await readEpoch(mountpoint, samples, epoch)
    const stats = await readStats(mountpoint)
    t.ok(stats.protocol.peakResidentBytes <= budget, `samples in memory peaked at ${stats.protocol.peakResidentBytes} of ${budget} bytes`)
    const bound = budget + overheadBytes(samples.length)
    t.ok(peakRss(pid) <= bound, `peak RSS ${(peakRss(pid) / MiB).toFixed(0)} MiB ≤ ${(bound / MiB).toFixed(0)} MiB, having read ${(12 * datasetBytes / MiB).toFixed(0)} MiB of samples`)
  })
}
