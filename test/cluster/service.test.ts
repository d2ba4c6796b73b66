// The peer service's checks of a sync, on its own: the other parts are
// small stand-ins that record what reaches them (the real nodes are in
// test/cluster/cluster.test.ts, test/cluster/restarts.test.ts).
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t from 'tap'
import type { Membership } from '../../src/cluster/membership'
import { PeerRefusal } from '../../src/cluster/call-error'
import { PeerService, type PeerServiceParts } from '../../src/cluster/service'
import type { Sync } from '../../src/cluster/sync'
import type { SyncRequest } from '../../src/cluster/wire'
import type { Layout, VcId } from '../../src/redirect/layout'
import { NotOwnedHere } from '../../src/engine/engine'
import { compareGenerations, refusedFor, type GenerationId } from '../../src/cluster/generations'

function serviceRecordingSyncs (): { service: PeerService, received: SyncRequest[], generations: GenerationId[] } {
  const received: SyncRequest[] = []
  const generations: GenerationId[] = []
  const membership = {
    node: 0,
    generation: { number: 2, key: 'b' } as GenerationId,
    checkNode: () => undefined,
    checkAlive: () => undefined,
    observe (theirs: GenerationId): number {
      const order = compareGenerations(theirs, this.generation)
      if (order > 0) { this.generation = theirs; generations.push(theirs) }
      return order
    }
  }
  const parts = {
    layout: { vcs: [{}, {}], files: [{}, {}, {}, {}] } as unknown as Layout,
    membership: membership as unknown as Membership,
    sync: { receive: (request: SyncRequest) => received.push(request) } as unknown as Sync,
    log: pino({ level: 'silent' })
  } as unknown as PeerServiceParts
  return { service: new PeerService(parts), received, generations }
}

const now = { number: 2, key: 'b' }

function statusOf (call: () => unknown): number | undefined {
  try { call() } catch (error) { return error instanceof PeerRefusal ? error.status : -1 }
  return undefined
}

t.test('a sync naming a virtual chunk or a file outside the layout is refused and not applied', async t => {
  const { service, received } = serviceRecordingSyncs()
  t.equal(statusOf(() => service.sync({ generation: now, node: 1, standby: [], served: [{ vc: 2, file: 0, batch: 1 }] })), grpc.status.INVALID_ARGUMENT)
  t.equal(statusOf(() => service.sync({ generation: now, node: 1, standby: [], served: [{ vc: 1, file: 4, batch: 1 }] })), grpc.status.INVALID_ARGUMENT)
  t.equal(received.length, 0)
})

t.test('a well-formed sync is handed to the sync', async t => {
  const { service, received } = serviceRecordingSyncs()
  const request = { generation: now, node: 1, standby: [], served: [{ vc: 1, file: 3, batch: 1 }] }
  t.equal(statusOf(() => service.sync(request)), undefined)
  t.same(received, [request])
})

t.test('a sync from an earlier generation is refused, naming this node\'s, and not applied', async t => {
  const { service, received } = serviceRecordingSyncs()
  let refusal: unknown
  try { service.sync({ generation: { number: 1, key: 'z' }, node: 1, standby: [], served: [{ vc: 1, file: 3, batch: 1 }] }) } catch (err) { refusal = err }
  t.ok(refusal instanceof PeerRefusal)
  t.equal((refusal as PeerRefusal).status, grpc.status.ABORTED)
  t.same(refusedFor({ status: (refusal as PeerRefusal).status, details: (refusal as PeerRefusal).message }), now)
  t.equal(received.length, 0)
})

t.test('a sync from a later generation starts it here first, then applies', async t => {
  const { service, received, generations } = serviceRecordingSyncs()
  const later = { number: 3, key: 'a' }
  t.equal(statusOf(() => service.sync({ generation: later, node: 1, standby: [], served: [{ vc: 1, file: 3, batch: 1 }] })), undefined)
  t.same(generations, [later])
  t.equal(received.length, 1)
})

/**
 * Node 0 answering reads of VC 0 from node 1, with stand-ins that record what the service does with each answer;
 * `decide()` lets the reads waiting on the engine have their answers, at once and from then on.
 */
