// Packs: written, verified, mounted for real, damaged on purpose.
import { execFile, spawn } from 'node:child_process'
import { promises as fs, existsSync, readFileSync, readdirSync, statSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { crc32 } from 'node:zlib'
import pino from 'pino'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { UsageError } from '../../src/errors'
import { decodeIndex, PACK_MAGIC, type PackArrays } from '../../src/pack/format'
import { loadPackIndex, packLayout } from '../../src/pack/pack-index'
import { PackFileReader, PackSource } from '../../src/pack/pack-source'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { DirectoryPackStorage, segmentName } from '../../src/pack/storage'
import { classOf, generateDataset, sha1, splitClassOf } from '../helpers/dataset'
import { CLI, CLI_ENV, emptyDir, mount, redirfs, waitUntil } from '../helpers/mount'
import { checkDamagedChunk, readEpoch, readFileAsTrainer } from '../helpers/readers'
import { changeAttempts } from '../helpers/read-only'

const run = promisify(execFile)
const dataset = generateDataset(6)
const work = emptyDir('redirfs-packs-')
const pack = path.join(work, 'pack')
t.teardown(async () => {
  await fs.rm(dataset.root, { recursive: true, force: true })
  await fs.rm(work, { recursive: true, force: true })
})

t.before(async () => {
  // Small segments, so that chunks are spread over several (a pack's segments are its files of chunks).
  const result = await redirfs('pack', dataset.root, pack, '--chunk-size', '4', '--seed', '2', '--segment-size', '64K')
  if (result.code !== 0) throw new Error(result.stderr)
})

/** A copy of the pack whose segment holding `chunk` is damaged by `damage`. */
async function damagedCopy (name: string, chunk: number, damage: (segment: string) => Promise<void>): Promise<string> {
  const copy = path.join(work, name)
  await fs.cp(pack, copy, { recursive: true })
  const index = await loadPackIndex(pack)
  await damage(path.join(copy, segmentName(index.arrays.chunkSegment[chunk])))
  return copy
}

/** Inverts one byte of a segment at `position`. */
async function flipByte (chunks: string, position: number): Promise<void> {
  const handle = await fs.open(chunks, 'r+')
  const byte = Buffer.alloc(1)
  await handle.read(byte, 0, 1, position)
  byte[0] ^= 0xff
  await handle.write(byte, 0, 1, position)
  await handle.close()
}

t.test('a fresh pack verifies clean', async t => {
  const result = await redirfs('verify', pack)
  t.equal(result.code, 0, result.stderr)
  t.match(result.stdout, /is intact/)
})

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode} over a pack: 3 epochs, 8 readers, labels right and every sample once per epoch`, async t => {
    const mountpoint = emptyDir()
    await mount(t, pack, mountpoint, '--memory', '300K', '--redirect', mode)
    for (let epoch = 0; epoch < 3; epoch++) {
      const read = await readEpoch(mountpoint, dataset.samples, 50 + epoch)
      const served = read.map(r => dataset.byContent.get(r.content))
      t.equal(read.filter((r, i) => served[i] === undefined || classOf(served[i]!) !== classOf(r.opened)).length, 0, `epoch ${epoch}: labels right`)
      t.same([...served].sort(), dataset.samples, `epoch ${epoch}: every sample once`)
    }
    const stats = await readStats(mountpoint)
    t.equal(stats.source.kind, 'pack')
    t.equal(stats.chunkSize, 4, 'the pack\'s chunk size')
    t.ok(Number(stats.source.chunksRead) > 0)
  })
}

t.test('a pack in the shared layout: its chunks hold many classes; it verifies, and mix and pool serve every epoch exactly with labels right', async t => {
  const shared = path.join(work, 'shared-pack')
  const packed = await redirfs('pack', dataset.root, shared, '--chunk-size', '4', '--layout', 'shared', '--segment-size', '64K')
  t.equal(packed.code, 0, packed.stderr)
  const index = await loadPackIndex(shared)
  t.equal(index.header.layout, 'shared')
  const mixed = packLayout(index).pcs.find(pc => new Set(pc.files.map(id => classOf(index.tree.samples[id].path))).size > 1)
  t.ok(mixed, 'a chunk holds files of several classes')
  const verified = await redirfs('verify', shared)
  t.equal(verified.code, 0, verified.stderr)
  for (const mode of ['pool', 'mix']) {
    const mountpoint = emptyDir()
    await mount(t, shared, mountpoint, '--memory', '60K', '--redirect', mode)
    for (let epoch = 0; epoch < 2; epoch++) {
      const read = await readEpoch(mountpoint, dataset.samples, 80 + epoch)
      const served = read.map(r => dataset.byContent.get(r.content))
      t.equal(read.filter((r, i) => served[i] === undefined || classOf(served[i]!) !== classOf(r.opened)).length, 0, `${mode}, epoch ${epoch}: labels right`)
      t.same([...served].sort(), dataset.samples, `${mode}, epoch ${epoch}: every sample once`)
    }
    const stats = await readStats(mountpoint)
    t.equal(stats.layout.kind, 'shared', `${mode}: the pack's layout`)
    t.equal(Number(stats.source.corruptChunks), 0)
  }
  // The victim's chunk holds other classes: verify names the file, and the count of groups, not one group.
  const victim = index.sampleEntry[mixed!.files[1]]
  const chunk = index.arrays.chunk[victim]
  const copy = path.join(work, 'shared-flipped')
  await fs.cp(shared, copy, { recursive: true })
  await flipByte(path.join(copy, segmentName(index.arrays.chunkSegment[chunk])), index.arrays.location[victim] + 100)
  const report = await redirfs('verify', copy)
  t.equal(report.code, 1)
  // Whole chunks read at once (pool, memory for the whole dataset): the damaged file costs its own open, each epoch, and no other.
  const damagedMountpoint = emptyDir()
  await mount(t, copy, damagedMountpoint, '--memory', '10M', '--redirect', 'pool')
  for (let epoch = 0; epoch < 2; epoch++) {
    const read = await Promise.all(dataset.samples.map(async relative => await readFileAsTrainer(damagedMountpoint, relative).then(r => dataset.byContent.get(r.content), (err: NodeJS.ErrnoException) => err.code)))
    t.equal(read.filter(r => r === 'EIO').length, 1, `epoch ${epoch}: one open fails, for the one damaged file`)
    t.same(read.filter(r => r !== 'EIO').sort(), dataset.samples.filter(p => p !== index.path(victim)), `epoch ${epoch}: every other sample served once`)
  }
  t.match(report.stdout, new RegExp(`chunk ${chunk} \\(\\d+ groups, ${segmentName(index.arrays.chunkSegment[chunk])}\\): checksum mismatch in ${index.path(victim).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`))
})

