import fc from 'fast-check'
import t, { type Test } from 'tap'
import type { FileId } from '../../src/redirect/layout'
import { buildSharedLayout, type SharedLayout } from '../../src/redirect/shared-layout'
import { SharedProtocol, type SharedLoadPlan } from '../../src/redirect/shared-protocol'
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

/** The random shape of a shared layout: classes of uneven sizes, chunk and block sizes, memory from none to 60% of the dataset. */
function layoutShape ({ classes, filesPerClass, chunkSize, minChunk = 1 }: { classes: number, filesPerClass: number, chunkSize: number, minChunk?: number }) {
  return {
    classSizes: fc.array(fc.integer({ min: 1, max: filesPerClass }), { minLength: 1, maxLength: classes }),
    chunkSize: fc.integer({ min: minChunk, max: chunkSize }),
    blockSize: fc.integer({ min: minChunk, max: chunkSize }),
    memoryFraction: fc.double({ min: 0, max: 0.6, noNaN: true })
  }
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
    ...layoutShape({ classes: 40, filesPerClass: 60, chunkSize: 24 }),
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

t.test('a block is one read: what a load takes of it lies back to back, so no byte inside the read is read for nothing, at any memory', async t => {
  const shape = fc.record({
    ...layoutShape({ classes: 40, filesPerClass: 60, chunkSize: 24, minChunk: 2 }),
    readers: fc.integer({ min: 1, max: 16 }),
    seed: fc.integer({ min: 0, max: 1000 })
  })
  let loads = 0
  fc.assert(fc.property(shape, ({ classSizes, chunkSize, blockSize, memoryFraction, readers, seed }) => {
    const files = makeSamples(seed, classSizes)
    const layout = buildSharedLayout(files, { chunkSize, blockSize, seed })
    const memoryBytes = Math.round(layout.totalBytes * memoryFraction)
    let runs = true
    simulateShared(layout, {
      memoryBytes,
      epochs: 2,
      seed,
      readers,
      onLoad: plan => {
        loads++
        for (const block of plan.blocks) {
          const at = plan.files.filter(file => layout.fileBlock[file] === block).map(file => layout.blocks[block].files.indexOf(file))
          if (at.some((index, i) => i > 0 && index !== at[i - 1] + 1)) runs = false
        }
      }
    })
    return runs
  }), { numRuns: 100, seed: 43 })
  t.pass(`100 random shapes, ${loads} loads`)
})

// ---------------------------------------------------------------- what a mount needs beyond the simulator's plain opens

/** Files served more than once in an epoch, and files not served in it. */
function extraAndMissing (layout: SharedLayout, epoch: SimulationResult['epochs'][number]): { extra: number, missing: number } {
  const times = new Map<FileId, number>()
  for (const open of epoch) if (open.served !== undefined) times.set(open.served, (times.get(open.served) ?? 0) + 1)
  const extra = [...times.values()].reduce((sum, n) => sum + n - 1, 0)
  return { extra, missing: layout.files.length - times.size }
}

t.test('exact opens alone (a loader that stats each path first) get their own file, every file once per epoch, within the budget', async t => {
  for (const fraction of [0.02, 0.1]) {
    const { layout, memoryBytes } = setUp(many, fraction)
    let peak = 0
    const result = simulateShared(layout, { memoryBytes, epochs: 3, seed: 4, readers: 8, exactShare: 1, onStep: p => { peak = Math.max(peak, p.residentBytes + p.counters.inflightBytes) } })
    for (const [e, epoch] of result.epochs.entries()) t.ok(epoch.every(open => open.served === open.opened), `${fraction * 100}% memory, epoch ${e}: every open got its own file`)
    checkEpochsExact(t, layout, result)
    t.equal(result.counters.exactRepeats, 0, 'nothing served twice')
    t.ok(peak <= memoryBytes, `peak ${peak} ≤ budget ${memoryBytes}`)
  }
})

t.test('a loader mixing exact and plain opens: each repeat costs its epoch one other file, and every class stays in step with the trainer', async t => {
  for (const blockSize of [1, 4]) {
    const { layout, memoryBytes } = setUp(many, 0.1, blockSize)
    const result = simulateShared(layout, { memoryBytes, epochs: 4, seed: 6, readers: 8, exactShare: 0.3 })
    let extras = 0
    for (const [e, epoch] of result.epochs.entries()) {
      t.ok(epoch.filter(open => open.exact).every(open => open.served === open.opened), `block ${blockSize}, epoch ${e}: exact opens got their own file`)
      t.ok(epoch.every(open => open.served !== undefined && layout.files[open.served].group === layout.files[open.opened].group), `block ${blockSize}, epoch ${e}: labels right`)
      // A class whose epoch ended a file after the trainer's would begin the next epoch with that file: one more twice, one more missed.
      const { extra, missing } = extraAndMissing(layout, epoch)
      t.equal(missing, extra, `block ${blockSize}, epoch ${e}: ${extra} files served twice, as many missed`)
      extras += extra
    }
    t.ok(extras > 0, `${extras} repeats in all`)
    t.equal(result.counters.exactRepeats, extras, 'every file served twice in an epoch was a counted exact repeat')
  }
})

/** Drives opens one at a time to their answers, every load finished at once; readahead off. Gives what each open got. */
function serveInTurn (protocol: SharedProtocol, opens: readonly FileId[], unreadable: ReadonlySet<FileId> = new Set()): (FileId | undefined)[] {
  return opens.map(file => {
    const decision = protocol.open(file)
    if (decision.kind === 'serve') return decision.file
    if (decision.kind !== 'load') throw new Error(`open of ${file}: ${decision.kind}, with nothing in flight`)
    return protocol.finishLoad(decision.plan, new Set(decision.plan.files.filter(f => !unreadable.has(f)))).served
  })
}

t.test('a new run mid-epoch, with a load still out: the next run\'s epochs serve every file once', async t => {
  const { layout, memoryBytes } = setUp(many, 0.1)
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 3 })
  const every = layout.files.map((_, id) => fileId(id))
  serveInTurn(protocol, every.slice(0, 700))
  // The old run's next open that needs a load: its read is still out when the new run begins.
  let out: SharedLoadPlan | undefined
  for (let next = 700; out === undefined; next++) {
    const decision = protocol.open(every[next])
    if (decision.kind === 'load') out = decision.plan
  }
  const dropped = protocol.startNewRun()
  t.ok(dropped.length > 0, `${dropped.length} files waiting in memory dropped`)
  // It lands as the new run's; its answer is the old run's opener's, who is gone: the engine gives it back.
  const { served } = protocol.finishLoad(out, new Set(out.files))
  t.equal(protocol.returnUnserved(served!), 'placed', 'the answer the old run\'s opener never got waits for the new run')
  for (let epoch = 0; epoch < 2; epoch++) t.same(multiset(serveInTurn(protocol, every)), every, `the new run's epoch ${epoch}: every file once`)
  t.equal(protocol.counters.newRuns, 1)
})

