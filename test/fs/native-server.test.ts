// What only the native FUSE server does: the kernel caches entries and
// attributes of directories and non-samples (so a second stat never reaches
// the daemon), non-samples can be mmap'd, many readers of one sample path
// each get a whole sample of its class, and the per-thread rules for
// loaders: a re-open gets the same bytes, a stat takes nothing, an open
// right after a stat gets the file itself.
import { execFile, spawn } from 'node:child_process'
import { promises as fs, statSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pino from 'pino'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset, sha1 } from '../helpers/dataset'
import { emptyDir, mount } from '../helpers/mount'
import { readFileAsTrainer } from '../helpers/readers'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { scanTree } from '../../src/chunks/scan'
import { FsAdapter } from '../../src/fs/adapter'
import { loadNativeServer, mountNative } from '../../src/fs/native-mount'
import type { FileId } from '../../src/redirect/layout'
import type { MountStats } from '../../src/stats'
import type { MountedFilesystem } from '../../src/fs/backend'
import v8 from 'node:v8'
import vm from 'node:vm'

const run = promisify(execFile)
const dataset = generateDataset(11)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

async function nativeMount (t: Test, ...options: string[]): Promise<string> {
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
  t.equal(Number(third.lookups) - Number(second.lookups), Number(second.lookups) - Number(first.lookups), 'no lookup of the file reached the daemon')
  t.equal(Number(third.getattrs) - Number(second.getattrs), Number(second.getattrs) - Number(first.getattrs), 'no getattr of the file reached the daemon')
})

t.test('a sample\'s attributes are not cached: every stat asks the daemon', async t => {
  const mountpoint = await nativeMount(t)
  const sample = path.join(mountpoint, dataset.samples[0])
  statSync(sample)
  const before = (await readStats(mountpoint)).fs.getattrs
  for (let i = 0; i < 5; i++) statSync(sample)
  t.ok(Number((await readStats(mountpoint)).fs.getattrs) - Number(before) >= 5)
})

t.test('a non-sample file can be memory-mapped and reads exactly', async t => {
  const mountpoint = await nativeMount(t)
  const script = 'import mmap,sys\nwith open(sys.argv[1],"rb") as f:\n  m=mmap.mmap(f.fileno(),0,access=mmap.ACCESS_READ)\n  sys.stdout.buffer.write(m[:])'
  const { stdout } = await run('/usr/bin/python3', ['-c', script, path.join(mountpoint, 'cat/labels.csv')], { encoding: 'buffer' })
  t.same(stdout, dataset.others.get('cat/labels.csv'))
})