function readingService (options: { disowned?: boolean } = {}): { service: PeerService, calls: string[], setIncarnation: (n: number) => void, decide: () => void } {
  const calls: string[] = []
  let incarnation = 5
  let decided!: () => void
  const deciding = new Promise<void>(resolve => { decided = resolve })
  let answers = 0
  const membership = {
    node: 0,
    generation: now,
    checkNode: () => undefined,
    observe: () => 0,
    checkAlive: () => undefined,
    incarnationOf: () => incarnation,
    untilServing: async () => {},
    isDead: () => false,
    mayServe: () => true
  }
  const engine = {
    owns: () => true,
    serveRequest: async () => {
      await deciding
      if (options.disowned === true) throw new NotOwnedHere(0 as VcId)
      const n = ++answers
      return { served: { file: n, bytes: Buffer.alloc(4) }, batch: [{ file: 3, bytes: Buffer.alloc(4) }], batchNumber: n, vcEpoch: 0 }
    },
    giveBack: (served: { file: number }) => calls.push(`giveBack ${served.file}`),
    forgetNode: (node: number) => { calls.push(`forgetNode ${node}`); return [] },
    takeBackBatch: (node: number) => calls.push(`takeBackBatch ${node}`),
    answerSent: (node: number, answer: { served: { file: number } }) => calls.push(`answerSent ${node} ${answer.served.file}`)
  }
  const parts = {
    layout: { files: [{}, {}, {}, {}], filePc: [0, 0, 0, 0], pcs: [{ vc: 0 }], vcs: [{ home: 0 }], chunkSize: 4 } as unknown as Layout,
    membership: membership as unknown as Membership,
    engine,
    buffers: { give: () => calls.push('buffer given') },
    log: pino({ level: 'silent' })
  } as unknown as PeerServiceParts
  return { service: new PeerService(parts), calls, setIncarnation: n => { incarnation = n }, decide: () => decided() }
}

const readOf = (file: number): Parameters<PeerService['read']>[0] => ({ generation: now, node: 1, file, emptyOffsets: Buffer.alloc(1), freeBytes: 100, lastBatch: 0, givenBackFiles: [], givenBackBatches: [] })

t.test('a read whose requester is taken for dead while its answer is decided gives the answer back and forgets what it would have shipped', async t => {
  const { service, calls, setIncarnation, decide } = readingService()
  const reading = service.read(readOf(1)).then(() => undefined, (err: unknown) => err)
  // Node 1 fenced and back as a new incarnation while its read waited on a load.
  setIncarnation(6)
  decide()
  const refusal = await reading
  t.ok(refusal instanceof PeerRefusal, 'the read is refused, not answered')
  t.same(calls, ['giveBack 1', 'forgetNode 1', 'buffer given'], 'its answer waits for another open; the batch is forgotten as the death forgot the rest, and its bytes go back')
})

t.test('a read its node asked again for before it was answered gives its answer back; the new one is answered and kept until acknowledged', async t => {
  const { service, calls, decide } = readingService()
  const first = service.read(readOf(1)).then(() => undefined, (err: unknown) => err)
  // Node 1's call failed on its side (its connection broke) and it asked again: a second read of the same VC.
  const second = service.read(readOf(2)).then(reply => reply, (err: unknown) => err)
  decide()
  const refusal = await first
  t.ok(refusal instanceof PeerRefusal && refusal.status === grpc.status.ABORTED, 'the replaced read is told to ask again (nobody is listening for it)')
  const reply = await second
  t.notOk(reply instanceof Error, 'the new read is answered')
  t.same(calls, ['giveBack 1', 'takeBackBatch 1', 'buffer given', 'answerSent 1 2'], 'the first answer goes back to its slot and its batch may be loaded again, never counted sent; the second is noted sent')
})

t.test('a read whose VC this node stopped answering for while it waited (fenced, or a new owner) is told to ask again, not failed', async t => {
  const { service, calls, decide } = readingService({ disowned: true })
  const reading = service.read(readOf(1)).then(() => undefined, (err: unknown) => err)
  decide()
  const refusal = await reading
  t.ok(refusal instanceof PeerRefusal && refusal.status === grpc.status.ABORTED, 'the requester is told to ask again, and asks the VC\'s owner now')
  t.same(calls, [], 'nothing was answered, so nothing is given back or noted sent')
})
