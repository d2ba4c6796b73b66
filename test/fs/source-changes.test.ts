// The source changing under a live mount: the tree is a snapshot, so a
// sample whose size or modification time changed is an EIO for exactly the
// open that would have been given it (counted), never short or different
// bytes; a non-sample passes through as the source has it now.
import { execFileSync } from 'node:child_process'
import { appendFileSync, promises as fs, symlinkSync, truncateSync, utimesSync, writeFileSync } from 'node:fs'
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

/** Reads every sample as a trainer would: the contents served, and the error codes of the opens that failed. */
async function readAll (mountpoint: string, samples: readonly string[]): Promise<{ got: string[], failures: string[] }> {
  const got: string[] = []
  const failures: string[] = []
  for (const sample of samples) {
    try {
      got.push((await readFileAsTrainer(mountpoint, sample)).content)
    } catch (err) {
      failures.push((err as NodeJS.ErrnoException).code ?? String(err))
    }
  }
  return { got, failures }
}

t.test('a sample swapped for a link to another file after the mount is never read through it', async t => {
  const dataset = generateDataset(13)
  const secret = emptyDir('redirfs-secret-')
  t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }); await fs.rm(secret, { recursive: true, force: true }) })
  writeFileSync(path.join(secret, 'key.jpg'), 'a private key, 0600 in a 0700 directory')
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const swapped = path.join(dataset.root, dataset.samples[7])
  const key = path.join(secret, 'key.jpg')
  // The same size and modification time (to the nanosecond) as the sample it replaces: only its identity differs.
  await fs.truncate(key, (await fs.stat(swapped)).size)
  execFileSync('touch', ['-r', swapped, key])
  await fs.rm(swapped)
  symlinkSync(key, swapped)
  await epochBoundary()
  const { got, failures } = await readAll(mountpoint, dataset.samples)
  t.same(failures, ['EIO'], 'the one open it would have answered fails')
  t.ok(got.every(content => dataset.byContent.has(content)), 'every byte served is a sample as scanned')
  t.equal((await readStats(mountpoint)).source.changedFiles, 1)
})

t.test('a sample replaced by a FIFO fails its open instead of hanging the mount', async t => {
  const dataset = generateDataset(14)
  t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const replaced = path.join(dataset.root, dataset.samples[3])
  await fs.rm(replaced)
  execFileSync('mkfifo', [replaced])
  await epochBoundary()
  const { got, failures } = await readAll(mountpoint, dataset.samples)
  t.same(failures, ['EIO'])
  t.equal(got.length, dataset.samples.length - 1, 'every other sample is served')
})
