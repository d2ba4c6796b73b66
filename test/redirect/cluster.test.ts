// The cluster protocol with no network: three nodes' protocols and mirrors
// driven by DistributedSampler-like traces, with requests, batches and
// reclaims racing. What the trainers receive together must be the dataset.
import t from 'tap'
import { planMemory } from '../../src/redirect/budget'
import { simulateCluster, type ClusterOpen } from '../../src/redirect/cluster-simulator'
import { buildLayout, type FileId, type Layout } from '../../src/redirect/layout'
import { MirrorTable } from '../../src/redirect/mirror'
import { Protocol, type OpenDecision, type OpenOptions, type RedirectMode } from '../../src/redirect/protocol'
import { planAdoption } from '../../src/redirect/takeover'
import { nodeId, vcId } from '../helpers/ids'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

/** The redirecting modes, taken in turn by the many-seed scenarios. */
const MODES: RedirectMode[] = ['strict', 'pool', 'mix']

const files = makeSamples(21, UNEVEN_CLASSES)
const datasetBytes = files.reduce((sum, f) => sum + f.size, 0)
const everyFile = files.map((_, id) => id)

function clusterLayout (nodes: number, memoryFraction: number, chunkSize = 8): { layout: Layout, memoryBytes: number } {
  // Each node's memory is a share of the dataset.
  const memoryBytes = Math.round(datasetBytes * memoryFraction)
  const { vcCount } = planMemory(files, chunkSize, memoryBytes, nodes)
  return { layout: buildLayout(files, { chunkSize, seed: 4, vcCount, nodes }), memoryBytes }
}

const sorted = (opens: ClusterOpen[]): number[] => opens.map(o => o.served ?? -1).sort((a, b) => a - b)

for (const mode of ['strict', 'pool', 'mix'] as RedirectMode[]) {
  for (const prefetch of [true, false]) {
    t.test(`${mode}, prefetch ${prefetch ? 'on' : 'off'}, 3 nodes x 4 readers, 4 epochs: the union of what the trainers get is the dataset, labels safe`, async t => {
      const { layout, memoryBytes } = clusterLayout(3, 0.1)
      const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / 4, epochs: 4, seed: 7, readers: 4, prefetch })
      for (const [e, epoch] of result.epochs.entries()) {
        t.equal(epoch.filter(o => o.served === undefined || files[o.served].group !== files[o.opened].group).length, 0, `epoch ${e}: every open got a file of its own class`)
        t.same(sorted(epoch), everyFile, `epoch ${e}: every sample exactly once across the nodes`)
      }
      const shipped = result.protocols.reduce((sum, p) => sum + p.counters.prefetchShipped, 0)
      const used = result.mirrors.reduce((sum, m) => sum + m.counters.prefetchUsed, 0)
      if (prefetch) t.ok(shipped > 0 && used > 0, `prefetch shipped ${shipped} files and ${used} were used`)
      else t.equal(shipped, 0, 'nothing shipped without prefetch')
    })
  }

  t.test(`${mode}: prefetch means fewer requests per remote sample`, async t => {
    const { layout, memoryBytes } = clusterLayout(3, 0.1)
    const rate = (prefetch: boolean): number => {
      const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / 4, epochs: 2, seed: 3, readers: 4, prefetch })
      const requests = result.mirrors.reduce((sum, m) => sum + m.counters.remoteRequests, 0)
      const remoteOpens = result.mirrors.reduce((sum, m) => sum + m.counters.remoteOpens, 0)
      return requests / remoteOpens
    }
    const without = rate(false)
    const withPrefetch = rate(true)
    t.equal(without, 1, 'without prefetch every remote open is a request')
    t.ok(withPrefetch < without, `with prefetch ${withPrefetch.toFixed(2)} requests per remote sample`)
  })

  t.test(`${mode}: mirrors stay within the remote memory`, async t => {
    const { layout, memoryBytes } = clusterLayout(3, 0.1)
    const remoteMemoryBytes = Math.round(memoryBytes / 10)
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes, epochs: 2, seed: 5, readers: 8 })
    for (const mirror of result.mirrors) t.ok(mirror.counters.peakMirrorBytes <= remoteMemoryBytes, `peak ${mirror.counters.peakMirrorBytes} ≤ ${remoteMemoryBytes}`)
  })
}

