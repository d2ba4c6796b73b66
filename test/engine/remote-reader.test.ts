// The remote reader on its own: node 1's opens of files whose VCs node 0
// owns, with node 0 a real engine over a fake chunk source and the wire
// replaced by function calls (the real gRPC cluster is test/cluster). The
// owner can be made to fail, to stall, or to hand the VC over.
import pino from 'pino'
import t from 'tap'
import { Engine, type Reclaimer, type RequestAnswer, type ServedFile } from '../../src/engine/engine'
import { RemoteReader, type OwnerReply, type Owners } from '../../src/engine/remote-reader'
import { FsError } from '../../src/errors'
import { planMemory } from '../../src/redirect/budget'
import { buildLayout, vcOfFile, type FileId, type VcId } from '../../src/redirect/layout'
import { MirrorTable, type RemoteRequest } from '../../src/redirect/mirror'
import { Protocol, type RedirectMode } from '../../src/redirect/protocol'
import { bytesOf, FakeSource } from '../helpers/fake-source'
import { fileId, nodeId } from '../helpers/ids'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

const files = makeSamples(5, UNEVEN_CLASSES)
const datasetBytes = files.reduce((sum, f) => sum + f.size, 0)
const memoryBytes = Math.round(datasetBytes * 0.25)
const layout = buildLayout(files, { chunkSize: 16, seed: 3, vcCount: planMemory(files, 16, memoryBytes, 2).vcCount, nodes: 2 })
const vcOf = (file: FileId): VcId => vcOfFile(layout, file)
const [NODE0, NODE1] = [nodeId(0), nodeId(1)]
/** The files node 1 reads remotely: those whose VC node 0 is home to. */
const remoteFiles = files.map((_, id) => fileId(id)).filter(id => layout.vcs[vcOf(id)].home === NODE0)
const log = pino({ level: 'silent' })

/**
 * What the fake owner does with the next request: answer, fail, or say the VC is now this node's; 'lost': answer, but
 * the answer is lost with its connection, and the requester asks again with the same request (as ClusterNode.askOwner).
 */
type Behaviour = 'answer' | 'fail' | 'owner-is-here' | 'unreadable' | 'lost'

interface Pair {
  remote: RemoteReader
  home: Engine
  /** Requests the owner got, and the most that were out for one VC at once. */
  requests: RemoteRequest[]
  peakPerVc: number
  next: Behaviour[]
  delayMs: number
  lostAnswers: number
}

/** Node 0's engine as the owner, node 1's remote reader asking it; the sync and reclaims as direct calls. */
function pair (mode: RedirectMode): Pair {
  const mirror = new MirrorTable(layout, memoryBytes, mode, 11)
  // The home's reclaims reach node 1's mirror directly (in a cluster: a gRPC call).
  const reclaimer: Reclaimer = async plan => {
    const answer = state.remote.reclaim(plan.vc, plan.giveBack?.node === NODE1, [...(plan.giveBack?.offsets ?? [])])
    return { reports: [{ node: NODE1, held: answer.held, lastBatch: answer.lastBatch, returned: answer.returned?.file, givenBackBefore: answer.givenBackBefore }], returned: answer.returned }
  }
  const source = new FakeSource()
  const home = new Engine(new Protocol(layout, { mode, memoryBytes, seed: 2, node: NODE0, mixBlock: 4 }), source, source.buffers, log, reclaimer)
  const out = new Map<number, number>()
  const state: Pair = { remote: undefined as unknown as RemoteReader, home, requests: [], peakPerVc: 0, next: [], delayMs: 0, lostAnswers: 0 }
  const owners: Owners = {
    read: async (request): Promise<OwnerReply> => {
      state.requests.push(request)
      out.set(request.vc, (out.get(request.vc) ?? 0) + 1)
      state.peakPerVc = Math.max(state.peakPerVc, out.get(request.vc)!)
      try {
        await new Promise(resolve => setTimeout(resolve, state.delayMs))
        // What node 1 served from its mirror reaches the owner's ledger before each request (in a cluster: the sync).
        home.noteServedElsewhere(NODE1, state.remote.takeServedNotices())
        const behaviour = state.next.shift() ?? 'answer'
        if (behaviour === 'fail') throw new FsError('EIO', 'node 0 could not answer')
        if (behaviour === 'owner-is-here') return { kind: 'owner-is-here' }
        const ask = async (): Promise<RequestAnswer> => await home.serveRequest(request.file, { node: NODE1, emptyOffsets: request.emptyOffsets, freeBytes: request.freeBytes, lastBatch: request.lastBatch })
        if (behaviour === 'lost') {
          home.answerSent(NODE1, await ask())
          state.lostAnswers++
        }
        const answer = await ask()
        home.answerSent(NODE1, answer)
        return { kind: 'answered', answer: behaviour === 'unreadable' ? { ...answer, served: undefined } : answer }
      } finally {
        out.set(request.vc, out.get(request.vc)! - 1)
      }
    }
  }
  state.remote = new RemoteReader(mirror, owners, source.buffers)
  return state
}

/** One epoch of node 1's trainer over the remote files, `readers` at a time, in an order set by `seed`. */
async function epoch (remote: RemoteReader, seed: number, readers = 6): Promise<{ served: ServedFile[], failed: unknown[] }> {
  const order = [...remoteFiles].sort((a, b) => ((a * 7919 + seed * 104729) % 1009) - ((b * 7919 + seed * 104729) % 1009))
  const served: ServedFile[] = []
  const failed: unknown[] = []
  let next = 0
  await Promise.all(Array.from({ length: readers }, async () => {
    while (next < order.length) {
      const file = order[next++]
      try {
        const opened = await remote.open(file)
        if (opened.kind === 'served') served.push(opened.served)
        else failed.push(opened)
      } catch (err) {
        failed.push(err)
      }
    }
  }))
  return { served, failed }
}

