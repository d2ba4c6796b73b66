// A dataset of many small classes, as face recognition's (a few files per
// class), mounted over a directory at 5% memory, where the class layout
// would need a chunk of every class (far more than the dataset): the mount
// chooses the shared layout, says so, and serves every epoch exactly, with
// the right labels, within --memory (docs/design.md, "Shared chunks").
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { SeededRandom } from '../../src/redirect/random'
import { classOf, sha1 } from '../helpers/dataset'
import { emptyDir, forceUnmount, mount, redirfs } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const CLASSES = 2000
const FILES_PER_CLASS = 4

const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-classes-'))
t.teardown(() => rmSync(root, { recursive: true, force: true }))
const samples: string[] = []
const byContent = new Map<string, string>()
const random = new SeededRandom(21)
let datasetBytes = 0
for (let c = 0; c < CLASSES; c++) {
  const dir = `c${String(c).padStart(4, '0')}`
  mkdirSync(path.join(root, dir))
  for (let f = 0; f < FILES_PER_CLASS; f++) {
    const relative = `${dir}/f${f}.jpg`
    // Uneven sizes, each file's bytes its own.
    const bytes = Buffer.concat([Buffer.from(`${relative}\n`), Buffer.alloc(200 + random.below(800), c % 251)])
    writeFileSync(path.join(root, relative), bytes)
    samples.push(relative)
    byContent.set(sha1(bytes), relative)
    datasetBytes += bytes.length
  }
}

t.test(`${CLASSES} classes of ${FILES_PER_CLASS} files at 5% memory: the shared layout, every epoch exact, labels right, within --memory`, async t => {
  const mountpoint = emptyDir()
  const memory = Math.round(datasetBytes * 0.05)
  // The class layout is refused at this memory (strict has no other).
  const strictMountpoint = emptyDir()
  t.teardown(() => forceUnmount(strictMountpoint))
  const refused = await redirfs('mount', root, strictMountpoint, '--memory', String(memory), '--redirect', 'strict')
  t.not(refused.code, 0)
  t.match(refused.stderr, /is too small: .* each of the 2000 groups needs one chunk of 64 files/)
  await mount(t, root, mountpoint, '--memory', String(memory))
  for (let epoch = 0; epoch < 3; epoch++) {
    const read = await readEpoch(mountpoint, samples, epoch, 8)
    const served = read.map(sample => byContent.get(sample.content))
    t.ok(read.every((sample, i) => served[i] !== undefined && classOf(served[i]!) === classOf(sample.opened)), `epoch ${epoch}: every open got a file of its own class`)
    t.ok(read.every(sample => sample.statSize === sample.length), `epoch ${epoch}: fstat gave each handle its own file's size`)
    t.same([...served].sort(), [...samples].sort(), `epoch ${epoch}: every sample exactly once`)
  }
  const stats = await readStats(mountpoint)
  t.equal(stats.layout.kind, 'shared')
  t.equal(stats.layout.groups, CLASSES)
  t.ok(stats.protocol.redirects > 0, 'redirection was at work')
  t.ok(stats.protocol.peakResidentBytes <= memory, `peak ${stats.protocol.peakResidentBytes} bytes of samples within --memory ${memory}`)
  // Each file read once per epoch, and what readahead brought for a fourth epoch that never came (at most what memory holds).
  const filesRead = Number(stats.source.filesRead)
  t.ok(filesRead >= 3 * samples.length && filesRead <= 3.1 * samples.length, `${filesRead} files read for ${samples.length} samples over 3 epochs`)
})