t.test('a new run after a whole epoch keeps what was read ahead for the next one', async t => {
  const { layout, memoryBytes } = setUp(many, 0.5)
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 3 })
  const every = layout.files.map((_, id) => fileId(id))
  serveInTurn(protocol, every)
  for (let plan = protocol.readahead(); plan !== undefined; plan = protocol.readahead()) protocol.finishLoad(plan, new Set(plan.files))
  const held = protocol.residentBytes
  t.ok(held > 0, 'files were read for the next epoch')
  t.same(protocol.startNewRun(), [], 'nothing dropped')
  t.equal(protocol.residentBytes, held)
  t.same(multiset(serveInTurn(protocol, every)), every, 'the new run\'s epoch serves every file once, those read ahead included')
})

t.test('readahead leaves room for the bytes open files still hold: resident, in flight and held stay within the budget', async t => {
  const { layout, memoryBytes } = setUp(many, 0.1)
  let held = 0
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 3, heldByOpens: () => held })
  const readAll = (): void => { for (let plan = protocol.readahead(); plan !== undefined; plan = protocol.readahead()) protocol.finishLoad(plan, new Set(plan.files)) }
  held = Math.round(memoryBytes / 2)
  readAll()
  t.ok(protocol.residentBytes > 0, 'it read ahead into what open files left')
  t.ok(protocol.residentBytes + held <= memoryBytes, `${protocol.residentBytes} resident + ${held} held within ${memoryBytes}`)
  t.ok(protocol.counters.readaheadHeldBack > 0, 'readahead held back by open files is counted')
  const withHalfHeld = protocol.residentBytes
  held = 0
  readAll()
  t.ok(protocol.residentBytes > withHalfHeld, 'once the files are closed, it reads ahead into their room')
  t.ok(protocol.residentBytes <= memoryBytes)
})

