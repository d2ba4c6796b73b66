import t from 'tap'
import { planMemory } from '../../src/redirect/budget'
import { buildLayout, type SampleFile } from '../../src/redirect/layout'

/** `counts[g]` files in group g, each of `size` bytes. */
const groupsOf = (counts: readonly number[], size = 100): SampleFile[] =>
  counts.flatMap((count, g) => Array.from({ length: count }, (_, i) => ({ path: `c${g}/f${i}.jpg`, size, group: `c${g}` })))

t.test('the least memory planMemory names gives every group a virtual chunk, and a byte less does not', async t => {
  // Found by the model test (seed 505): at the minimum, memory / bytes per VC rounded to a hair below the group
  // count (here 5675 / 810.71... = 6.99...), and the layout had a group with no VC.
  const files: SampleFile[] = [64, 64, 64, 64, 64, 64, 70].flatMap((size, g) => Array.from({ length: 10 }, (_, i) => ({ path: `c${g}/f${i}.jpg`, size, group: `c${g}` })))
  const { minimumBytes } = planMemory(files, 10, 0)
  t.equal(minimumBytes, 5675)
  t.equal(planMemory(files, 10, minimumBytes).vcCount, 7)
  t.equal(planMemory(files, 10, minimumBytes - 1).vcCount, 6)
})

t.test('a group smaller than a chunk is charged its own files, not K: the least memory is the sum over groups', async t => {
  // K = 10: groups of 2 and 3 files need 2 and 3 slots, the group of 25 a full chunk; 100-byte files, 20% kept for readahead.
  const files = groupsOf([2, 3, 25])
  const plan = planMemory(files, 10, 0)
  t.equal(plan.minimumBytes, (2 + 3 + 10) * 125, 'charged 15 slots, where a chunk per group would be 30')
  t.equal(planMemory(files, 10, plan.minimumBytes).vcCount, 3)
  t.equal(planMemory(files, 10, plan.minimumBytes - 1).vcCount, 1, 'a byte less: fewer VCs than groups, which buildLayout refuses')
  t.throws(() => buildLayout(files, { chunkSize: 10, seed: 1, vcCount: 1 }), /3 redirect groups/)
  // Each VC more is counted at K slots: at 40 slots, 4 VCs, the one more for the one group with chunks to spread.
  const more = planMemory(files, 10, 40 * 125)
  t.equal(more.vcCount, 4)
  const layout = buildLayout(files, { chunkSize: 10, seed: 1, vcCount: more.vcCount })
  t.same(layout.vcs.map(vc => vc.group), [0, 1, 2, 2])
})

t.test('with groups of a chunk or more, the plan is a chunk of K per VC, as before', async t => {
  const files = groupsOf([20, 30, 12])
  t.equal(planMemory(files, 10, 0).minimumBytes, 3 * 10 * 125)
  t.equal(planMemory(files, 10, 5 * 10 * 125).vcCount, 5)
  t.equal(planMemory(files, 10, 6 * 10 * 125 - 1).vcCount, 5)
})

t.test('in a cluster, every node fits the VC count: the least memory is that of the node whose groups need most', async t => {
  // Two nodes, K = 10. Group 0 (15 files) has chunks of 10 and 5, at homes 0 and 1; group 1 (4 files) one chunk, at
  // home 1 (homes start at a node that rotates with the group); group 2 (30 files) chunks of 10 at homes 0, 1, 0.
  const files = groupsOf([15, 4, 30])
  const plan = planMemory(files, 10, 0, 2)
  // Node 0: groups 0 and 2, 20 slots. Node 1: groups 0, 1 and 2 with 5 + 4 + 10 slots. Both need 3 VCs, so node 0
  // holds a second VC of group 2 (its chunks at home 0 are two): 30 slots.
  t.equal(plan.minimumBytes, 30 * 125)
  const vcCount = planMemory(files, 10, plan.minimumBytes, 2).vcCount
  t.equal(vcCount, 3)
  t.doesNotThrow(() => buildLayout(files, { chunkSize: 10, seed: 1, vcCount, nodes: 2 }))
  t.equal(planMemory(files, 10, plan.minimumBytes - 1, 2).vcCount, 2)
})
