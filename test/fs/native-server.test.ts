// What only the native FUSE server does: the kernel caches entries and
// attributes of directories and non-samples (so a second stat never reaches
// the daemon), non-samples can be mmap'd, and many readers of one sample
// path each get a whole sample of its class.
import { execFile } from 'node:child_process'
import { promises as fs, statSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { readFileAsTrainer } from '../helpers/readers'

const run = promisify(execFile)
const dataset = generateDataset(11)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

async function nativeMount (t: Tap.Test, ...options: string[]): Promise<string> {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--fuse-backend', 'native', ...options)
  return mountpoint
}

t.test('the mount says it runs on the native server', async t => {
  const stats = await readStats(await nativeMount(t))
  t.equal(stats.fs.backend, 'native')
})

t.test('a second stat of a non-sample is answered by the kernel cache, not the daemon', async t => {
  const mountpoint = await nativeMount(t)
  const notes = path.join(mountpoint, 'dog/notes/about dog.txt')
  statSync(notes)
  // Reading the stats file costs lookups and getattrs of its own (control files are never cached): measure that first.
  const first = (await readStats(mountpoint)).fs
  const second = (await readStats(mountpoint)).fs
  for (let i = 0; i < 20; i++) statSync(notes)
  const third = (await readStats(mountpoint)).fs
  t.equal(third.lookups - second.lookups, second.lookups - first.lookups, 'no lookup of the file reached the daemon')
  t.equal(third.getattrs - second.getattrs, second.getattrs - first.getattrs, 'no getattr of the file reached the daemon')
})

t.test('a sample\'s attributes are not cached: every stat asks the daemon', async t => {
  const mountpoint = await nativeMount(t)
  const sample = path.join(mountpoint, dataset.samples[0])
  statSync(sample)
  const before = (await readStats(mountpoint)).fs.getattrs
  for (let i = 0; i < 5; i++) statSync(sample)
  t.ok((await readStats(mountpoint)).fs.getattrs - before >= 5)
})

t.test('a non-sample file can be memory-mapped and reads exactly', async t => {
  const mountpoint = await nativeMount(t)
  const script = 'import mmap,sys\nwith open(sys.argv[1],"rb") as f:\n  m=mmap.mmap(f.fileno(),0,access=mmap.ACCESS_READ)\n  sys.stdout.buffer.write(m[:])'
  const { stdout } = await run('/usr/bin/python3', ['-c', script, path.join(mountpoint, 'cat/labels.csv')], { encoding: 'buffer' })
  t.same(stdout, dataset.others.get('cat/labels.csv'))
})

t.test('64 concurrent readers of one sample path each get a whole sample of its class', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool')
  const opened = dataset.samples.find(p => classOf(p) === 'cat')!
  const reads = await Promise.all(Array.from({ length: 64 }, async () => await readFileAsTrainer(mountpoint, opened)))
  const served = reads.map(r => dataset.byContent.get(r.content))
  t.equal(served.filter(s => s === undefined).length, 0, 'every read is a whole sample')
  t.equal(served.filter(s => path.dirname(s!) !== path.dirname(opened)).length, 0, 'all from the opened path\'s directory')
  // (fstat is not checked here: for handles of one inode opened within the same
  // jiffy, the kernel may answer fstat from another handle's fresh attributes.)
})

t.test('modification times keep sub-millisecond precision', async t => {
  const mountpoint = await nativeMount(t)
  const raw = statSync(path.join(dataset.root, 'README.txt'), { bigint: true })
  const mounted = statSync(path.join(mountpoint, 'README.txt'), { bigint: true })
  t.ok(mounted.mtimeNs - raw.mtimeNs < 1000n && raw.mtimeNs - mounted.mtimeNs < 1000n, `within a microsecond: ${raw.mtimeNs} vs ${mounted.mtimeNs}`)
})
