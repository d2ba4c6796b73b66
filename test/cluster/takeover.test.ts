// The node's side of a takeover, on its own: membership, engine and mirrors
// are small stand-ins (real daemons stopped in a takeover are in
// test/cluster/membership.test.ts).
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t from 'tap'
import { PeerCallError, PeerRefusal, takenForDead } from '../../src/cluster/call-error'
import type { Membership } from '../../src/cluster/membership'
import { reportProblem, Takeover } from '../../src/cluster/takeover'
import type { Engine } from '../../src/engine/engine'
import type { RemoteReader } from '../../src/engine/remote-reader'
import type { Layout } from '../../src/redirect/layout'
import { vcId } from '../helpers/ids'

/** Node 0, successor of dead node 2 for VC 0, whose only other survivor (node 1) refuses it as dead. */
function successorRefusedAsDead (): { takeover: Takeover, refusedBy: number[] } {
  const refusedBy: number[] = []
  const refusal = takenForDead(7, 'node 1 takes that incarnation of node 0 for dead')
  const { takeover } = successor({ takeoverState: async () => { throw new PeerCallError('node 1', refusal.status, refusal.message) } }, { refusedAsDead: (node: number) => { refusedBy.push(node) } })
  return { takeover, refusedBy }
}

/** Node 0, successor of dead node 2 for VC 0, beside survivor node 1 (whose client is `peer`); VCs it adopted. */
function successor (peer: object, more: object = {}): { takeover: Takeover, membership: { closed: boolean }, adopted: number[] } {
  const adopted: number[] = []
  const membership = {
    node: 0,
    storage: 'shared',
    ready: true,
    closed: false,
    fenced: undefined,
    generation: { number: 1, key: 'a' },
    onDeath: () => {},
    onOwnersChanged: () => {},
    ownerOf: () => 0,
    livePeers: () => [1],
    isDead: () => false,
    isRejoining: () => false,
    deaths: () => [],
    incarnationOf: () => 1,
    client: () => peer,
    refusedAsDead: () => {},
    ...more
  }
  const engine = { owns: () => false, forgetNode: () => [], adopt: (vc: number) => { adopted.push(vc) } }
  const remote = { takeoverReport: () => ({ epoch: 0, received: [], held: [], heldBatches: [], lastBatch: 0, servedFromMirror: [] }), surrender: () => [], wakeAll: () => {} }
  const layout = { vcs: [{ home: 2 }], files: new Array(8), filePc: new Array(8).fill(0), pcs: [{ vc: 0 }] } as unknown as Layout
  const takeover = new Takeover(layout, membership as unknown as Membership, engine as unknown as Engine, remote as unknown as RemoteReader, pino({ level: 'silent' }))
  return { takeover, membership, adopted }
}

t.test('a peer\'s read of a VC whose takeover failed here (this node refused as dead) is told to ask again, not failed', async t => {
  const { takeover, refusedBy } = successorRefusedAsDead()
  const refusal = await takeover.claim(vcId(0)).then(() => undefined, (err: unknown) => err)
  t.ok(refusal instanceof PeerRefusal, 'a refusal the caller reads')
  t.equal((refusal as PeerRefusal).status, grpc.status.ABORTED, 'ask again: the caller then asks the owner it sees (its own node, once it takes this one for dead)')
  t.same(refusedBy, [1], 'the refusal reached membership, which fences this node')
})

t.test('a node going away adopts nothing: not when a takeover starts, nor when its survivors answer after the close began', async t => {
  const state = { vcs: [{ vc: 0, epoch: 0, received: [], held: [], heldBatches: [], lastBatch: 0, servedFromMirror: [], servedFromMirrorBatches: [] }] }
  const open = successor({ takeoverState: async () => state })
  await open.takeover.adoptOrphans()
  t.same(open.adopted, [0], 'open: the successor adopts the dead node\'s VC')

  const closing = successor({ takeoverState: async () => { closing.membership.closed = true; return state } })
  await closing.takeover.adoptOrphans()
  t.same(closing.adopted, [], 'closed while the survivors answered')

  let asked = 0
  const closed = successor({ takeoverState: async () => { asked++; return state } })
  closed.membership.closed = true
  await closed.takeover.adoptOrphans()
  t.same([closed.adopted, asked], [[], 0], 'closed before: nobody asked, nothing adopted')
})

t.test('a survivor\'s malformed report is refused: the takeover fails, saying why, adopts nothing on it and is tried again a second later', async t => {
  const good = { vc: 0, epoch: 0, received: [1], held: [2], heldBatches: [3], lastBatch: 3, servedFromMirror: [4], servedFromMirrorBatches: [2] }
  // Files 0-5 are VC 0's, 6 and 7 VC 1's.
  const layout = { vcs: [{ home: 2 }, { home: 2 }], files: new Array(8), filePc: [0, 0, 0, 0, 0, 0, 1, 1], pcs: [{ vc: 0 }, { vc: 1 }] } as unknown as Layout
  t.equal(reportProblem({ vcs: [good] }, [vcId(0)], layout), undefined, 'a whole report is read')
  t.match(reportProblem({ vcs: [] }, [vcId(0)], layout), /not the ones asked for/, 'a VC asked for and not reported')
  t.match(reportProblem({ vcs: [good, { ...good, vc: 1 }] }, [vcId(0)], layout), /not the ones asked for/, 'a VC not asked for')
  t.match(reportProblem({ vcs: [{ ...good, received: [8] }] }, [vcId(0)], layout), /names a file that is not one of its own/, 'a file past the layout')
  t.match(reportProblem({ vcs: [{ ...good, held: [6] }] }, [vcId(0)], layout), /names a file that is not one of its own/, 'a file of another VC')
  t.match(reportProblem({ vcs: [{ ...good, heldBatches: [] }] }, [vcId(0)], layout), /holds 1 files with 0 batches/, 'held files without their batches')
  t.match(reportProblem({ vcs: [{ ...good, servedFromMirrorBatches: [1, 2] }] }, [vcId(0)], layout), /served 1 files from its mirror with 2 batches/, 'mirror-served files and batches that differ')

  let asked = 0
  const malformed = successor({ takeoverState: async () => { asked++; return { vcs: [{ ...good, heldBatches: [] }] } } })
  t.teardown(() => { malformed.membership.closed = true })
  const failure = await malformed.takeover.adoptOrphans().then(() => undefined, (err: Error) => err.message)
  t.match(failure, /^node 1's report for taking over node 2's virtual chunks is malformed \(virtual chunk 0 holds 1 files with 0 batches\); nothing taken over$/, 'the takeover fails, saying which node and why')
  t.same([malformed.adopted, asked], [[], 1], 'asked once, nothing adopted on it')
  const meanwhile = await malformed.takeover.adoptOrphans().then(() => undefined, (err: Error) => err.message)
  t.same([meanwhile, asked], [failure, 1], 'until the retry a second later, the failure stands: an open asking meanwhile starts no takeover of its own')
})
