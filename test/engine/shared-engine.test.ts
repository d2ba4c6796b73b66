// The shared layout's engine on its own, without FUSE or a disk: a fake
// source read file by file (as a directory is), with lost files and slow
// loads; test/daemon/shared-layout.test.ts mounts it for real.
import pino from 'pino'
import t from 'tap'
import { OrphanedOpen, type ServedFile } from '../../src/engine/engine'
import { SharedEngine } from '../../src/engine/shared-engine'
import { FsError } from '../../src/errors'
import type { FileId } from '../../src/redirect/layout'
import { buildSharedLayout, type SharedLayout } from '../../src/redirect/shared-layout'
import { SharedProtocol } from '../../src/redirect/shared-protocol'
import { bytesOf, FakeSource } from '../helpers/fake-source'
import { fileId } from '../helpers/ids'
import { makeSamples } from '../helpers/samples'

/** 300 classes of 2 to 8 files. */
const files = makeSamples(5, Array.from({ length: 300 }, (_, c) => 2 + c % 7))
const datasetBytes = files.reduce((sum, f) => sum + f.size, 0)

function engineFor (source: FakeSource, memoryFraction = 0.05): { engine: SharedEngine, layout: SharedLayout, protocol: SharedProtocol, memoryBytes: number } {
  const memoryBytes = Math.round(datasetBytes * memoryFraction)
  const layout = buildSharedLayout(files, { chunkSize: 64, blockSize: 1, seed: 7 })
  const protocol = new SharedProtocol(layout, { memoryBytes, seed: 1 })
  return { engine: new SharedEngine(protocol, source, source.buffers, pino({ level: 'silent' })), layout, protocol, memoryBytes }
}

interface Outcome { opened: FileId, served?: ServedFile, ownBytes?: boolean, error?: unknown }

/** One epoch: every file opened once, in a shuffled order, by 8 concurrent callers; each answer released as a reader's handle is. */
async function epoch (engine: SharedEngine, source: FakeSource, seed: number): Promise<Outcome[]> {
  const order = files.map((_, id) => fileId(id)).sort((a, b) => ((a * 7919 + seed * 104729) % 1009) - ((b * 7919 + seed * 104729) % 1009))
  const outcomes: Outcome[] = []
  let next = 0
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next < order.length) {
      const opened = order[next++]
      try {
        const served = await engine.open(opened)
        // Checked before the buffer goes back: the next load reuses it.
        outcomes.push({ opened, served, ownBytes: served.bytes.equals(bytesOf(served.file)) })
        source.buffers.give(served.bytes)
      } catch (error) {
        outcomes.push({ opened, error })
      }
    }
  }))
  return outcomes
}

t.test('3 epochs, slow loads, 8 callers: every file once per epoch, its own bytes, a file of the opened class; memory within budget', async t => {
  const source = new FakeSource({ readsFileByFile: true })
  source.delayMs = 2
  const { engine, protocol, memoryBytes } = engineFor(source)
  let peak = 0
  const watch = setInterval(() => { peak = Math.max(peak, protocol.residentBytes + protocol.counters.inflightBytes) }, 1)
  t.teardown(() => clearInterval(watch))
  for (let e = 0; e < 3; e++) {
    const outcomes = await epoch(engine, source, e)
    t.ok(outcomes.every(o => o.served !== undefined && o.ownBytes === true && files[o.served.file].group === files[o.opened].group), `epoch ${e}: every answer its own bytes, of the opened class`)
    t.same(outcomes.map(o => o.served!.file).sort((a, b) => a - b), files.map((_, id) => id), `epoch ${e}: every file once`)
  }
  await engine.drain()
  t.ok(protocol.counters.peakResidentBytes <= memoryBytes && peak <= memoryBytes, `peak ${Math.max(peak, protocol.counters.peakResidentBytes)} of ${memoryBytes}`)
})

t.test('a lost file fails one open per epoch with EIO; every other file is served once', async t => {
  const source = new FakeSource({ readsFileByFile: true })
  const lost = fileId(17)
  source.lost.add(lost)
  const { engine } = engineFor(source)
  for (let e = 0; e < 2; e++) {
    const outcomes = await epoch(engine, source, e)
    const failed = outcomes.filter(o => o.error !== undefined)
    t.equal(failed.length, 1, `epoch ${e}: one open failed`)
    t.equal((failed[0].error as FsError).errno, 'EIO')
    t.same(outcomes.flatMap(o => o.served === undefined ? [] : [o.served.file]).sort((a, b) => a - b), files.map((_, id) => id).filter(id => id !== lost), `epoch ${e}: every other file once`)
  }
})

t.test('an answer its opener no longer wants goes back to its class before the opens waiting on that class decide', async t => {
  const source = new FakeSource({ readsFileByFile: true })
  source.delayMs = 5
  const { engine, layout } = engineFor(source, 0)
  const [a, b] = layout.filesOfGroup[0]
  const orphan = engine.open(a, { wanted: () => false })
  const waiting = engine.open(b)
  await t.rejects(orphan, new OrphanedOpen())
  const served = await waiting
  t.equal(files[served.file].group, files[a].group)
  source.buffers.give(served.bytes)
  const rest = await engine.open(a)
  t.not(rest.file, served.file, 'the class\'s two files, one each: the unwanted answer was not lost')
})

t.test('a new run drops what waits in memory, and its epochs serve every file once', async t => {
  const source = new FakeSource({ readsFileByFile: true })
  const { engine } = engineFor(source, 0.2)
  // Half an epoch, then a new run.
  for (const file of files.map((_, id) => fileId(id)).slice(0, 600)) source.buffers.give((await engine.open(file)).bytes)
  t.ok(engine.startNewRun() > 0, 'files waiting in memory were dropped')
  t.equal(engine.newRuns, 1)
  for (let e = 0; e < 2; e++) {
    const outcomes = await epoch(engine, source, 10 + e)
    t.same(outcomes.map(o => o.served!.file).sort((a, b) => a - b), files.map((_, id) => id), `the new run's epoch ${e}: every file once`)
  }
  await engine.drain()
})
