// The engine on its own, without FUSE or a disk: a fake chunk source with
// failure injection (lost files, a fetch that rejects, slow loads) stands
// for the directory and the pack; the real-mount tests cover those.
import pino from 'pino'
import t from 'tap'
import { capacityFor } from '../../src/chunks/sample-buffers'
import { Engine, NotOwnedHere, type ServedFile } from '../../src/engine/engine'
import { FsError } from '../../src/errors'
import { planMemory } from '../../src/redirect/budget'
import { allVcs, buildLayout, type FileId, type Layout, type VcId } from '../../src/redirect/layout'
import { Protocol, type RedirectMode } from '../../src/redirect/protocol'
import { bytesOf, FakeSource } from '../helpers/fake-source'
import { fileId, vcId } from '../helpers/ids'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

const files = makeSamples(3, UNEVEN_CLASSES)
const datasetBytes = files.reduce((sum, f) => sum + f.size, 0)
const MODES: RedirectMode[] = ['strict', 'pool', 'mix', 'off']

function engineFor (mode: RedirectMode, source: FakeSource, memoryFraction = 0.25): { engine: Engine, layout: Layout, memoryBytes: number, protocol: Protocol } {
  const memoryBytes = Math.round(datasetBytes * memoryFraction)
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: planMemory(files, 16, memoryBytes).vcCount })
  const protocol = new Protocol(layout, { mode, memoryBytes, seed: 1, mixBlock: 4 })
  return { engine: new Engine(protocol, source, source.buffers, pino({ level: 'silent' })), layout, memoryBytes, protocol }
}

interface Outcome { opened: FileId, served?: ServedFile, error?: unknown }

const lentBytes = (source: FakeSource): number => { const { slabBytes, idleBytes } = source.buffers.stats(); return slabBytes - idleBytes }

/** One epoch: every file opened once, in a shuffled order, by `readers` concurrent callers. */
async function epoch (engine: Engine, seed: number, readers = 8): Promise<Outcome[]> {
  const order = files.map((_, id) => fileId(id)).sort((a, b) => ((a * 7919 + seed * 104729) % 1009) - ((b * 7919 + seed * 104729) % 1009))
  const outcomes: Outcome[] = []
  let next = 0
  await Promise.all(Array.from({ length: readers }, async () => {
    while (next < order.length) {
      const opened = order[next++]
      try {
        outcomes.push({ opened, served: await engine.open(opened) })
      } catch (error) {
        outcomes.push({ opened, error })
      }
    }
  }))
  return outcomes
}

const servedFiles = (outcomes: Outcome[]): FileId[] => outcomes.flatMap(o => o.served === undefined ? [] : [o.served.file]).sort((a, b) => a - b)
const everyFile = files.map((_, id) => fileId(id))

