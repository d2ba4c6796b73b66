// What the mount presents and refuses, on a real FUSE mount.
import { promises as fs, readdirSync, statSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset, sha1 } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { readEpoch, readFileAsTrainer } from '../helpers/readers'
import { changeAttempts } from '../helpers/read-only'

const dataset = generateDataset(2)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

function walk (root: string, relative = ''): string[] {
  return readdirSync(path.join(root, relative)).sort().flatMap(name => {
    const child = relative === '' ? name : `${relative}/${name}`
    return statSync(path.join(root, child)).isDirectory() ? [child + '/', ...walk(root, child)] : [child]
  })
}

t.test('the mount presents the source tree exactly: names, directories, sizes, modes, mtimes (to the millisecond fuse-native carries)', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  t.same(walk(mountpoint), walk(dataset.root))
  for (const relative of walk(dataset.root)) {
    const a = statSync(path.join(dataset.root, relative))
    const b = statSync(path.join(mountpoint, relative))
    t.same([b.size, b.mode, b.isDirectory()], [a.size, a.mode, a.isDirectory()], relative)
    t.ok(Math.abs(b.mtimeMs - a.mtimeMs) < 1, `${relative}: mtime`)
  }
})

t.test('non-sample files are served byte for byte', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', 'strict')
  for (const [relative, bytes] of dataset.others) {
    t.equal(sha1(await fs.readFile(path.join(mountpoint, relative))), sha1(bytes), relative)
  }
  const stats = await readStats(mountpoint)
  t.equal(stats.protocol.opens, 0, 'the zero-byte .jpg and the text files are not samples')
})

t.test('every change is refused with EROFS and the source stays unchanged', async t => {
  const before = walk(dataset.root).map(r => [r, r.endsWith('/') ? '' : sha1(require('node:fs').readFileSync(path.join(dataset.root, r)))])
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  for (const [what, attempt] of changeAttempts(mountpoint, dataset.samples[0], 'bee')) await t.rejects(attempt(), { code: 'EROFS' }, what)
  await t.rejects(fs.appendFile(path.join(mountpoint, 'README.txt'), 'x'), { code: 'EROFS' }, 'append to a non-sample')
  const after = walk(dataset.root).map(r => [r, r.endsWith('/') ? '' : sha1(require('node:fs').readFileSync(path.join(dataset.root, r)))])
  t.same(after, before)
})

t.test('stats are readable at .redirfs/stats, which the root listing does not show', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  t.notOk(readdirSync(mountpoint).includes('.redirfs'), 'ImageFolder must not see a .redirfs class')
  await readEpoch(mountpoint, dataset.samples.slice(0, 50), 1)
  const stats = await readStats(mountpoint)
  t.equal(stats.protocol.opens, 50)
  t.equal(stats.layout.samples, dataset.samples.length)
  t.equal(stats.layout.groups, new Set(dataset.samples.map(p => path.dirname(p))).size, 'one group per directory holding samples')
  t.equal(stats.layout.grouping, 'the directory holding each sample')
  t.same(stats.layout.someGroups, ['ant', 'eel/nested/deeper', 'ibis', 'löwe 猫/sub dir'], 'a few names spread over the sorted groups')
  t.equal(stats.dataset, dataset.root)
  // What 50 opens of a fresh mount must have done: every open either hit memory or waited; loads brought files.
  const p = stats.protocol
  t.equal(p.memoryHits + p.waitedOpens, 50, 'every open was a memory hit or waited for a load')
  t.ok(p.chunkLoads > 0 && p.filesLoaded >= p.chunkLoads, 'chunks were loaded, each bringing files')
  t.ok(p.redirects <= 50, 'redirects are a share of opens')
  t.equal(p.rollovers, 0, 'no epoch ended within the first 50 opens')
  t.equal(p.wastedBytes === 0, p.wastedFiles === 0, 'wasted bytes and files agree')
})

t.test('an open stats handle reports the size of its own snapshot, even after the counters change', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const handle = await fs.open(path.join(mountpoint, '.redirfs', 'stats'), 'r')
  t.teardown(async () => { await handle.close() })
  await readEpoch(mountpoint, dataset.samples.slice(0, 50), 2)
  const { size } = await handle.stat()
  const text = (await handle.readFile()).toString()
  t.equal(size, Buffer.byteLength(text))
  t.equal(JSON.parse(text).protocol.opens, 0, 'the snapshot taken at open')
})

