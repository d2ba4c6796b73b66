// What the mount presents and refuses, on a real FUSE mount.
import { promises as fs, constants, readdirSync, statSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset, sha1 } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

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
  const sample = path.join(mountpoint, dataset.samples[0])
  const attempts: [string, () => Promise<unknown>][] = [
    ['write to a sample', async () => await fs.writeFile(sample, 'x')],
    ['open a sample read-write', async () => await fs.open(sample, 'r+')],
    ['append', async () => await fs.appendFile(path.join(mountpoint, 'README.txt'), 'x')],
    ['create', async () => await fs.writeFile(path.join(mountpoint, 'cat', 'new.jpg'), 'x')],
    ['mkdir', async () => await fs.mkdir(path.join(mountpoint, 'newclass'))],
    ['unlink', async () => await fs.unlink(sample)],
    ['rmdir', async () => await fs.rmdir(path.join(mountpoint, 'bee'))],
    ['rename', async () => await fs.rename(sample, sample + '.bak')],
    ['chmod', async () => await fs.chmod(sample, 0o777)],
    ['truncate', async () => await fs.truncate(sample, 0)],
    ['symlink', async () => await fs.symlink('cat', path.join(mountpoint, 'link'))],
    ['utimes', async () => await fs.utimes(sample, new Date(), new Date())]
  ]
  for (const [what, attempt] of attempts) await t.rejects(attempt(), { code: 'EROFS' }, what)
  await t.rejects(fs.access(sample, constants.W_OK), { code: 'EROFS' }, 'access(W_OK)')
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
  t.ok(stats.source.readErrors >= 1)
})