t.test('reclaims happen and recover files stuck in mirrors at the end of an epoch', async t => {
  const { layout, memoryBytes } = clusterLayout(3, 0.1)
  const result = simulateCluster(layout, { mode: 'strict', memoryBytes, remoteMemoryBytes: memoryBytes, epochs: 3, seed: 11, readers: 4 })
  const reclaimed = result.protocols.reduce((sum, p) => sum + p.counters.reclaimedFiles, 0)
  t.ok(reclaimed > 0, `${reclaimed} files given back`)
})

t.test('off: every node gets exactly the files it opened', async t => {
  const { layout, memoryBytes } = clusterLayout(3, 0.1)
  const result = simulateCluster(layout, { mode: 'off', memoryBytes, remoteMemoryBytes: memoryBytes, epochs: 2, seed: 2, readers: 4 })
  for (const epoch of result.epochs) t.equal(epoch.filter(o => o.served !== o.opened).length, 0)
})

t.test('two nodes and many seeds: exactly once holds for every seed', async t => {
  for (let seed = 0; seed < 12; seed++) {
    const { layout, memoryBytes } = clusterLayout(2 + (seed % 3), 0.08, 4)
    const mode = MODES[Math.floor(seed / 3) % MODES.length]
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / 3, epochs: 3, seed, readers: 1 + (seed % 6) })
    const bad = result.epochs.filter(epoch => JSON.stringify(sorted(epoch)) !== JSON.stringify(everyFile)).length
    t.equal(bad, 0, `seed ${seed}, ${layout.nodes} nodes, ${mode}: every epoch exact`)
  }
})

t.test('answers lost on their way (a broken connection) and asked for again: exactly once holds for every seed', async t => {
  for (let seed = 0; seed < 24; seed++) {
    const { layout, memoryBytes } = clusterLayout(2 + (seed % 4), [0.1, 0.15, 0.2][seed % 3], [4, 8, 2][seed % 3])
    const mode = MODES[seed % MODES.length]
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / (1 + seed % 3), epochs: 3, seed, readers: 1 + (seed % 6), prefetch: seed % 5 !== 4, loseOneAnswerIn: 3 + (seed % 8) })
    const bad = result.epochs.filter(epoch => JSON.stringify(sorted(epoch)) !== JSON.stringify(everyFile)).length
    const found = result.protocols.reduce((sum, p) => sum + p.counters.lostAnswers, 0)
    t.ok(bad === 0 && result.answersLost > 0, `seed ${seed}, ${layout.nodes} nodes, ${mode}: every epoch exact with ${result.answersLost} answers lost (${found} found lost in their epoch)`)
  }
})

t.test('a node dies mid-epoch (shared storage): its VCs are taken over and the survivors get no sample twice, no wrong label, no error', async t => {
  // 40 scenarios: 2 to 5 nodes, every mode, chunk sizes, memory, readers, sync periods and kill points.
  for (let seed = 0; seed < 40; seed++) {
    const nodes = 2 + (seed % 4)
    const { layout, memoryBytes } = clusterLayout(nodes, [0.1, 0.15, 0.2][seed % 3], [4, 8, 2][seed % 3])
    const mode = MODES[Math.floor(seed / 3) % MODES.length]
    const victim = nodeId(seed % nodes)
    const killEpoch = 1 + (seed % 2)
    const afterOpens = (seed * 37) % 1000 + 5
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / (1 + seed % 4), epochs: killEpoch + 1, seed, readers: 1 + (seed % 6), standbyEvery: 5 + (seed % 60), kill: { node: victim, epoch: killEpoch, afterOpens } })
    const survivors = result.epochs[killEpoch].filter(o => o.node !== victim)
    const served = survivors.map(o => o.served)
    const what = `seed ${seed}: ${nodes} nodes, ${mode}, node ${victim} killed after ${afterOpens} opens of epoch ${killEpoch}`
    t.equal(served.filter(s => s === undefined).length, 0, `${what}: no error`)
    t.equal(survivors.filter(o => o.served !== undefined && files[o.served].group !== files[o.opened].group).length, 0, `${what}: no wrong label`)
    t.equal(new Set(served).size, served.length, `${what}: no sample twice`)
    const gotByVictim = new Set(result.epochs[killEpoch].filter(o => o.node === victim && o.served !== undefined).map(o => o.served))
    const again = served.filter(s => gotByVictim.has(s)).length
    t.ok(again <= result.unsyncedAtDeath.get(victim)!, `${what}: survivors get again only what the dead node's trainer got after its last standby update (${again} ≤ ${result.unsyncedAtDeath.get(victim)})`)
    t.ok(result.protocols.some(p => p.counters.takeovers > 0), `${what}: VCs were taken over`)
  }
})