t.test('--include shows only the listed samples, and serves only them', async t => {
  const subset = dataset.samples.filter((_, i) => i % 3 === 0)
  const list = path.join(emptyDir('redirfs-list-'), 'subset.txt')
  await fs.writeFile(list, subset.join('\n') + '\n')
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--include', list)
  const shown = walk(mountpoint).filter(r => dataset.samples.includes(r))
  t.same(shown, subset)
  for (let epoch = 0; epoch < 2; epoch++) {
    const read = await readEpoch(mountpoint, subset, epoch)
    t.same(read.map(r => dataset.byContent.get(r.content)).sort(), subset, `epoch ${epoch}: exactly the subset`)
  }
})

t.test('an unreadable sample fails its open with EIO; the rest are still served', async t => {
  const broken = generateDataset(3)
  t.teardown(async () => { await fs.rm(broken.root, { recursive: true, force: true }) })
  const victim = broken.samples.find(s => s.startsWith('cat/'))!
  const mountpoint = emptyDir()
  await mount(t, broken.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', 'off')
  // Root reads anything mode 000, so make the file vanish from under the daemon instead.
  await fs.rename(path.join(broken.root, victim), path.join(broken.root, victim + '.moved'))
  await t.rejects(fs.readFile(path.join(mountpoint, victim)), { code: 'EIO' })
  const others = broken.samples.filter(s => s !== victim)
  const read = await readEpoch(mountpoint, others, 5)
  t.equal(read.filter(r => broken.byContent.get(r.content) !== r.opened).length, 0, 'every other sample is intact')
  const stats = await readStats(mountpoint)
  t.ok(Number(stats.source.readErrors) >= 1)
})

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: a sample that vanishes from the directory fails one open per epoch with EIO; every other sample is served once, labels right`, async t => {
    const broken = generateDataset(4)
    t.teardown(async () => { await fs.rm(broken.root, { recursive: true, force: true }) })
    const victim = broken.samples.find(s => s.startsWith('cat/'))!
    const mountpoint = emptyDir()
    await mount(t, broken.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', mode)
    await fs.rename(path.join(broken.root, victim), path.join(broken.root, victim + '.moved'))
    for (let epoch = 0; epoch < 2; epoch++) {
      const results = await Promise.allSettled(broken.samples.map(async relative => await readFileAsTrainer(mountpoint, relative)))
      const failed = results.filter(r => r.status === 'rejected')
      t.equal(failed.length, 1, `epoch ${epoch}: one open fails`)
      t.ok(failed.every(r => (r.reason as NodeJS.ErrnoException).code === 'EIO'), 'with EIO')
      const served = results.flatMap(r => (r.status === 'fulfilled' ? [r.value] : []))
      t.equal(served.filter(r => classOf(broken.byContent.get(r.content) ?? '?') !== classOf(r.opened)).length, 0, `epoch ${epoch}: labels right`)
      t.same(served.map(r => broken.byContent.get(r.content)).sort(), broken.samples.filter(s => s !== victim), `epoch ${epoch}: every other sample once`)
    }
  })
}

t.test('--extensions decides what is a sample: other files are served as they are, never redirected', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--extensions', 'png')
  const pngs = dataset.samples.filter(s => s.endsWith('.png'))
  const stats = await readStats(mountpoint)
  t.equal(stats.layout.samples, pngs.length, 'only the .png files are samples')
  for (const relative of dataset.samples.filter(s => !s.endsWith('.png')).slice(0, 20)) {
    t.equal(dataset.byContent.get((await readFileAsTrainer(mountpoint, relative)).content), relative, `${relative}: its own bytes`)
  }
  t.equal((await readStats(mountpoint)).protocol.opens, 0, 'no sample open for them')
})

t.test('a file with a sample extension at the top of the mount is served as it is, not as a sample', async t => {
  const rooted = generateDataset(5)
  t.teardown(async () => { await fs.rm(rooted.root, { recursive: true, force: true }) })
  const cover = Buffer.from('a picture of the whole dataset, not of one class')
  await fs.writeFile(path.join(rooted.root, 'cover.jpg'), cover)
  const mountpoint = emptyDir()
  await mount(t, rooted.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', 'pool')
  for (let i = 0; i < 3; i++) t.equal(sha1(await fs.readFile(path.join(mountpoint, 'cover.jpg'))), sha1(cover), `read ${i}: its own bytes`)
  const stats = await readStats(mountpoint)
  t.equal(stats.layout.samples, rooted.samples.length)
  t.equal(stats.protocol.opens, 0)
})