t.test('one FUSE thread serves samples, non-samples and statfs read all at once (storage waits run off it)', async t => {
  const mountpoint = await nativeMount(t, '--fuse-threads', '1')
  t.equal((await readStats(mountpoint)).fs.fuseThreads, 1)
  const others = [...dataset.others.keys()]
  const [samples, files, statfs] = await Promise.all([
    Promise.all(dataset.samples.map(async p => await readFileAsTrainer(mountpoint, p))),
    Promise.all(others.map(async p => await fs.readFile(path.join(mountpoint, p)))),
    fs.statfs(mountpoint)
  ])
  t.equal(samples.filter(r => dataset.byContent.get(r.content) === undefined).length, 0, 'every sample read is a whole sample')
  t.same(files, others.map(p => dataset.others.get(p)), 'every non-sample reads exactly')
  t.ok(statfs.bsize > 0, 'statfs answers')
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

t.test('times are the source\'s to the nanosecond', async t => {
  const mountpoint = await nativeMount(t)
  for (const relative of ['', 'README.txt', dataset.samples[0], path.dirname(dataset.samples[0])]) {
    const raw = statSync(path.join(dataset.root, relative), { bigint: true })
    const mounted = statSync(path.join(mountpoint, relative), { bigint: true })
    // (atime is left out: reading the source moves it after the scan)
    t.same([mounted.mtimeNs, mounted.ctimeNs], [raw.mtimeNs, raw.ctimeNs], relative || 'the root')
  }
})

/**
 * Runs `steps` in one Python thread: ["open", path] reads the file whole,
 * ["stat", path] stats it, ["sleep", seconds]. Returns, per step, the sha1
 * and length read or the size stat'ed, and the samples consumed so far.
 */
async function inOneThread (mountpoint: string, steps: [string, string | number][]): Promise<{ sha1?: string, size: number, opens: number }[]> {
  const script = `
import hashlib, json, os, sys, time
mnt, steps = sys.argv[1], json.loads(sys.argv[2])
def opens():
    with open(os.path.join(mnt, ".redirfs", "stats")) as f:
        return json.load(f)["protocol"]["opens"]
out = []
for op, arg in steps:
    if op == "open":
        with open(os.path.join(mnt, arg), "rb") as f:
            data = f.read()
        out.append({"sha1": hashlib.sha1(data).hexdigest(), "size": len(data)})
    elif op == "stat":
        out.append({"size": os.stat(os.path.join(mnt, arg)).st_size})
    else:
        time.sleep(arg)
        out.append({"size": 0})
    out[-1]["opens"] = opens()
print(json.dumps(out))`
  const { stdout } = await run('/usr/bin/python3', ['-c', script, mountpoint, JSON.stringify(steps)])
  return JSON.parse(stdout)
}

const cats = dataset.samples.filter(p => classOf(p) === 'cat')

t.test('a thread that re-opens the sample it just closed gets the same bytes, and consumes one sample', async t => {
  // A window that a slow machine keeps (the thread reads the stats between its opens; under the sanitizers, on a loaded machine, that took over 50 ms).
  const mountpoint = await nativeMount(t, '--redirect', 'pool', '--reopen-window', '2000')
  const [first, again, stat] = await inOneThread(mountpoint, [['open', cats[0]], ['open', cats[0]], ['stat', cats[0]]])
  t.ok(dataset.byContent.has(first.sha1!), 'a whole sample')
  t.equal(again.sha1, first.sha1, 'the same bytes again')
  t.equal(again.opens, first.opens, 'no second sample consumed')
  t.equal(stat.size, first.size, 'and its stat of the path shows their size')
  t.equal((await readStats(mountpoint)).fs.reopens, 1)
})

t.test('once the thread opens another sample, or the re-open window has passed, an open of the path is a new open', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool', '--reopen-window', '100')
  const steps = await inOneThread(mountpoint, [['open', cats[0]], ['open', cats[1]], ['open', cats[0]], ['sleep', 0.5], ['open', cats[0]]])
  t.same(steps.map(s => s.opens), [1, 2, 3, 3, 4], 'each open consumed a sample')
  t.equal((await readStats(mountpoint)).fs.reopens, 0)
})

t.test('--reopen-window 0 turns re-opens off', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool', '--reopen-window', '0')
  const steps = await inOneThread(mountpoint, [['open', cats[0]], ['open', cats[0]]])
  t.same(steps.map(s => s.opens), [1, 2])
})

t.test('stats of every sample consume nothing and load nothing', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool')
  const steps = await inOneThread(mountpoint, dataset.samples.map(p => ['stat', p]))
  t.equal(steps[steps.length - 1].opens, 0, 'no sample consumed')
  const { protocol } = await readStats(mountpoint)
  t.equal(protocol.chunkLoads, 0, 'no chunk loaded')
  t.equal(protocol.residentBytes, 0, 'nothing held')
})

t.test('an open right after a stat of the same path gets the file itself, of the size the stat showed', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool')
  const steps = await inOneThread(mountpoint, dataset.samples.flatMap(p => [['stat', p], ['open', p]] as [string, string][]))
  const mismatched = dataset.samples.filter((p, i) => dataset.byContent.get(steps[2 * i + 1].sha1!) !== p || steps[2 * i].size !== steps[2 * i + 1].size)
  t.same(mismatched, [], 'every open got its own file, as long as the stat said')
  const { protocol, fs } = await readStats(mountpoint)
  t.equal(protocol.exactOpens, dataset.samples.length)
  t.equal(fs.statThenOpens, dataset.samples.length)
})

t.test('a stat of another path between the stat and the open leaves the open redirectable', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool')
  await inOneThread(mountpoint, [['stat', cats[0]], ['stat', cats[1]], ['open', cats[0]]])
  t.equal((await readStats(mountpoint)).protocol.exactOpens, 0)
})

