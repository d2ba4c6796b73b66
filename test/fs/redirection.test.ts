// Real FUSE mounts of a generated dataset, read by 8 concurrent readers
// for 3 epochs: labels stay right and every sample comes once per epoch.
import { promises as fs } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset, sha1 } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const dataset = generateDataset(1)
t.teardown(() => { require('node:fs').rmSync(dataset.root, { recursive: true, force: true }) })

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: 3 epochs, 8 readers: every content is of the opened path's class, each sample exactly once per epoch`, async t => {
    const mountpoint = emptyDir()
    // ~25% of the dataset, K = 4: several chunks per virtual chunk, so redirection must happen.
    await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', mode, '--seed', '3')
    for (let epoch = 0; epoch < 3; epoch++) {
      const read = await readEpoch(mountpoint, dataset.samples, 100 + epoch)
      const served = read.map(r => dataset.byContent.get(r.content))
      t.equal(served.filter(s => s === undefined).length, 0, `epoch ${epoch}: every read is a whole sample of the dataset`)
      t.equal(read.filter((r, i) => classOf(served[i]!) !== classOf(r.opened)).length, 0, `epoch ${epoch}: no wrong label`)
      t.same([...served].sort(), dataset.samples, `epoch ${epoch}: the served multiset is the dataset`)
      t.equal(read.filter(r => r.statSize !== r.length).length, 0, `epoch ${epoch}: fstat on a handle reports the size of the bytes it serves`)
    }
    const stats = await readStats(mountpoint)
    t.equal(stats.protocol.opens, 3 * dataset.samples.length)
    t.ok(stats.protocol.redirects > 0, 'redirection happened')
    t.ok(stats.protocol.chunkLoads < stats.protocol.opens, 'chunk loads are fewer than opens')
    t.equal(stats.fs.openHandles, 0, 'every handle was released')
  })
}

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: a reader still reading a sample while the rest of the dataset is read and released gets its whole bytes`, async t => {
    const mountpoint = emptyDir()
    await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', mode, '--seed', '5')
    const held = dataset.samples.find(p => classOf(p) === 'cat')!
    const handle = await fs.open(path.join(mountpoint, held), 'r')
    t.teardown(async () => { await handle.close().catch(() => {}) })
    const head = Buffer.alloc(100)
    await handle.read(head, 0, head.length, 0)
    // Every other sample, twice: the held file's chunk is long consumed, released and loaded again.
    const others = dataset.samples.filter(p => p !== held)
    for (let epoch = 0; epoch < 2; epoch++) await readEpoch(mountpoint, others, 40 + epoch)
    const { size } = await handle.stat()
    const rest = Buffer.alloc(size)
    const { bytesRead } = await handle.read(rest, 0, size, 0)
    const whole = dataset.byContent.get(sha1(rest.subarray(0, bytesRead)))
    t.ok(whole !== undefined, 'still a whole sample')
    t.equal(classOf(whole!), 'cat', 'of the opened path\'s class')
    t.same(rest.subarray(0, head.length), head, 'the same bytes it began reading')
  })
}

t.test('off: every open returns the exact bytes of the opened file', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', 'off')
  for (let epoch = 0; epoch < 2; epoch++) {
    const read = await readEpoch(mountpoint, dataset.samples, 7 + epoch)
    t.equal(read.filter(r => dataset.byContent.get(r.content) !== r.opened).length, 0, `epoch ${epoch}: all exact`)
  }
  const stats = await readStats(mountpoint)
  t.equal(stats.protocol.redirects, 0)
  t.ok(stats.protocol.memoryHits > 0, 'chunks brought files in before they were opened')
})