const sorted = (list: readonly FileId[]): FileId[] => [...list].sort((a, b) => a - b)

t.ok(remoteFiles.length > 100 && remoteFiles.length < files.length, `node 0 is home to ${remoteFiles.length} of ${files.length} files`)

for (const mode of ['strict', 'pool', 'mix'] as RedirectMode[]) {
  t.test(`${mode}: 3 epochs through the mirror: every remote file once per epoch, with its own bytes, from the owner's batches too`, async t => {
    const { remote, requests } = pair(mode)
    for (let e = 0; e < 3; e++) {
      const { served, failed } = await epoch(remote, e)
      t.same(failed, [], `epoch ${e}: no open failed`)
      t.same(sorted(served.map(s => s.file)), remoteFiles, `epoch ${e}: the remote files, each once`)
      t.ok(served.every(s => s.bytes.equals(bytesOf(s.file))), `epoch ${e}: each with its own bytes`)
    }
    t.ok(requests.length < 3 * remoteFiles.length, `${requests.length} requests for ${3 * remoteFiles.length} opens: batches were used`)
  })
}

t.test('while a request for a VC is out, other opens of that VC wait for it: one request per VC at a time', async t => {
  const state = pair('pool')
  state.delayMs = 3
  const { served, failed } = await epoch(state.remote, 0, 16)
  t.same(failed, [])
  t.same(sorted(served.map(s => s.file)), remoteFiles)
  t.equal(state.peakPerVc, 1, 'never two requests for one VC at once')
})

t.test('an owner that fails a request fails that open with its error; the next opens of the VC ask again and nothing is lost', async t => {
  const state = pair('pool')
  state.next.push('fail')
  const { served, failed } = await epoch(state.remote, 0)
  t.equal(failed.length, 1, 'one open failed')
  t.ok(failed[0] instanceof FsError && failed[0].errno === 'EIO' && failed[0].message.includes('could not answer'), 'with the owner\'s error')
  t.equal(served.length, remoteFiles.length - 1, 'every other open was served')
  t.equal(new Set(served.map(s => s.file)).size, served.length, 'no file twice')
})

for (const mode of ['strict', 'pool', 'mix'] as RedirectMode[]) {
  t.test(`${mode}: answers lost on their way (their connection broke) are served again: every epoch holds each remote file once`, async t => {
    const state = pair(mode)
    for (let e = 0; e < 3; e++) {
      // Every fifth request of the epoch loses its first answer.
      state.next.push(...Array.from({ length: remoteFiles.length }, (_, i) => i % 5 === 2 ? 'lost' as const : 'answer' as const))
      const { served, failed } = await epoch(state.remote, e)
      state.next.length = 0
      t.same(failed, [], `epoch ${e}: no open failed`)
      t.same(sorted(served.map(s => s.file)), remoteFiles, `epoch ${e}: the remote files, each once`)
    }
    t.ok(state.lostAnswers > 0, `${state.lostAnswers} answers were lost`)
    t.equal(state.home.stats().protocol.lostAnswers, state.lostAnswers, 'each one found by the next request, and counted')
  })
}

t.test('an answer without the opened file (the owner could not read it) fails that open with EIO', async t => {
  const state = pair('mix')
  state.next.push('unreadable')
  const first = remoteFiles[0]
  const error = await state.remote.open(first).then(() => undefined, (err: unknown) => err)
  t.ok(error instanceof FsError && error.errno === 'EIO', 'EIO')
})

t.test('"owner is here" (a takeover made this node the owner) ends the open without bytes and releases the VC for the next open', async t => {
  const state = pair('pool')
  state.next.push('owner-is-here')
  const file = remoteFiles[0]
  t.same(await state.remote.open(file), { kind: 'owner-is-here' })
  const again = await state.remote.open(file)
  t.equal(again.kind, 'served', 'the next open asks again and is served')
  t.equal(state.requests.length, 2)
})

t.test('a reclaim gives one mirrored file back with its bytes and says what is still held', async t => {
  const state = pair('pool')
  const vc = vcOf(remoteFiles[0])
  await state.remote.open(remoteFiles[0])
  const before = state.remote.takeoverReport(vc).held
  t.ok(before.length > 0, `the owner's batch left ${before.length} files in the mirror`)
  const { held, returned } = state.remote.reclaim(vc, true, [])
  t.ok(returned !== undefined && returned.bytes.equals(bytesOf(returned.file)), 'one file back, with its bytes')
  t.same(sorted(held), sorted(before.filter(file => file !== returned!.file)), 'the rest still held')
  t.equal(state.remote.counters.givenBack, 1)
})

t.test('surrender hands over the mirrored files with their bytes; reset drops them', async t => {
  const state = pair('pool')
  const [a, b] = [remoteFiles[0], remoteFiles.find(file => vcOf(file) !== vcOf(remoteFiles[0]))!]
  await state.remote.open(a)
  await state.remote.open(b)
  const heldB = state.remote.takeoverReport(vcOf(b)).held
  const surrendered = state.remote.surrender(vcOf(a))
  t.ok(surrendered.size > 0 && [...surrendered].every(([file, bytes]) => vcOf(file) === vcOf(a) && bytes.equals(bytesOf(file))), `${surrendered.size} files of the VC, each with its bytes`)
  t.same(state.remote.takeoverReport(vcOf(a)).held, [], 'the mirror of that VC is gone')
  t.equal(state.remote.reset(), heldB.length, 'reset drops what is left')
  t.equal(state.remote.counters.mirrorBytes, 0)
})