t.test('a stat\'s mark outlasts the re-open window (a busy loader may take longer from stat to open), and then ends', async t => {
  const mountpoint = await nativeMount(t, '--redirect', 'pool', '--reopen-window', '20')
  await inOneThread(mountpoint, [['stat', cats[0]], ['sleep', 0.3], ['open', cats[0]]])
  t.equal((await readStats(mountpoint)).protocol.exactOpens, 1, 'an open 0.3 s after the stat is still exact')
  await inOneThread(mountpoint, [['stat', cats[1]], ['sleep', 1.5], ['open', cats[1]]])
  t.equal((await readStats(mountpoint)).protocol.exactOpens, 1, 'one 1.5 s after it is not')
})

t.test('names in multibyte UTF-8 are listed and read as the source has them', async t => {
  const root = emptyDir()
  t.teardown(async () => { await fs.rm(root, { recursive: true, force: true }) })
  await fs.mkdir(path.join(root, 'café'))
  await fs.mkdir(path.join(root, '猫'))
  await fs.writeFile(path.join(root, 'café', 'crème brûlée.jpg'), 'first')
  await fs.writeFile(path.join(root, '猫', '写真 1.jpg'), 'second')
  await fs.writeFile(path.join(root, 'notes – ünïcode.txt'), 'third')
  const mountpoint = emptyDir()
  await mount(t, root, mountpoint, '--memory', '1M', '--fuse-backend', 'native')
  t.same((await fs.readdir(mountpoint)).filter(n => n !== '.redirfs').sort(), ['café', 'notes – ünïcode.txt', '猫'])
  t.same(await fs.readdir(path.join(mountpoint, 'café')), ['crème brûlée.jpg'])
  t.equal(await fs.readFile(path.join(mountpoint, 'café', 'crème brûlée.jpg'), 'utf8'), 'first')
  t.equal(await fs.readFile(path.join(mountpoint, '猫', '写真 1.jpg'), 'utf8'), 'second')
  t.equal(await fs.readFile(path.join(mountpoint, 'notes – ünïcode.txt'), 'utf8'), 'third')
})

t.test('a buffered reader takes a sample in one read: its block size holds the bytes it is bound to', async t => {
  // Samples of 20-110 KB, larger than a page: Python's open() buffers by st_blksize, and every read of a sample is a round trip to the daemon.
  const root = emptyDir()
  t.teardown(async () => { await fs.rm(root, { recursive: true, force: true }) })
  const files: string[] = []
  for (const label of ['cat', 'dog']) {
    await fs.mkdir(path.join(root, label))
    for (let i = 0; i < 6; i++) {
      const relative = `${label}/${i}.jpg`
      await fs.writeFile(path.join(root, relative), Buffer.alloc(20_000 + i * 18_000, i))
      files.push(relative)
    }
  }
  const mountpoint = emptyDir()
  await mount(t, root, mountpoint, '--memory', '2M', '--chunk-size', '3', '--fuse-backend', 'native')
  const script = [
    'import json, os, sys',
    'report = []',
    'for p in sys.argv[1:]:',
    '    with open(p, "rb") as f:',
    '        st = os.fstat(f.fileno())',
    '        got = 0',
    '        while True:',
    '            piece = f.read(4096)',  // a parser's small reads, as PIL makes them
    '            if not piece: break',
    '            got += len(piece)',
    '        report.append([st.st_size, st.st_blksize, got])',
    'print(json.dumps(report))'
  ].join('\n')
  const before = (await readStats(mountpoint)).fs
  const baseline = (await readStats(mountpoint)).fs
  const { stdout } = await run('/usr/bin/python3', ['-c', script, ...files.map(f => path.join(mountpoint, f))])
  const after = (await readStats(mountpoint)).fs
  const report = JSON.parse(stdout) as [number, number, number][]
  t.ok(report.every(([size, , got]) => got === size), 'each reads whole, to the size its handle reports')
  t.ok(report.every(([size, block]) => block >= size), 'each handle\'s block size holds its bytes')
  const statsReads = Number(baseline.reads) - Number(before.reads)
  // One read brings the whole sample; Python then asks twice for more before it takes the end as the end.
  // With a 4 KiB block the same loop made 7 to 29 reads of these samples.
  t.equal(Number(after.reads) - Number(baseline.reads) - statsReads, 3 * files.length, 'three FUSE reads per sample: the bytes, and the end twice')
})