t.test('reset drops every stock and starts each class afresh', async t => {
  const { layout, memoryBytes } = setUp(many, 0.1)
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 3 })
  const every = layout.files.map((_, id) => fileId(id))
  serveInTurn(protocol, every.slice(0, 1000))
  const resident = protocol.residentBytes
  const dropped = protocol.reset()
  t.equal(dropped.reduce((sum, file) => sum + layout.files[file].size, 0), resident, 'the dropped files are every byte that was held')
  t.equal(protocol.residentBytes, 0)
  t.same(multiset(serveInTurn(protocol, every)), every, 'the next epoch serves every file once')
})

t.test('a file whose opener went away goes back to its class\'s stock and is served once that epoch', async t => {
  const { layout, memoryBytes } = setUp(many, 0.1)
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 3 })
  const every = layout.files.map((_, id) => fileId(id))
  const [lost] = serveInTurn(protocol, every.slice(0, 1))
  t.equal(protocol.returnUnserved(lost!), 'placed')
  const rest = serveInTurn(protocol, every.slice(1))
  t.same(multiset([...rest, ...serveInTurn(protocol, every.slice(0, 1))]), every, 'the epoch still serves every file once, the given-back one too')
  t.equal(protocol.counters.returnedFiles, 1)
  // The class's next open begins its next epoch: what its last one served is that epoch's to load, not to place.
  const group = layout.groupOf[every[0]]
  serveInTurn(protocol, [every[0]])
  t.equal(protocol.returnUnserved(rest.find(file => layout.groupOf[file!] === group)!), 'dropped', 'a file of an epoch that ended is not placed')
})

t.test('an open charged with an unreadable file that must not count gives the charge back: the file is loadable again', async t => {
  const { layout } = setUp(many, 0.1, 16)
  const protocol = new SharedProtocol(layout, { memoryBytes: 0, seed: 1 })
  const opened = layout.filesOfGroup[7][0]
  const first = protocol.open(opened)
  if (first.kind !== 'load') throw new Error(`expected a load, got ${first.kind}`)
  const charged = first.plan.answer!
  t.equal(protocol.finishLoad(first.plan, new Set()).served, undefined)
  protocol.uncharge(charged)
  t.equal(protocol.counters.failedOpens, 0)
  const served = serveInTurn(protocol, layout.filesOfGroup[7])
  t.same(multiset(served), multiset([...layout.filesOfGroup[7]]), 'the class\'s epoch serves each of its files once, the uncharged one too')
})