for (const mode of MODES) {
  t.test(`${mode}: 8 concurrent callers, 3 epochs: every file once per epoch, with its own bytes and the opened file's group`, async t => {
    const { engine } = engineFor(mode, new FakeSource())
    for (let e = 0; e < 3; e++) {
      const outcomes = await epoch(engine, e)
      t.same(outcomes.filter(o => o.error !== undefined), [], `epoch ${e}: no open failed`)
      t.same(servedFiles(outcomes), everyFile, `epoch ${e}: the served files are the dataset`)
      t.ok(outcomes.every(o => o.served!.bytes.equals(bytesOf(o.served!.file))), `epoch ${e}: every file came with its own bytes`)
      t.ok(outcomes.every(o => files[o.served!.file].group === files[o.opened].group), `epoch ${e}: every open got a file of its group`)
    }
  })

  t.test(`${mode}: files the source loses fail one open each per epoch with EIO; the rest are served once`, async t => {
    const source = new FakeSource()
    const { engine } = engineFor(mode, source)
    const lost = [5, 300, 612].filter(file => file < files.length).map(fileId)
    for (const file of lost) source.lost.add(file)
    for (let e = 0; e < 2; e++) {
      const outcomes = await epoch(engine, e)
      const failures = outcomes.filter(o => o.error !== undefined)
      t.equal(failures.length, lost.length, `epoch ${e}: one failed open per lost file`)
      t.ok(failures.every(o => o.error instanceof FsError && o.error.errno === 'EIO'), 'each with EIO')
      t.same(servedFiles(outcomes), everyFile.filter(file => !lost.includes(file)), `epoch ${e}: every other file once`)
    }
  })

  t.test(`${mode}: a chunk whose fetch rejects costs at most its files' opens, with EIO, that epoch only`, async t => {
    const source = new FakeSource()
    const { engine, layout } = engineFor(mode, source)
    const damaged = layout.filePc[0]
    source.rejectOnce.add(damaged)
    const first = await epoch(engine, 0)
    t.equal(source.rejectOnce.size, 0, 'the damaged chunk was fetched')
    const failed = first.filter(o => o.error !== undefined)
    t.ok(failed.every(o => o.error instanceof FsError && o.error.errno === 'EIO'), `${failed.length} opens failed, each with EIO`)
    t.equal(first.length, files.length, 'no open was lost')
    t.equal(new Set(servedFiles(first)).size, first.length - failed.length, 'no file twice')
    const second = await epoch(engine, 1)
    t.same(servedFiles(second), everyFile, 'the next epoch reads the chunk again and serves everything')
  })
}

for (const mode of ['pool', 'mix'] as RedirectMode[]) {
  t.test(`${mode}: with slow loads, opens wait for the load in flight; every file is fetched once per epoch`, async t => {
    const source = new FakeSource()
    source.delayMs = 5
    const { engine, layout, protocol } = engineFor(mode, source)
    /** Files read ahead for the next epoch (an epoch ends with every file served, so every staged chunk is the next epoch's). */
    const stagedForNext = (): FileId[] => allVcs(layout).flatMap(vc => protocol.slots.staged(vc) ?? [])
    const sorted = (ids: FileId[]): FileId[] => [...ids].sort((a, b) => a - b)
    let readAhead: FileId[] = []
    for (let e = 0; e < 2; e++) {
      source.fetches.length = 0
      const outcomes = await epoch(engine, e, 16)
      await engine.drain()
      t.same(servedFiles(outcomes), everyFile, `epoch ${e}: the dataset`)
      // What this epoch fetched, with what the last one read ahead for it, is the dataset and what this one read ahead for the next.
      const fetched = source.fetches.flatMap(request => request.files)
      t.same(sorted([...fetched, ...readAhead]), sorted([...everyFile, ...stagedForNext()]), `epoch ${e}: each file fetched exactly once for it`)
      readAhead = stagedForNext()
    }
    t.ok(engine.stats().protocol.waitedOpens > 0, 'some opens waited for a load')
  })
}

t.test('a directory-like source gets a mix load of several chunks as one request', async t => {
  const source = new FakeSource({ readsFileByFile: true })
  const { engine, layout } = engineFor('mix', source)
  await epoch(engine, 0)
  t.ok(source.fetches.some(request => new Set(request.files.map(file => layout.filePc[file])).size > 1), 'a request spans chunks')
})

t.test('readahead keeps resident and in-flight bytes within the budget', async t => {
  const source = new FakeSource()
  source.delayMs = 2
  const { engine, memoryBytes } = engineFor('mix', source, 0.25)
  for (let e = 0; e < 2; e++) await epoch(engine, e)
  const { protocol } = engine.stats()
  t.ok(protocol.peakResidentBytes <= memoryBytes, `peak ${protocol.peakResidentBytes} of ${memoryBytes} bytes`)
  t.ok(protocol.readaheadLoads > 0, 'loads ran ahead of need')
})

t.test('reset drops what is in memory and the next epoch serves every file once', async t => {
  const { engine } = engineFor('pool', new FakeSource())
  for (const file of everyFile.slice(0, 100)) await engine.open(file)
  await engine.drain()
  t.ok(engine.reset() > 0, 'files waiting in memory were dropped')
  t.same(servedFiles(await epoch(engine, 3)), everyFile)
})

