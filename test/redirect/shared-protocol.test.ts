import fc from 'fast-check'
import t, { type Test } from 'tap'
import type { FileId } from '../../src/redirect/layout'
import { buildSharedLayout, type SharedLayout } from '../../src/redirect/shared-layout'
import { SharedProtocol } from '../../src/redirect/shared-protocol'
import { simulateShared, type SimulationResult } from '../../src/redirect/simulator'
import { fileId } from '../helpers/ids'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

/** Many small classes: 120 classes of 2 to 40 files, 2,442 files. */
const MANY_CLASSES = Array.from({ length: 120 }, (_, c) => 2 + (c * 7) % 39)
const uneven = makeSamples(11, UNEVEN_CLASSES)
const many = makeSamples(12, MANY_CLASSES)

function setUp (files = many, memoryFraction = 0.1, blockSize = 4): { layout: SharedLayout, memoryBytes: number } {
  const memoryBytes = Math.round(files.reduce((sum, f) => sum + f.size, 0) * memoryFraction)
  return { layout: buildSharedLayout(files, { chunkSize: 16, blockSize, seed: 5 }), memoryBytes }
}

function multiset (ids: (FileId | undefined)[]): number[] {
  return ids.map(id => id ?? -1).sort((a, b) => a - b)
}

function checkEpochsExact (t: Test, layout: SharedLayout, result: SimulationResult, except: ReadonlySet<FileId> = new Set()): void {
  const every = layout.files.map((_, id) => fileId(id)).filter(id => !except.has(id))
  for (const [e, epoch] of result.epochs.entries()) {
    t.ok(epoch.every(open => open.served === undefined || layout.files[open.served].group === layout.files[open.opened].group), `epoch ${e}: every open got a file of its own class`)
    t.same(multiset(epoch.flatMap(open => open.served === undefined ? [] : [open.served])), every, `epoch ${e}: the served multiset is the dataset`)
  }
}

for (const [name, files] of [['10 uneven classes', uneven], ['120 small classes', many]] as const) {
  for (const readers of [1, 8]) {
    for (const memoryFraction of [0.02, 0.1, 0.5]) {
      t.test(`${name}, ${readers} reader(s), ${memoryFraction * 100}% memory, 3 epochs: labels right, every file exactly once per epoch`, async t => {
        const { layout, memoryBytes } = setUp(files, memoryFraction)
        const result = simulateShared(layout, { memoryBytes, epochs: 3, seed: readers, readers })
        t.equal(result.epochs.length, 3)
        checkEpochsExact(t, layout, result)
        t.ok(result.counters.redirects > 0, 'opens were redirected')
      })
    }
  }
}

t.test('a file\'s bytes enter memory at most once per epoch', async t => {
  for (const blockSize of [1, 4, 16]) {
    const { layout, memoryBytes } = setUp(many, 0.1, blockSize)
    const result = simulateShared(layout, { memoryBytes, epochs: 4, seed: 3, readers: 8 })
    for (const [e, loaded] of result.loaded.entries()) t.equal(new Set(loaded).size, loaded.length, `block ${blockSize}, epoch ${e}: no file loaded twice`)
  }
})

t.test('memory (resident + in flight) never exceeds the budget, even below a file per class', async t => {
  for (const fraction of [0.005, 0.02, 0.1, 0.5]) {
    const { layout, memoryBytes } = setUp(many, fraction)
    let peak = 0
    simulateShared(layout, { memoryBytes, epochs: 3, seed: 4, readers: 8, onStep: p => { peak = Math.max(peak, p.residentBytes + p.counters.inflightBytes) } })
    t.ok(peak <= memoryBytes, `memory ${fraction}: peak ${peak} ≤ budget ${memoryBytes}`)
  }
})

t.test('an unreadable file fails one open per epoch; every other file is still served exactly once', async t => {
  const { layout, memoryBytes } = setUp()
  const unreadable = new Set([3, 400, 1000].map(fileId))
  const result = simulateShared(layout, { memoryBytes, epochs: 3, seed: 2, readers: 8, unreadable })
  for (const epoch of result.epochs) t.equal(epoch.filter(open => open.served === undefined).length, unreadable.size, 'one failed open per unreadable file')
  checkEpochsExact(t, layout, result, unreadable)
  // Readahead skips a block whose read lost files until a class of it rolls over: not read again and again at an epoch's end.
  const { failedFiles, failedOpens } = result.counters
  t.ok(failedFiles <= 3 * failedOpens, `an unreadable file is tried a few times per epoch: ${failedFiles} failed reads for ${failedOpens} failed opens`)
})