t.test('an exact open of a file served in this epoch is read again for its opener alone, and another file of its class sits the epoch out', async t => {
  const { layout } = setUp(many, 0.1, 4)
  const protocol = new SharedProtocol(layout, { memoryBytes: layout.totalBytes, seed: 2 })
  const group = layout.filesOfGroup.findIndex(files => files.length >= 6)
  const members = layout.filesOfGroup[group]
  const [first] = serveInTurn(protocol, members.slice(0, 1))
  const decision = protocol.open(first!, { exact: true })
  if (decision.kind !== 'load') throw new Error(`expected a load, got ${decision.kind}`)
  t.same(decision.plan.files, [first], 'the read brings that file alone')
  t.equal(decision.plan.bytes, 0, 'for its opener: outside the budget')
  t.equal(protocol.finishLoad(decision.plan, new Set(decision.plan.files)).served, first)
  t.equal(protocol.counters.exactRepeats, 1)
  const rest = serveInTurn(protocol, members.slice(2))
  t.equal(new Set([first, ...rest]).size, members.length - 1, 'the class\'s other opens get every other file but one')
  t.equal(protocol.open(members[1]).kind === 'serve' ? 'served' : 'next epoch', 'next epoch', 'and its next open begins the next epoch')
})

t.test('any shape, memory and readers, with exact opens among the others: labels right, exact opens get their file, each repeat costs one file, within the budget', async t => {
  const shape = fc.record({
    ...layoutShape({ classes: 30, filesPerClass: 40, chunkSize: 16 }),
    readers: fc.integer({ min: 1, max: 12 }),
    seed: fc.integer({ min: 0, max: 1000 }),
    exactShare: fc.constantFrom(0.1, 0.5, 1)
  })
  fc.assert(fc.property(shape, ({ classSizes, chunkSize, blockSize, memoryFraction, readers, seed, exactShare }) => {
    const files = makeSamples(seed, classSizes)
    const memoryBytes = Math.round(files.reduce((sum, f) => sum + f.size, 0) * memoryFraction)
    const layout = buildSharedLayout(files, { chunkSize, blockSize, seed })
    let peak = 0
    const result = simulateShared(layout, { memoryBytes, epochs: 3, seed, readers, exactShare, onStep: p => { peak = Math.max(peak, p.residentBytes + p.counters.inflightBytes) } })
    let extras = 0
    for (const epoch of result.epochs) {
      if (!epoch.every(open => open.served !== undefined && files[open.served].group === files[open.opened].group)) return false
      if (!epoch.every(open => !open.exact || open.served === open.opened)) return false
      const { extra, missing } = extraAndMissing(layout, epoch)
      if (missing !== extra) return false
      extras += extra
    }
    return extras === result.counters.exactRepeats && peak <= memoryBytes
  }), { numRuns: 100, seed: 42 })
  t.pass('100 random shapes')
})

t.test('any shape and memory, a new run at any point of an epoch (a read still out or not): the new run\'s epochs serve every file once', async t => {
  const shape = fc.record({
    ...layoutShape({ classes: 30, filesPerClass: 40, chunkSize: 16 }),
    seed: fc.integer({ min: 0, max: 1000 }),
    before: fc.double({ min: 0, max: 1.5, noNaN: true }),
    reset: fc.boolean()
  })
  fc.assert(fc.property(shape, ({ classSizes, chunkSize, blockSize, memoryFraction, seed, before, reset }) => {
    const files = makeSamples(seed, classSizes)
    const memoryBytes = Math.round(files.reduce((sum, f) => sum + f.size, 0) * memoryFraction)
    const layout = buildSharedLayout(files, { chunkSize, blockSize, seed })
    const protocol = new SharedProtocol(layout, { memoryBytes, seed })
    const every = files.map((_, id) => fileId(id))
    const opened = Math.floor(before * every.length)
    serveInTurn(protocol, [...every, ...every].slice(0, opened))
    const out = [protocol.readahead(), protocol.readahead()].filter(plan => plan !== undefined)
    if (reset) protocol.reset()
    else protocol.startNewRun()
    for (const plan of out) protocol.finishLoad(plan, new Set(plan.files))
    for (let epoch = 0; epoch < 2; epoch++) {
      if (JSON.stringify(multiset(serveInTurn(protocol, every))) !== JSON.stringify(every)) return false
    }
    return protocol.residentBytes + protocol.counters.inflightBytes <= memoryBytes
  }), { numRuns: 150, seed: 43 })
  t.pass('150 random shapes')
})