t.test("a reset gives the dropped files' buffers back for the next loads", async t => {
  const source = new FakeSource()
  const { engine } = engineFor('pool', source)
  const lentBytes = (): number => { const { slabBytes, idleBytes } = source.buffers.stats(); return slabBytes - idleBytes }
  for (const file of everyFile.slice(0, 100)) source.buffers.give((await engine.open(file)).bytes) // as release does
  await engine.drain()
  const stillLent = lentBytes()
  const dropped = engine.reset()
  t.ok(dropped > 0, 'files were waiting in memory')
  // Every file here is under 64 bytes, so each buffer is a 64-byte slot: what is lent is the resident files'.
  t.equal(stillLent, dropped * capacityFor(1))
  t.equal(lentBytes(), 0, 'nothing is lent after the reset')
})

for (const mode of MODES) {
  t.test(`${mode}: after 3 epochs with every open released and a reset, no buffer stays lent`, async t => {
    const source = new FakeSource()
    const { engine } = engineFor(mode, source, 0.5)
    const lentBytes = (): number => { const { slabBytes, idleBytes } = source.buffers.stats(); return slabBytes - idleBytes }
    for (let e = 0; e < 3; e++) {
      for (const outcome of await epoch(engine, 40 + e)) if (outcome.served !== undefined) source.buffers.give(outcome.served.bytes)
    }
    // A finished load starts the next readahead on the following turn: settle before the reset drops what is held.
    for (let turn = 0; turn < 20; turn++) {
      await engine.drain()
      await new Promise(resolve => setImmediate(resolve))
    }
    engine.reset()
    t.equal(lentBytes(), 0, 'every buffer is back')
  })
}

/** Lets finished loads start their readahead (on the following turn) and those loads end. */
async function settle (engine: Engine): Promise<void> {
  for (let turn = 0; turn < 20; turn++) {
    await engine.drain()
    await new Promise(resolve => setImmediate(resolve))
  }
}

/** The files of the first VC of at least `pcs` chunks, and the VC. */
function vcOfChunks (layout: Layout, pcs: number): { vc: VcId, vcFiles: FileId[] } {
  const vc = vcId(layout.vcs.findIndex(v => v.pcs.length >= pcs))
  return { vc, vcFiles: layout.vcs[vc].pcs.flatMap(pc => layout.pcs[pc].files) }
}

const sortedIds = (ids: FileId[]): FileId[] => [...ids].sort((a, b) => a - b)