t.test('extra opens roll classes over early, without stalls or wrong labels', async t => {
  const { layout, memoryBytes } = setUp()
  const result = simulateShared(layout, { memoryBytes, epochs: 5, seed: 9, readers: 4, extraOpensPerEpoch: 37 })
  for (const epoch of result.epochs) {
    t.equal(epoch.length, layout.files.length + 37)
    t.ok(epoch.every(open => open.served !== undefined && layout.files[open.served].group === layout.files[open.opened].group))
  }
  t.ok(result.counters.rollovers >= layout.groups.length * 4, 'every class rolled over in every later epoch')
})

t.test('a few files per class in memory: almost no open waits, and every chunk is read about once per epoch', async t => {
  // 120 classes, 10% memory: about 2 files per class, far below the class layout's 16 per class.
  const { layout, memoryBytes } = setUp(many, 0.1)
  const result = simulateShared(layout, { memoryBytes, epochs: 3, seed: 6, readers: 8 })
  const { opens, waitedOpens, wastedBytes } = result.counters
  t.ok(waitedOpens / opens < 0.1, `opens that waited: ${waitedOpens} of ${opens}`)
  t.ok(wastedBytes / layout.totalBytes / 3 < 0.1, `read for nothing: ${(wastedBytes / layout.totalBytes / 3).toFixed(3)} of the dataset per epoch`)
})

t.test('a demand load answers its opener with a file of the opened class; a failed one charges that file to the open', async t => {
  const { layout } = setUp(many, 0.1, 16)
  const protocol = new SharedProtocol(layout, { memoryBytes: 0, seed: 1 })
  const opened = layout.filesOfGroup[7][0]
  const first = protocol.open(opened)
  if (first.kind !== 'load') throw new Error(`expected a load, got ${first.kind}`)
  t.equal(first.plan.bytes, 0, 'no memory: the load takes only the answer, which goes to its opener')
  t.same(first.plan.files, [first.plan.answer])
  t.equal(layout.files[first.plan.answer!].group, layout.files[opened].group)
  t.same(protocol.open(layout.filesOfGroup[7][1]), { kind: 'wait', group: 7 }, 'another open of the class waits for that load')
  const failed = protocol.finishLoad(first.plan, new Set())
  t.equal(failed.served, undefined, 'the answer could not be read: the open fails')
  t.ok(failed.wakes.includes(7), 'and the waiting open is woken')
  t.equal(protocol.counters.failedOpens, 1)
  const again = protocol.open(layout.filesOfGroup[7][1], { retry: true })
  if (again.kind !== 'load') throw new Error(`expected a load, got ${again.kind}`)
  t.not(again.plan.answer, first.plan.answer, 'the failed file was charged: the next load answers with another')
  t.equal(protocol.finishLoad(again.plan, new Set(again.plan.files)).served, again.plan.answer)
})

t.test('any shape, memory, block size, readers and unreadable files: labels right, each readable file once per epoch, memory within budget', async t => {
  const shape = fc.record({
    classSizes: fc.array(fc.integer({ min: 1, max: 60 }), { minLength: 1, maxLength: 40 }),
    chunkSize: fc.integer({ min: 1, max: 24 }),
    blockSize: fc.integer({ min: 1, max: 24 }),
    memoryFraction: fc.double({ min: 0, max: 0.6, noNaN: true }),
    readers: fc.integer({ min: 1, max: 16 }),
    seed: fc.integer({ min: 0, max: 1000 }),
    unreadableShare: fc.constantFrom(0, 0, 0.02)
  })
  fc.assert(fc.property(shape, ({ classSizes, chunkSize, blockSize, memoryFraction, readers, seed, unreadableShare }) => {
    const files = makeSamples(seed, classSizes)
    const memoryBytes = Math.round(files.reduce((sum, f) => sum + f.size, 0) * memoryFraction)
    const layout = buildSharedLayout(files, { chunkSize, blockSize, seed })
    const unreadable = new Set(files.map((_, id) => fileId(id)).filter(id => (id * 7919 + seed) % 1000 < unreadableShare * 1000))
    let peak = 0
    const result = simulateShared(layout, { memoryBytes, epochs: 3, seed, readers, unreadable, onStep: p => { peak = Math.max(peak, p.residentBytes + p.counters.inflightBytes) } })
    const readable = files.map((_, id) => fileId(id)).filter(id => !unreadable.has(id))
    for (const epoch of result.epochs) {
      if (!epoch.every(open => open.served === undefined || files[open.served].group === files[open.opened].group)) return false
      if (epoch.filter(open => open.served === undefined).length !== unreadable.size) return false
      if (JSON.stringify(multiset(epoch.flatMap(open => open.served === undefined ? [] : [open.served]))) !== JSON.stringify(readable)) return false
    }
    return peak <= memoryBytes
  }), { numRuns: 150, seed: 41 })
  t.pass('150 random shapes')
})
