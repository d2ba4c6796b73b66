// The daemon keeps to its --memory budget on a real mount: over many epochs
// its peak RSS (VmHWM) stays within the budget plus the overhead the README
// states, for a directory and for a pack. Samples are large (100 KiB) so
// that bytes kept past their release would show within a few epochs.
import { rmSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { emptyDir, mount, redirfs } from '../helpers/mount'
import { largeSampleTree, MiB, overheadBytes, peakRss } from '../helpers/memory'
import { readEpoch } from '../helpers/readers'

const { root, samples, bytes: datasetBytes } = largeSampleTree('redirfs-big-')
t.teardown(() => { rmSync(root, { recursive: true, force: true }) })

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
    // Lent and idle, the buffers stay within the budget plus their capacities' rounding (at most an eighth).
    t.ok(stats.memory.sampleBufferBytes > 0 && stats.memory.sampleBufferBytes <= budget * 1.125, `sample buffers ${stats.memory.sampleBufferBytes} bytes`)
    t.ok(stats.memory.idleSampleBufferBytes <= stats.memory.sampleBufferBytes)
    const bound = budget + overheadBytes(samples.length)
    t.ok(peakRss(pid) <= bound, `peak RSS ${(peakRss(pid) / MiB).toFixed(0)} MiB ≤ ${(bound / MiB).toFixed(0)} MiB, having read ${(12 * datasetBytes / MiB).toFixed(0)} MiB of samples`)
  })
}
