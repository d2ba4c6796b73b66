// The source changing under a live mount: the tree is a snapshot, so a
// sample whose size or modification time changed is an EIO for exactly the
// open that would have been given it (counted), never short or different
// bytes; a non-sample passes through as the source has it now.
import { appendFileSync, promises as fs, truncateSync, utimesSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset, sha1 } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { epochBoundary, readFileAsTrainer } from '../helpers/readers'

for (const backend of ['native', 'fuse-native']) {
  t.test(`${backend}: a non-sample that grew is served whole, with its new size`, async t => {
    const dataset = generateDataset(11)
    t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
    const mountpoint = emptyDir()
    await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--fuse-backend', backend)
    const file = 'cat/labels.csv'
    t.equal((await fs.readFile(path.join(mountpoint, file))).length, dataset.others.get(file)!.length, 'as scanned')
    appendFileSync(path.join(dataset.root, file), '2,cat\n3,cat\n')
    const now = await fs.readFile(path.join(dataset.root, file))
    const served = await fs.readFile(path.join(mountpoint, file))
    t.equal(sha1(served), sha1(now), 'the bytes the source has now')
    t.equal((await fs.stat(path.join(mountpoint, file))).size, now.length, 'and its size')
    t.equal((await readStats(mountpoint)).fs.changedOthers, 1, 'counted')
  })
}

t.test('samples truncated or rewritten under the mount fail with EIO, once each, and every other sample comes once', async t => {
  const dataset = generateDataset(12)
  t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const truncated = dataset.samples[5]
  const rewritten = dataset.samples[40]
  const original = await fs.readFile(path.join(dataset.root, rewritten))
  truncateSync(path.join(dataset.root, truncated), 10)
  // The same length, other bytes, a later modification time.
  writeFileSync(path.join(dataset.root, rewritten), Buffer.from(original).fill(0x55, 0, 16))
  utimesSync(path.join(dataset.root, rewritten), new Date(), new Date(Date.now() + 5000))
  const changed = new Set([sha1(original), ...[...dataset.byContent.entries()].filter(([, p]) => p === truncated).map(([h]) => h)])
  await epochBoundary()
  const got: string[] = []
  const failures: string[] = []
  for (const sample of dataset.samples) {
    try {
      got.push((await readFileAsTrainer(mountpoint, sample)).content)
    } catch (err) {
      failures.push((err as NodeJS.ErrnoException).code ?? String(err))
    }
  }
  t.same(failures, ['EIO', 'EIO'], 'exactly two opens failed, with EIO')
  t.equal(new Set(got).size, got.length, 'no sample twice')
  t.ok(got.every(content => dataset.byContent.has(content) && !changed.has(content)), 'every byte served is a sample as scanned, unchanged')
  t.equal(got.length, dataset.samples.length - 2)
  const stats = await readStats(mountpoint)
  t.equal(stats.source.changedFiles, 2, 'counted as changed')
  t.equal(stats.protocol.failedOpens, 2)
})