t.test('a node dies mid-epoch and answers are lost on their way (a death breaks connections): the survivors still get no sample twice', async t => {
  // A kill breaks connections: answers of the dead owner, of the new owner and
  // of holders to reclaims are lost and asked for again around the takeover.
  // Two things this found, both fixed: the new owner numbered its batches
  // from its own count, below the last batch a requester had from the dead
  // owner, so an answer of its that was lost passed for one received (its
  // file stayed consumed, served to no one); and the files other survivors
  // held went on its ledger under their last batch, not the one each came
  // in, so a file given back in a lost answer stayed "held" for good. Either
  // way a VC ran out of files before the trainers' epoch did and served its
  // next epoch's files in this one. 30 scenarios (3 to 5 nodes, every mode),
  // and the three of the first 120 that failed before the fixes.
  for (const seed of [...Array(30).keys(), 42, 100, 111]) {
    const nodes = 3 + (seed % 3)
    const { layout, memoryBytes } = clusterLayout(nodes, [0.1, 0.15, 0.2, 0.3][seed % 4], [4, 8, 2][(seed >> 2) % 3])
    const mode = MODES[seed % 3]
    const victim = nodeId(seed % nodes)
    const afterOpens = (seed * 37) % 700 + 3
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / (1 + seed % 4), epochs: 2, seed, readers: 1 + (seed % 8), standbyEvery: 3 + (seed % 60), kill: { node: victim, epoch: 1, afterOpens }, loseOneAnswerIn: 3 + seed % 5 })
    const served = result.epochs[1].filter(o => o.node !== victim).map(o => o.served)
    const what = `seed ${seed}: ${nodes} nodes, ${mode}, node ${victim} killed after ${afterOpens} opens, ${result.answersLost} answers lost`
    t.ok(served.every(s => s !== undefined) && new Set(served).size === served.length, `${what}: no error and no sample twice (${served.length - new Set(served).size} twice)`)
  }
})

t.test('two nodes die in one epoch, the second holding VCs it took over from the first: the next in line takes them; no error, no wrong label, duplicates only from unsynced state', async t => {
  // Exactness is guaranteed for one death per epoch (above). With two, the
  // survivors may get a few samples twice (a known limit, see the README).
  // What bounds them: a takeover misses only what was decided after the
  // last sync before a death, so the survivors' duplicates are at most the
  // opens answered anywhere in the cluster since the last sync before each
  // of the two deaths. 60 scenarios: 4 or 5 nodes, every mode, sync periods
  // of 5 to 64 steps, both kill points varied.
  let duplicates = 0
  let opens = 0
  for (let seed = 0; seed < 60; seed++) {
    const nodes = 4 + (seed % 2)
    const { layout, memoryBytes } = clusterLayout(nodes, 0.15, 4)
    const mode = MODES[Math.floor(seed / 3) % MODES.length]
    const first = nodeId(seed % nodes)
    const second = nodeId((first + 1 + (seed % (nodes - 1))) % nodes)
    const firstKill = 100 + 5 * seed
    const result = simulateCluster(layout, {
      mode,
      memoryBytes,
      remoteMemoryBytes: memoryBytes / 3,
      epochs: 2,
      seed,
      readers: 3,
      standbyEvery: 5 + seed,
      kill: [{ node: first, epoch: 1, afterOpens: firstKill }, { node: second, epoch: 1, afterOpens: firstKill + 30 + 7 * (seed * 13 % 50) }]
    })
    const survivors = result.epochs[1].filter(o => o.node !== first && o.node !== second)
    const served = survivors.map(o => o.served)
    const what = `seed ${seed}: ${nodes} nodes, ${mode}, nodes ${first} then ${second} killed`
    t.equal(served.filter(s => s === undefined).length, 0, `${what}: no error`)
    t.equal(survivors.filter(o => files[o.served!].group !== files[o.opened].group).length, 0, `${what}: no wrong label`)
    t.ok(layout.vcs.every((_, v) => result.protocols.some((p, n) => n !== first && n !== second && p.owns(vcId(v)))), `${what}: every VC has a live owner`)
    const twice = served.length - new Set(served).size
    const unsynced = result.unsyncedClusterWide.get(first)! + result.unsyncedClusterWide.get(second)!
    t.ok(result.unsyncedClusterWide.size === 2 && twice <= unsynced, `${what}: ${twice} samples twice, at most the ${unsynced} opens answered since the last syncs before the deaths`)
    duplicates += twice
    opens += served.length
  }
  t.ok(duplicates < opens / 100, `survivors' samples served twice after two deaths: ${duplicates} of ${opens}`)
})

