// Taking over a dead home's VCs: who is next for each VC, and what the new
// owner counts as consumed from the survivors' reports and the standby copy.
import t from 'tap'
import { buildLayout } from '../../src/redirect/layout'
import { ownerOrder, planAdoption, type StandbyCopy, type SurvivorReport } from '../../src/redirect/takeover'
import { fileId, nodeId, vcId } from '../helpers/ids'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

t.test('each VC\'s owner order starts at its home and lists every node once; successors rotate across VCs', async t => {
  const layout = buildLayout(makeSamples(1, UNEVEN_CLASSES), { chunkSize: 8, seed: 3, vcCount: 24, nodes: 4 })
  const successorsOfNode0 = new Set<number>()
  layout.vcs.forEach((vc, v) => {
    const order = ownerOrder(layout, vcId(v))
    t.equal(order[0], vc.home, `VC ${v}: its home first`)
    t.same([...order].sort(), [0, 1, 2, 3], `VC ${v}: every node once`)
    if (vc.home === 0) successorsOfNode0.add(order[1])
  })
  t.same([...successorsOfNode0].sort(), [1, 2, 3], 'the VCs of a dead node spread over every other node')
})

t.test('on one node the owner order is the home alone', async t => {
  const layout = buildLayout(makeSamples(1, UNEVEN_CLASSES), { chunkSize: 8, seed: 3, vcCount: 12 })
  t.same(ownerOrder(layout, vcId(0)), [0])
})

const report = (node: number, epoch: number, received: number[], held: number[] = [], lastBatch = 0): SurvivorReport =>
  ({ node: nodeId(node), epoch, received: received.map(fileId), held: held.map(fileId), heldBatches: held.map(() => lastBatch), lastBatch, servedFromMirror: [] })
/** A standby copy of `epoch`: each file sent, to which node, and in which batch into its mirror (0 or none: an answer). */
const standbyOf = (epoch: number, served: [file: number, node: number, batch?: number][]): StandbyCopy =>
  ({ epoch, served: served.map(([file, node, batch = 0]) => ({ file: fileId(file), node: nodeId(node), batch })) })

t.test('the newest epoch anyone knows wins; what survivors received in it, and what went to dead nodes, is consumed', async t => {
  const dead = new Set([0, 3])
  const adoption = planAdoption(
    [report(1, 5, [10, 11], [11], 4), report(2, 5, [12]), report(4, 4, [99])],
    standbyOf(5, [[10, 1], [20, 3], [21, 0], [30, 2]]),
    nodeId(1), node => dead.has(node))
  t.equal(adoption.epoch, 5)
  t.same([...adoption.consumed].sort((a, b) => a - b), [10, 11, 12, 20, 21], 'a live node\'s files only on its own word (30 was not reported: its answer may have been lost)')
  t.same(adoption.heldElsewhere, [], 'the new owner\'s own mirror is not elsewhere')
  t.same(adoption.servedHere, [10], 'what its own trainer got: received and no longer held')
})

t.test('files other survivors still hold go on the new owner\'s ledger with the batch each came in', async t => {
  const adoption = planAdoption([report(1, 2, [5]), { ...report(2, 2, [6, 7, 8], [7, 8], 9), heldBatches: [4, 9] }], undefined, nodeId(1), () => false)
  // The holder names a file by its own batch when it says it served it or gave it back: the ledger entry must match.
  t.same(adoption.heldElsewhere, [{ file: 7, node: 2, batch: 4 }, { file: 8, node: 2, batch: 9 }])
  t.same([...adoption.consumed].sort((a, b) => a - b), [5, 6, 7, 8])
})

t.test('a file that went into a live node\'s mirror counts when that node says it served it from that batch, whatever epoch it heard of', async t => {
  const served = (node: number, epoch: number, shipments: [file: number, batch: number][]): SurvivorReport =>
    ({ ...report(node, epoch, []), servedFromMirror: shipments.map(([file, batch]) => ({ file: fileId(file), batch })) })
  // Files 40, 41 and 42 were carried into epoch 3 in node 2's mirror (batches 7, 7, 8); node 2 still thinks epoch 2.
  const standby = standbyOf(3, [[40, 2, 7], [41, 2, 7], [42, 2, 8], [43, 2]])
  const adoption = planAdoption([report(1, 3, [5]), served(2, 2, [[40, 7], [42, 6], [43, 0]])], standby, nodeId(1), () => false)
  t.equal(adoption.epoch, 3)
  t.same([...adoption.consumed].sort((a, b) => a - b), [5, 40], '41 never served there, 42 served from another batch (an earlier shipment), 43 an answer: only on the node\'s word')
  t.same(adoption.standbyKept, [{ file: 40, node: 2, batch: 7 }], 'the new owner\'s standby copy names it again, for a second takeover')
  const own = planAdoption([served(2, 2, [[40, 7]])], standby, nodeId(2), () => false)
  t.same(own.consumed, [40], 'served from the new owner\'s own mirror: the same')
})

t.test('a file a dead node\'s mirror held when it went is not counted: it died unserved; what that node\'s trainer got stays counted', async t => {
  const gone: SurvivorReport = { ...report(2, 3, [60], [61], 7), servedFromMirror: [{ file: fileId(62), batch: 7 }], gone: true }
  const standby = standbyOf(3, [[60, 2], [61, 2, 7], [62, 2, 7], [63, 2, 5]])
  const adoption = planAdoption([report(1, 3, []), gone], standby, nodeId(1), node => node === 2)
  t.same([...adoption.consumed].sort((a, b) => a - b), [60, 62, 63], '61 died in its mirror; 63 the dead node cannot say of, counted as before')
})

t.test('the new owner learns the last batch any survivor received, holding something or not: its own batches number after it', async t => {
  const adoption = planAdoption([report(1, 2, [5], [], 3), report(2, 2, [6], [], 12)], undefined, nodeId(1), () => false)
  t.equal(adoption.lastBatch, 12)
})

t.test('a survivor gone since it reported (dead, or fenced and back) holds nothing: its held files may be served again, what it served stays consumed', async t => {
  const adoption = planAdoption([report(1, 2, [5]), { ...report(2, 2, [6, 7], [7], 9), gone: true }], undefined, nodeId(1), () => false)
  t.same(adoption.heldElsewhere, [], 'no ledger entry waits on a mirror that restarted')
  t.same([...adoption.consumed].sort((a, b) => a - b), [5, 6])
})

t.test('a standby copy of an older epoch than a survivor knows counts for nothing', async t => {
  const adoption = planAdoption([report(1, 8, [1])], standbyOf(7, [[2, 0]]), nodeId(1), () => true)
  t.equal(adoption.epoch, 8)
  t.same(adoption.consumed, [1])
})
