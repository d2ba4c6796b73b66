// The node's side of a takeover, on its own: membership, engine and mirrors
// are small stand-ins (real daemons stopped in a takeover are in
// test/cluster/membership.test.ts).
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t from 'tap'
import { PeerCallError, PeerRefusal, takenForDead } from '../../src/cluster/call-error'
import type { Membership } from '../../src/cluster/membership'
import { Takeover } from '../../src/cluster/takeover'
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
  const layout = { vcs: [{ home: 2 }] } as unknown as Layout
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