t.test('DistributedSampler padding and a node killed: files carried into a VC\'s next epoch in mirrors are served once in it, whoever owns the VC', async t => {
  // Padding opens some files twice an epoch, so a VC's epoch ends with files still in mirrors: they are the next
  // epoch's, served from there, and a takeover must count them (docs/design.md, "Files carried into an epoch across a
  // takeover"). Each serve is checked against its VC's epoch, not the trainers': padding makes those drift apart. With
  // either half of that fix taken out (the owner's ledger marking carried files again at the rollover, or the adoption
  // counting what a survivor served from which batch), 8 of the first 120 scenarios serve a survivor a carried file
  // twice in one VC epoch: the first 60, which hold six of them, and the other two run here; and 20 more with answers
  // lost on their way, as a death breaks connections. (The limit docs/design.md names, a standby copy older than the
  // dead owner's rollover, would show here as a file twice; none of these scenarios meets it.)
  let carried = 0
  const scenarios = [...[...Array(60).keys(), 66, 81].map(seed => ({ seed, lose: 0 })), ...[...Array(20).keys()].map(i => ({ seed: 200 + i, lose: 3 + i % 5 }))]
  for (const { seed, lose } of scenarios) {
    const nodes = 2 + (seed % 4)
    const { layout, memoryBytes } = clusterLayout(nodes, [0.1, 0.15, 0.2][seed % 3], [4, 8, 2][seed % 3])
    const mode = MODES[seed % 3]
    const victim = nodeId(seed % nodes)
    const killEpoch = 1 + (seed % 2)
    const afterOpens = (seed * 37) % 900 + 5
    const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes / (1 + seed % 4), epochs: 3, seed, readers: 1 + (seed % 6), standbyEvery: 5 + (seed % 60), padding: 1 + seed % 7, kill: { node: victim, epoch: killEpoch, afterOpens }, loseOneAnswerIn: lose })
    carried += result.carried
    const what = `seed ${seed}: ${nodes} nodes, ${mode}, padding ${1 + seed % 7}, node ${victim} killed after ${afterOpens} opens of epoch ${killEpoch}, ${result.answersLost} answers lost`
    const opens = result.epochs.flat()
    const survivors = opens.filter(o => o.node !== victim)
    /** A serve by its file and the epoch of its VC it was counted in. */
    const key = (o: ClusterOpen): string => `${o.served!}@${o.vcEpoch!}`
    t.equal(survivors.filter(o => o.served === undefined).length, 0, `${what}: no error`)
    t.equal(survivors.filter(o => files[o.served!].group !== files[o.opened].group).length, 0, `${what}: no wrong label`)
    const keys = survivors.map(key)
    t.equal(keys.length - new Set(keys).size, 0, `${what}: no file twice in one epoch of its VC`)
    const gotByVictim = new Set(opens.filter(o => o.node === victim && o.served !== undefined).map(key))
    const again = keys.filter(k => gotByVictim.has(k)).length
    t.ok(again <= result.unsyncedAtDeath.get(victim)!, `${what}: survivors get again only what the dead node's trainer got after its last standby update (${again} ≤ ${result.unsyncedAtDeath.get(victim)})`)
  }
  t.ok(carried > 100, `files carried into a next epoch in mirrors: ${carried}`)
})