t.test('the shared layout packs for one node: with --nodes it is refused in one line, nothing written', async t => {
  const out = path.join(work, 'shared-nodes')
  const result = await redirfs('pack', dataset.root, out, '--layout', 'shared', '--nodes', '2')
  t.equal(result.code, 1)
  t.equal(result.stderr, 'redirfs: --layout shared packs for one node: a cluster mounts the class layout (leave out --layout, or --nodes)\n')
  t.notOk(existsSync(out))
})

t.test('a pack written from a train/val root keeps every split and class apart: labels right, every sample once per epoch', async t => {
  const splits = generateDataset(9, { splits: true })
  t.teardown(async () => { await fs.rm(splits.root, { recursive: true, force: true }) })
  const splitPack = path.join(work, 'splits-pack')
  const packed = await redirfs('pack', splits.root, splitPack, '--chunk-size', '2')
  t.equal(packed.code, 0, packed.stderr)
  t.match(packed.stdout, /packed \d+ samples in \d+ groups \(train\/ant, /)
  const mountpoint = emptyDir()
  await mount(t, splitPack, mountpoint, '--memory', '300K', '--redirect', 'pool')
  for (let epoch = 0; epoch < 3; epoch++) {
    const read = await readEpoch(mountpoint, splits.samples, 70 + epoch)
    const served = read.map(r => splits.byContent.get(r.content))
    t.equal(read.filter((r, i) => served[i] === undefined || splitClassOf(served[i]!) !== splitClassOf(r.opened)).length, 0, `epoch ${epoch}: every sample from the opened split and class`)
    t.same([...served].sort(), splits.samples, `epoch ${epoch}: every sample once`)
  }
  t.ok((await readStats(mountpoint)).protocol.redirects > 0, 'redirection was at work')
})

t.test('a pack records its grouping: --group-depth is kept, a different one is refused', async t => {
  const coarse = path.join(work, 'coarse-pack')
  const packed = await redirfs('pack', dataset.root, coarse, '--chunk-size', '4', '--group-depth', '1')
  t.equal(packed.code, 0, packed.stderr)
  t.match(packed.stdout, /in 12 groups \(ant, /)
  const refused = await redirfs('mount', coarse, emptyDir(), '--group-depth', '2')
  t.not(refused.code, 0)
  t.match(refused.stderr, /the pack was written with redirect groups by the first 1 directory of each sample's path; it cannot be mounted with --group-depth 2/)
  const mountpoint = emptyDir()
  await mount(t, coarse, mountpoint, '--memory', '170K')
  const stats = await readStats(mountpoint)
  t.equal(stats.layout.groups, 12)
  t.equal(stats.layout.grouping, 'the first 1 directory of each sample\'s path')
})

for (const [version, why] of [[1, 'whose redirect groups were top-level directories and could mix classes'], [2, 'which keeps times to the microsecond only'], [3, 'which keeps every chunk in one chunks.bin, not in segments']] as const) {
  t.test(`a pack of format ${version} is refused with a message to re-pack`, async t => {
    const old = path.join(work, `format-${version}`)
    await fs.cp(pack, old, { recursive: true })
    const index = await fs.readFile(path.join(old, 'index.bin'))
    index.writeUInt32LE(version, 8) // the version, after the 8-byte magic
    await fs.writeFile(path.join(old, 'index.bin'), index)
    const result = await redirfs('mount', old, emptyDir())
    t.not(result.code, 0)
    t.match(result.stderr, `was written by an older redirfs (pack format ${version}, ${why}); re-pack the dataset`)
  })
}

/** A copy of the pack whose index `craft` changes (its arrays are views of the bytes), with its CRC made anew. */
async function craftedCopy (name: string, craft: (arrays: PackArrays) => void): Promise<string> {
  const crafted = path.join(work, name)
  await fs.cp(pack, crafted, { recursive: true })
  const file = path.join(crafted, 'index.bin')
  const bytes = Buffer.alloc(statSync(file).size) // its own memory, 8-byte aligned: the decoded arrays are views of it
  readFileSync(file).copy(bytes)
  craft(decodeIndex(bytes, file).arrays)
  bytes.writeUInt32LE(crc32(bytes.subarray(0, bytes.length - 4)), bytes.length - 4)
  await fs.writeFile(file, bytes)
  return crafted
}

/** The samples of chunk 0, by where they lie in it. */
const chunkZero = (arrays: PackArrays): number[] => [...arrays.chunk.keys()].filter(i => arrays.chunk[i] === 0).sort((a, b) => arrays.location[a] - arrays.location[b])

t.test('a crafted index whose sample starts before its chunk is refused by mount and verify in one line, never read', async t => {
  const crafted = await craftedCopy('crafted-before', arrays => {
    const [, second] = chunkZero(arrays)
    arrays.location[second] = -8192
    arrays.size[second] += 8192
  })
  const why = /is not a valid redirfs pack index: sample "[^"]+" \(\d+ bytes at -8192\) is not inside its chunk 0/
  for (const command of [['mount', crafted, emptyDir()], ['verify', crafted]]) {
    const result = await redirfs(...command)
    t.equal(result.code, 1, command[0])
    t.match(result.stderr, why, command[0])
    t.equal(result.stderr.trim().split('\n').length, 1, `${command[0]}: one line`)
  }
})

// verify refused it too since the pack index fuzzer (fuzz/pack-index.fuzz.ts) found verify calling such a pack intact;
// a mount at too little memory for its layout said memory was short, not that the pack was damaged.
t.test('a crafted index whose files lie in their chunk in another order than the layout\'s is refused by mount (at any memory) and verify', async t => {
  const crafted = await craftedCopy('crafted-order', arrays => {
    // The last file moved to the chunk's start, the others after it: each still inside, together still filling it.
    const files = chunkZero(arrays)
    const last = files[files.length - 1]
    let at = arrays.location[files[0]]
    for (const entry of [last, ...files.slice(0, -1)]) { arrays.location[entry] = at; at += arrays.size[entry] }
  })
  for (const command of [['mount', crafted, emptyDir()], ['verify', crafted], ['mount', crafted, emptyDir(), '--memory', '4K']]) {
    const result = await redirfs(...command)
    t.equal(result.code, 1, command[0])
    t.match(result.stderr, /index.bin does not match the layout computed from it \(.+ is at \d+ in chunk 0, the layout's order puts it at \d+; .*\); repack it/, command[0])
  }
})

// Found by the pack index fuzzer: a whole chunk was checked against the chunk's CRC only, so its right bytes were served cut at the index's boundaries.
t.test('a crafted index that moves the boundary between two files of a chunk has neither served: every file is checked against its own CRC', async t => {
  const crafted = await craftedCopy('crafted-boundary', arrays => {
    const [first, second] = chunkZero(arrays)
    arrays.size[first] += 10
    arrays.size[second] -= 10
    arrays.location[second] += 10
  })
  const index = await loadPackIndex(crafted)
  const files = packLayout(index).pcs[0].files
  const source = new PackSource(index, new SampleBuffers(), pino({ level: 'silent' }))
  t.teardown(async () => { await source.close() })
  // The chunk's other files pass their own checks: they are served, byte for byte, the two moved ones never.
  const whole = await source.fetch({ pc: 0, files })
  t.same([...whole.keys()], files.slice(2), 'the whole chunk: its other files only')
  t.ok([...whole].every(([id, bytes]) => crc32(bytes) === index.arrays.crc[index.sampleEntry[id]]), 'each as its index says')
  t.equal((await source.fetch({ pc: 0, files: files.slice(0, 2) })).size, 0, 'a block of the two')
  t.equal(source.stats().corruptChunks, 2)
})

t.test('an index larger than any pack index may be is refused by its size, before it is read', async t => {
  const huge = path.join(work, 'huge-index')
  await fs.mkdir(path.join(huge, 'segments'), { recursive: true })
  await fs.writeFile(path.join(huge, 'index.bin'), PACK_MAGIC)
  await fs.truncate(path.join(huge, 'index.bin'), 5 * 2 ** 30) // sparse: five GiB that take no disk
  await t.rejects(loadPackIndex(huge), new UsageError(`${huge}/index.bin is 5368709120 bytes, more than the 4294967295 a pack index may have (one of 13 million files is about 1.6 GB): not a pack this redirfs reads`))
})

t.test('a mounted pack keeps every time to the nanosecond (native backend; fuse-native carries milliseconds)', async t => {
  const mountpoint = emptyDir()
  await mount(t, pack, mountpoint, '--memory', '300K', '--redirect', 'off', '--fuse-backend', 'native')
  for (const relative of ['', 'README.txt', dataset.samples[0], path.dirname(dataset.samples[0])]) {
    const raw = statSync(path.join(dataset.root, relative), { bigint: true })
    const mounted = statSync(path.join(mountpoint, relative), { bigint: true })
    // (atime is left out: reading the source moves it after the scan)
    t.same([mounted.mtimeNs, mounted.ctimeNs], [raw.mtimeNs, raw.ctimeNs], relative || 'the root')
  }
})

t.test('a mounted pack presents the original tree and non-sample files byte for byte', async t => {
  const mountpoint = emptyDir()
  await mount(t, pack, mountpoint, '--memory', '300K', '--redirect', 'off')
  const walk = (root: string, relative = ''): string[] => readdirSync(path.join(root, relative)).sort().flatMap(name => {
    const child = relative === '' ? name : `${relative}/${name}`
    return statSync(path.join(root, child)).isDirectory() ? [child + '/', ...walk(root, child)] : [child]
  })
  t.same(walk(mountpoint), walk(dataset.root))
  for (const relative of walk(dataset.root)) {
    const a = statSync(path.join(dataset.root, relative))
    const b = statSync(path.join(mountpoint, relative))
    t.same([b.size, b.mode], [a.size, a.mode], relative)
    t.ok(Math.abs(b.mtimeMs - a.mtimeMs) < 1, `${relative}: mtime`)
  }
  for (const [relative, bytes] of dataset.others) t.equal(sha1(await fs.readFile(path.join(mountpoint, relative))), sha1(bytes), relative)
})

t.test('a flipped byte in a chunk is reported by verify and never served by the mount', async t => {
  const index = await loadPackIndex(pack)
  const victim = index.sampleEntry[7]
  const victimPath = index.path(victim)
  const chunk = index.arrays.chunk[victim]
  const damaged = await damagedCopy('flipped', chunk, async segment => { await flipByte(segment, index.arrays.location[victim] + 100) })
  const report = await redirfs('verify', damaged)
  t.equal(report.code, 1)
  t.match(report.stdout, `chunk ${chunk} (group ${path.dirname(victimPath)}, ${segmentName(index.arrays.chunkSegment[chunk])}): checksum mismatch in ${victimPath}`)

  const mountpoint = emptyDir()
  await mount(t, damaged, mountpoint, '--memory', '300K', '--redirect', 'off')
  const inChunk = new Set(index.tree.samples.filter((_, id) => index.arrays.chunk[index.sampleEntry[id]] === chunk).map(s => s.path))
  await checkDamagedChunk(t, mountpoint, dataset, victimPath, inChunk)
  t.ok(Number((await readStats(mountpoint)).source.corruptChunks) >= 1)
})

t.test('every change on a pack mount is refused with EROFS and the pack stays unchanged', async t => {
  const files = (): string[][] => readdirSync(pack, { recursive: true }).map(String).filter(name => statSync(path.join(pack, name)).isFile()).sort().map(name => [name, sha1(readFileSync(path.join(pack, name)))])
  const before = files()
  const mountpoint = emptyDir()
  await mount(t, pack, mountpoint, '--memory', '300K')
  for (const [what, attempt] of changeAttempts(mountpoint, dataset.samples[0], 'bee')) await t.rejects(attempt(), { code: 'EROFS' }, what)
  t.same(files(), before)
})

for (const [mode, how] of [['pool', 'a chunk at a time'], ['mix', 'a block at a time']] as const) {
  t.test(`${mode} over a pack reads each sample's bytes once per epoch, ${how} (the source's byte counter)`, async t => {
    const mountpoint = emptyDir()
    await mount(t, pack, mountpoint, '--memory', '300K', '--redirect', mode, '--mix-block', '2')
    const sampleBytes = dataset.samples.reduce((sum, relative) => sum + statSync(path.join(dataset.root, relative)).size, 0)
    for (let epoch = 0; epoch < 2; epoch++) {
      const served = (await readEpoch(mountpoint, dataset.samples, 80 + epoch)).map(r => dataset.byContent.get(r.content))
      t.same([...served].sort(), dataset.samples, `epoch ${epoch}: every sample once`)
    }
    // Chunks read ahead for a third epoch land in memory; wait for the last of them to land.
    let stats = await readStats(mountpoint)
    while (stats.protocol.inflightBytes > 0) {
      await new Promise(resolve => setTimeout(resolve, 20))
      stats = await readStats(mountpoint)
    }
    t.equal(Number(stats.source.bytesRead) - stats.protocol.residentBytes, 2 * sampleBytes, 'the source read exactly the samples\' bytes, twice, and what is in memory for the next epoch')
    if (mode === 'pool') {
      const chunksReadAhead = Number(stats.source.chunksRead) - 2 * stats.layout.physicalChunks
      t.ok(chunksReadAhead >= 0 && chunksReadAhead <= stats.layout.virtualChunks, `one read per chunk per epoch, and at most one chunk per VC for the next (${chunksReadAhead})`)
    } else {
      t.ok(Number(stats.source.chunksRead) > stats.layout.physicalChunks * 2, 'in blocks: more reads than chunks')
    }
  })
}

t.test('mix over a pack checks every block it reads: a damaged file costs its own open only', async t => {
  const index = await loadPackIndex(pack)
  const victim = index.sampleEntry[3]
  const damaged = await damagedCopy('flipped-for-mix', index.arrays.chunk[victim], async segment => { await flipByte(segment, index.arrays.location[victim] + 10) })
  const mountpoint = emptyDir()
  await mount(t, damaged, mountpoint, '--memory', '300K', '--redirect', 'mix', '--mix-block', '1')
  const results = await Promise.allSettled(dataset.samples.map(async relative => await readFileAsTrainer(mountpoint, relative)))
  const served = results.flatMap(r => (r.status === 'fulfilled' ? [dataset.byContent.get(r.value.content)] : []))
  t.equal(results.filter(r => r.status === 'rejected' && (r.reason as NodeJS.ErrnoException).code === 'EIO').length, 1, 'one open fails, with EIO')
  t.same([...served].sort(), dataset.samples.filter(relative => relative !== index.tree.samples[3].path), 'every other sample is served once, intact')
  t.ok(Number((await readStats(mountpoint)).source.corruptChunks) >= 1, 'the damaged block was detected')
})

t.test('a truncated chunk file is reported by verify and its lost chunks are never served', async t => {
  const index = await loadPackIndex(pack)
  const lastChunk = index.header.chunks - 1
  const damaged = await damagedCopy('truncated', lastChunk, async segment => { await fs.truncate(segment, index.arrays.chunkOffset[lastChunk] + 10) })
  const report = await redirfs('verify', damaged)
  t.equal(report.code, 1)
  t.match(report.stdout, `chunk ${lastChunk} `)
  t.match(report.stdout, /truncated/)

  const mountpoint = emptyDir()
  await mount(t, damaged, mountpoint, '--memory', '300K', '--redirect', 'strict')
  const lost = index.tree.samples.filter((_, id) => index.arrays.chunk[index.sampleEntry[id]] === lastChunk).length
  const results = await Promise.allSettled(dataset.samples.map(async relative => await readFileAsTrainer(mountpoint, relative)))
  const served = results.flatMap(r => (r.status === 'fulfilled' ? [r.value] : []))
  t.equal(results.filter(r => r.status === 'rejected').length, lost, 'one EIO per file of the lost chunk')
  t.ok(results.every(r => r.status === 'fulfilled' || (r.reason as NodeJS.ErrnoException).code === 'EIO'))
  t.ok(served.every(r => dataset.byContent.has(r.content) && classOf(dataset.byContent.get(r.content)!) === classOf(r.opened)), 'what is served is intact and of the right class')
})

t.test('an interrupted pack leaves nothing that looks like a pack', async t => {
  const big = path.join(work, 'big-source')
  for (let c = 0; c < 4; c++) {
    await fs.mkdir(path.join(big, `class${c}`), { recursive: true })
    for (let i = 0; i < 400; i++) await fs.writeFile(path.join(big, `class${c}`, `${i}.jpg`), Buffer.alloc(200_000, i))
  }
  const out = path.join(work, 'interrupted')
  const child = spawn(CLI, ['pack', big, out, '--chunk-size', '8'], { stdio: 'ignore', env: CLI_ENV })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const partial = `${out}.partial-${child.pid}`
  const firstSegment = path.join(partial, segmentName(0))
  await waitUntil(() => (existsSync(firstSegment) && statSync(firstSegment).size > 0) || child.exitCode !== null, 120_000, 5)
  child.kill('SIGKILL')
  await new Promise(resolve => child.on('exit', resolve))
  t.ok(existsSync(partial), 'the pack was caught mid-way')
  t.notOk(existsSync(out), 'no pack at the output path')
  t.notOk(existsSync(path.join(partial, 'index.bin')), 'the partial directory has no index')
  const verify = await redirfs('verify', partial)
  t.equal(verify.code, 1)
  t.match(verify.stderr, /is not a redirfs pack/)
})

t.test('pack refuses an existing output, and a pack refuses another chunk size', async t => {
  const exists = await redirfs('pack', dataset.root, pack)
  t.equal(exists.code, 1)
  t.match(exists.stderr, /already exists/)
  const mountpoint = emptyDir()
  const wrongK = await redirfs('mount', pack, mountpoint, '--chunk-size', '16')
  t.equal(wrongK.code, 1)
  t.match(wrongK.stderr, /written with chunk size 4/)
})

t.test('the daemon does not keep a second copy of a pack in the page cache', async t => {
  const segments = readdirSync(path.join(pack, 'segments')).map(name => path.join(pack, 'segments', name))
  const total = segments.reduce((sum, segment) => sum + statSync(segment).size, 0)
  const resident = async (): Promise<number> => (await run('fincore', ['--bytes', '--noheadings', '--output', 'RES', ...segments])).stdout.trim().split('\n').reduce((sum, line) => sum + Number(line), 0)
  // Evict these files only (a machine-wide drop_caches would disturb everything else running).
  for (const segment of segments) await run('dd', [`if=${segment}`, 'iflag=nocache', 'count=0', 'status=none'])
  t.ok(await resident() < 0.1 * total, 'the pack starts out of the page cache')
  const mountpoint = emptyDir()
  await mount(t, pack, mountpoint, '--memory', '300K', '--redirect', 'pool')
  await readEpoch(mountpoint, dataset.samples, 3)
  const afterMount = await resident()
  t.ok(afterMount <= 0.1 * total, `page cache holds ${afterMount} of ${total} bytes after reading every chunk`)
  // The control: a buffered read of the same files does fill the page cache.
  for (const segment of segments) await fs.readFile(segment)
  t.ok(await resident() > 0.5 * total, 'a buffered read would have cached it')
})

t.test('a pack spreads its chunks over segments of about --segment-size, each holding whole chunks', async t => {
  const index = await loadPackIndex(pack)
  t.ok(index.header.segments > 1, `${index.header.segments} segments`)
  t.equal(index.header.segmentSize, 64 * 1024)
  const segments = readdirSync(path.join(pack, 'segments')).sort()
  t.same(segments, Array.from({ length: index.header.segments }, (_, i) => segmentName(i).slice('segments/'.length)))
  for (let c = 0; c < index.header.chunks; c++) {
    const end = index.arrays.chunkOffset[c] + index.arrays.chunkLength[c]
    t.ok(end <= statSync(path.join(pack, segmentName(index.arrays.chunkSegment[c]))).size, `chunk ${c} lies whole in its segment`)
    t.equal(index.arrays.chunkOffset[c] % 4096, 0, `chunk ${c} starts on a 4 KiB boundary`)
  }
})

t.test('a pack of data not everyone may read is its owner\'s only; a pack of public data is as the umask makes it', async t => {
  const source = emptyDir('redirfs-private-src-')
  for (const cls of ['cat', 'dog']) {
    await fs.mkdir(path.join(source, cls), { mode: 0o755 })
    for (let i = 0; i < 3; i++) await fs.writeFile(path.join(source, cls, `${i}.jpg`), `${cls} ${i}`, { mode: 0o644 })
  }
  await fs.chmod(source, 0o755)
  const open = path.join(work, 'public-pack')
  t.equal((await redirfs('pack', source, open, '--chunk-size', '2')).code, 0)
  t.equal(statSync(open).mode & 0o077, 0o755 & ~process.umask() & 0o077, 'public data: the umask decides')
  await fs.chmod(path.join(source, 'dog', '1.jpg'), 0o600)
  const closed = path.join(work, 'private-pack')
  const result = await redirfs('pack', source, closed, '--chunk-size', '2')
  t.equal(result.code, 0, result.stderr)
  t.equal(statSync(closed).mode & 0o777, 0o700, 'the pack directory is 0700')
  const files = (await fs.readdir(closed, { recursive: true })).map(name => path.join(closed, name)).filter(file => statSync(file).isFile())
  t.ok(files.length >= 3)
  t.same(files.map(file => statSync(file).mode & 0o777), files.map(() => 0o600), 'and each of its files 0600')
})

t.test('opens of one non-sample file of a pack share its bytes: read once while any is open, whatever the number of opens', async t => {
  let reads = 0
  const storage = new DirectoryPackStorage(pack)
  const readOthers = storage.readOthers.bind(storage)
  storage.readOthers = async (offset, length) => { reads++; return await readOthers(offset, length) }
  const reader = new PackFileReader(await loadPackIndex(storage))
  const [other, bytes] = [...dataset.others.entries()].find(([, b]) => b.length > 0)!
  const opened = await Promise.all(Array.from({ length: 100 }, async () => await reader.open(other)))
  t.equal(reads, 1, 'one read for a hundred opens')
  const copy = Buffer.alloc(bytes.length)
  t.equal(await opened[99].read(copy, bytes.length, 0), bytes.length)
  t.same(copy, bytes)
  for (const file of opened) await file.close()
  await (await reader.open(other)).close()
  t.equal(reads, 2, 'read again once every open was closed: nothing is kept past its opens')
})