for (const mode of ['pool', 'mix'] as RedirectMode[]) {
  t.test(`${mode}: a file given back after its VC staged its next epoch gives that chunk's bytes back, and both epochs serve each file once`, async t => {
    const source = new FakeSource()
    const { engine, layout, memoryBytes, protocol } = engineFor(mode, source, 0.5)
    const { vc, vcFiles } = vcOfChunks(layout, 3)
    const served: ServedFile[] = []
    for (const file of vcFiles) { served.push(await engine.open(file)); await settle(engine) }
    const staged = protocol.slots.staged(vc)
    t.ok(staged !== undefined && staged.length > 0, 'served out, the VC read ahead for its next epoch')
    // Its opener went away: the file goes back to its slot, and the chunk read into its room is given up.
    const victim = served.find(s => staged?.includes(s.file) !== true)!
    const lentBefore = lentBytes(source)
    engine.giveBack(victim)
    t.equal(protocol.slots.staged(vc), undefined, 'the next epoch\'s chunk is given up')
    t.ok(protocol.slots.residentBytes <= memoryBytes, 'within --memory')
    t.ok(lentBytes(source) < lentBefore, 'its bytes went back to the pool')
    const again = await engine.open(victim.file)
    t.ok(again.bytes.equals(bytesOf(again.file)))
    t.same(sortedIds([...served.filter(s => s !== victim).map(s => s.file), again.file]), sortedIds(vcFiles), 'this epoch served each file once')
    for (const s of served) if (s !== victim) source.buffers.give(s.bytes)
    source.buffers.give(again.bytes)
    await settle(engine)
    const next: FileId[] = []
    for (const file of vcFiles) {
      const s = await engine.open(file)
      t.ok(s.bytes.equals(bytesOf(s.file)), `the bytes of file ${s.file}`)
      next.push(s.file)
      source.buffers.give(s.bytes)
      await settle(engine)
    }
    t.same(sortedIds(next), sortedIds(vcFiles), 'the next epoch serves each file once')
    await settle(engine)
    engine.reset()
    t.equal(lentBytes(source), 0, 'every buffer is back')
  })

  t.test(`${mode}: an exact open of a file the VC staged early for its next epoch gets the load's own copy, and the staged chunk keeps its bytes`, async t => {
    const source = new FakeSource()
    const { engine, layout, protocol } = engineFor(mode, source, 0.5)
    let found = false
    for (const v of allVcs(layout)) {
      const vcFiles = layout.vcs[v].pcs.flatMap(pc => layout.pcs[pc].files)
      const servedThisEpoch = new Set<FileId>()
      for (const file of vcFiles) {
        const served = await engine.open(file)
        servedThisEpoch.add(served.file)
        source.buffers.give(served.bytes)
        await settle(engine)
        // Staged early: a chunk of files served this epoch, read for the next while this one still has files in its slots.
        const repeated = protocol.slots.staged(v)?.find(f => servedThisEpoch.has(f))
        if (repeated === undefined || protocol.slots.validSlots(v) === 0) continue
        found = true
        const exact = await engine.open(repeated, { exact: true })
        t.equal(exact.file, repeated)
        t.ok(exact.bytes.equals(bytesOf(repeated)), 'the exact open gets its own bytes')
        source.buffers.give(exact.bytes)
        for (let i = 0; i < vcFiles.length * 2; i++) {
          const s = await engine.open(vcFiles[i % vcFiles.length])
          t.ok(s.bytes.equals(bytesOf(s.file)), `the bytes of file ${s.file}`)
          source.buffers.give(s.bytes)
          await settle(engine)
        }
        break
      }
      if (found) break
    }
    t.ok(found, 'a VC staged its next epoch while it still served')
  })
}

t.test('drain waits for every readahead load in flight', async t => {
  const source = new FakeSource()
  source.delayMs = 20
  const { engine } = engineFor('pool', source)
  // Open until a readahead load is out after an open has its answer (it starts once the woken opens had their turn).
  for (const file of everyFile) {
    if (source.inFlight > 0) break
    await engine.open(file)
    await new Promise(resolve => setImmediate(resolve))
  }
  t.ok(source.inFlight > 0, 'a readahead load is in flight')
  await engine.drain()
  t.equal(source.inFlight, 0, 'no load in flight after drain')
})

t.test('an open waiting on a load of a VC this node stops answering for meanwhile (fenced, or a new owner) fails as not owned here, to be decided again where the VC is', async t => {
  const source = new FakeSource()
  // Long enough that the load is still out when the second open decides, on a loaded machine too.
  source.delayMs = 500
  const { engine, layout } = engineFor('pool', source)
  const vc = layout.pcs[layout.filePc[0]].vc
  const ofVc = everyFile.filter(file => layout.pcs[layout.filePc[file]].vc === vc)
  const first = engine.open(ofVc[0]).then(served => served, (err: unknown) => err)
  await new Promise(resolve => setImmediate(resolve))
  t.equal(source.inFlight, 1, 'the first open\'s load is out')
  const second = engine.open(ofVc[1]).then(served => served, (err: unknown) => err)
  engine.setOwnership(() => false)
  const waited = await second
  t.ok(waited instanceof NotOwnedHere, `the open that waited on the load is not failed as the file's error: ${String(waited)}`)
  const loaded = await first
  t.notOk(loaded instanceof Error, `the open whose load it was has its answer: ${String(loaded)}`)
  await engine.drain()
})