t.test('a file carried into the next epoch in a mirror and served there counts at a takeover, whether its holder heard of that epoch first or not', async t => {
  // Strict: an offset with more opens than files (padding, a stray reader) ends the VC's epoch while another node's
  // mirror still holds files at other offsets. They stay consumed, the new epoch's to serve there. The holder serves
  // one, then the owner dies: the new owner must not load it again in that epoch.
  for (const hearsFirst of [false, true]) {
    const files = makeSamples(5, [32])
    const layout = buildLayout(files, { chunkSize: 8, seed: 1, vcCount: 1, nodes: 2 })
    const v = vcId(layout.vcs.findIndex(vc => vc.home === 0 && vc.pcs.length >= 2))
    const [owner, holder] = [0, 1].map(node => new Protocol(layout, { mode: 'strict', memoryBytes: 1e9, seed: 1, node: nodeId(node) }))
    const mirror = new MirrorTable(layout, 1e9, 'strict', 2)
    const filesOf = (pc: number): readonly FileId[] => layout.pcs[layout.vcs[v].pcs[pc]].files
    /** The owner answers an open, loading if it must; a reclaim or a wait is returned as is. */
    const answer = (file: FileId, options: OpenOptions = {}): OpenDecision | FileId | undefined => {
      const decision = owner.open(file, options)
      if (decision.kind === 'serve') return decision.file
      if (decision.kind !== 'load') return decision
      return owner.finishLoad(decision.plan, new Set(decision.plan.files)).served
    }
    /** The holder's open of a file it does not hold: one request to the owner, answered with a batch. */
    const request = (file: FileId): FileId => {
      const decision = mirror.open(file)
      if (decision.kind !== 'request') throw new Error(`the holder asks the owner for ${file}`)
      const { request } = decision
      const report = { node: nodeId(1), emptyOffsets: request.emptyOffsets, freeBytes: request.freeBytes, lastBatch: request.lastBatch, givenBackBefore: request.givenBackBefore }
      const served = answer(file, { requester: report }) as FileId
      const { files: batch, batch: batchNumber } = owner.home.shipBatch(v, report)
      owner.home.noteAnswerSent(v, nodeId(1), served, batchNumber)
      mirror.finishRequest(request, { served, batch, batchNumber, vcEpoch: owner.epochOf(v) })
      return served
    }
    const first = request(filesOf(0)[0])
    const offset = layout.fileOffset[first]
    t.ok(mirror.held(v).length > 0, 'the holder got a batch of the rest of the chunk')
    // The owner's trainer opens offset `offset` twice more: its second file, then one too many.
    const atOffset = filesOf(1).find(file => layout.fileOffset[file] === offset)!
    t.type(answer(atOffset), 'number', 'the second file at that offset is loaded and served')
    const reclaim = answer(atOffset) as OpenDecision
    if (typeof reclaim !== 'object' || reclaim.kind !== 'reclaim') throw new Error('nothing is left at that offset: the holder is asked what it holds')
    t.equal(owner.home.finishReclaim(reclaim.plan, [{ node: nodeId(1), ...mirror.answerReclaim(v, false, []) }]), undefined)
    answer(atOffset, { retry: true, holdersConfirmed: true })
    t.equal(owner.epochOf(v), 1, 'the VC\'s epoch ended with files still in the mirror')
    const carried = mirror.held(v)[0]
    t.ok(owner.slots.isConsumed(carried), 'a carried file stays consumed at the owner')
    const standby = owner.home.takeStandbyUpdates().find(update => update.vc === v)!
    if (hearsFirst) request(filesOf(0).find(file => layout.fileOffset[file] === offset && file !== first) ?? atOffset)
    const served = mirror.open(carried)
    t.same(served, { kind: 'serve', file: carried }, 'the holder\'s trainer gets the carried file from its mirror')
    owner.home.noteServedElsewhere(nodeId(1), mirror.takeServedNotices())
    // The owner dies; the holder is next in the VC's owner order.
    const adoption = planAdoption([{ node: nodeId(1), ...mirror.takeoverReport(v) }], standby, nodeId(1), node => node === 0)
    holder.home.adopt(v, adoption, mirror.surrender(v))
    t.equal(holder.epochOf(v), 1, `${hearsFirst ? 'heard of the new epoch first' : 'served before it heard of the new epoch'}: the new owner is in that epoch`)
    t.ok(holder.slots.isConsumed(carried), 'and the carried file its trainer got is consumed there: no second serve in this epoch')
  }
})