t.test('the native server refuses a tree whose columns contradict themselves, before any FUSE thread reads them', async t => {
  const { FuseServer } = loadNativeServer()
  const { columns } = await scanTree(dataset.root)
  const make = (changed: Partial<Record<keyof typeof columns, unknown>>): { close: () => void } =>
    new FuseServer({ ...columns, ...changed, controlName: 'x' }, () => {}, { reopenWindowMs: 0, fuseThreads: 1, ownerUid: 0, ownerGid: 0 }) as unknown as { close: () => void }
  make({}).close()
  const altered = <T extends Uint32Array | Float64Array>(column: T, entry: number, value: number): T => { const copy = column.slice() as T; copy[entry] = value; return copy }
  const crafted: Array<[string, Partial<Record<keyof typeof columns, unknown>>, RegExp]> = [
    ['a directory with more children than the tree has entries', { childCount: altered(columns.childCount, 0, 2 ** 32 - 1) }, /a directory's children are not entries/],
    ['a name that ends past the names', { nameEnd: altered(columns.nameEnd, columns.nameEnd.length - 1, columns.names.length + 5) }, /a name does not end in its 0 byte inside the names/],
    ['a time no timespec holds', { mtimeSec: altered(columns.mtimeSec, 1, 1e300) }, /a time that is not a time/],
    ['a column shorter than the others', { size: columns.size.subarray(1) }, /a column is missing, of another type, or of another length/]
  ]
  for (const [what, changed, why] of crafted) t.throws(() => make(changed), why, what)
})

t.test('a file held open through a lazy unmount outlives the closed server safely: its reads and its release reach nothing freed', async t => {
  const tree = await scanTree(dataset.root)
  const sample = tree.samples[0]
  const bytes = await fs.readFile(path.join(dataset.root, sample.path))
  const adapter = new FsAdapter({
    tree,
    files: { open: async () => { throw new Error('no non-sample is opened here') } },
    statfsPath: dataset.root,
    samples: { open: async () => ({ file: sample.entry as FileId, bytes: Buffer.from(bytes) }), giveBack: () => {} },
    buffers: new SampleBuffers(),
    log: pino({ level: 'silent' }),
    stats: () => ({ pid: process.pid }) as unknown as MountStats,
    reset: () => ({})
  })
  const mountpoint = emptyDir()
  let mounted: MountedFilesystem | undefined = await mountNative(mountpoint, adapter, tree, { allowOther: false, overSource: false, statfsPath: dataset.root, reopenWindowMs: 0, fuseThreads: 2 })
  t.teardown(async () => { await mounted?.unmount() })
  // A reader in a process of its own (this one serves the mount): it opens, waits, then reads and closes.
  const holder = spawn('/usr/bin/python3', ['-c', 'import hashlib,os,sys\nfd=os.open(sys.argv[1],os.O_RDONLY)\nprint("open",flush=True)\nsys.stdin.readline()\ntry:\n  print(hashlib.sha1(os.read(fd,1<<20)).hexdigest())\nexcept OSError as e:\n  print(e.errno)\nos.close(fd)\nprint("closed",flush=True)', path.join(mountpoint, sample.path)], { stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => holder.kill('SIGKILL'))
  let printed = ''
  holder.stdout.on('data', (chunk: Buffer) => { printed += chunk.toString() })
  const line = async (n: number): Promise<string> => {
    for (let tries = 0; printed.split('\n').length <= n + 1; tries++) {
      if (tries > 3000) throw new Error(`the reader said nothing more than ${JSON.stringify(printed)}`)
      await new Promise(resolve => setTimeout(resolve, 20))
    }
    return printed.split('\n')[n]
  }
  t.equal(await line(0), 'open')
  await mounted.unmount() // lazily: the file is still open
  mounted = undefined
  // Nothing of this process refers to the server now: a collection must not free what the kernel still reaches.
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc') as () => void
  for (let i = 0; i < 3; i++) { gc(); await new Promise(resolve => setImmediate(resolve)) }
  holder.stdin.write('\n')
  // With fusectl the connection is aborted (ENOTCONN); without it, the held file still reads its bytes.
  const read = await line(1)
  t.ok([sha1(bytes), String(os.constants.errno.ENOTCONN)].includes(read), `its read gets its bytes, or ENOTCONN (${read})`)
  t.equal(await line(2), 'closed', 'its release is answered, and this process lives on')
})
