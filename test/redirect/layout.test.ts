import t from 'tap'
import { buildLayout, cutPhysicalChunks, groupsPerHome, shareVcs } from '../../src/redirect/layout'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

const files = makeSamples(1, UNEVEN_CLASSES)

t.test('every physical chunk holds files of one class only, at most K of them', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  for (const pc of layout.pcs) {
    t.ok(pc.files.length >= 1 && pc.files.length <= 16)
    t.same(new Set(pc.files.map(f => files[f].group)).size, 1)
    t.equal(layout.groups[pc.group], files[pc.files[0]].group)
  }
})

t.test('every virtual chunk maps chunks of one class, and every class has at least one', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  t.equal(layout.vcs.length, 30)
  for (const vc of layout.vcs) {
    t.ok(vc.pcs.length >= 1)
    for (const pc of vc.pcs) t.equal(layout.pcs[pc].group, vc.group)
  }
  t.same(new Set(layout.vcs.map(vc => vc.group)).size, layout.groups.length)
})

t.test('every file has exactly one chunk and offset, and they agree with the chunks', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  const seen = new Set<number>()
  layout.pcs.forEach((pc, id) => pc.files.forEach((file, offset) => {
    t.notOk(seen.has(file), `file ${file} appears once`)
    seen.add(file)
    t.equal(layout.filePc[file], id)
    t.equal(layout.fileOffset[file], offset)
  }))
  t.equal(seen.size, files.length)
})

t.test('the layout is a function of the seed: same seed same hash, other seed other hash', async t => {
  const a = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  const b = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  const c = buildLayout(files, { chunkSize: 16, seed: 8, vcCount: 30 })
  t.equal(a.hash, b.hash)
  t.same(a.pcs, b.pcs)
  t.not(a.hash, c.hash)
})

t.test('files are shuffled within a class, not chunked in directory order', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  const first = layout.pcs.find(pc => files[pc.files[0]].group === 'class00')!
  const sorted = [...first.files].sort((a, b) => a - b)
  t.notSame(first.files, sorted)
})

t.test('more VCs than chunks gives each chunk its own VC', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 10_000 })
  t.equal(layout.vcs.length, layout.pcs.length)
  for (const vc of layout.vcs) t.equal(vc.pcs.length, 1)
})

t.test('fewer VCs than classes is refused with a RangeError', async t => {
  t.throws(() => buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 9 }), RangeError)
})

t.test('VC shares follow PC counts, at least one each and never more than the PCs', async t => {
  t.same(shareVcs([10, 10], 4), [2, 2])
  t.same(shareVcs([30, 10], 4), [3, 1])
  t.same(shareVcs([100, 1, 1], 5), [3, 1, 1])
  t.same(shareVcs([2, 1], 10), [2, 1])
  const shares = shareVcs([5, 7, 1, 13, 2], 11)
  t.equal(shares.reduce((a, b) => a + b, 0), 11)
  shares.forEach(s => t.ok(s >= 1))
})

t.test('one node: the layout is the single-mount layout, with every chunk at home on node 0', async t => {
  const single = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  const one = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30, nodes: 1 })
  t.equal(one.hash, single.hash)
  t.ok(one.pcs.every(pc => pc.home === 0) && one.vcs.every(vc => vc.home === 0))
})

t.test('three nodes: every chunk has a home, each VC serves one class and one home, each node has its own VCs', async t => {
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 12, nodes: 3 })
  t.equal(layout.nodes, 3)
  for (const vc of layout.vcs) {
    for (const pc of vc.pcs) {
      t.equal(layout.pcs[pc].group, vc.group)
      t.equal(layout.pcs[pc].home, vc.home)
      t.equal(layout.pcs[pc].vc, layout.vcs.indexOf(vc))
    }
  }
  for (let node = 0; node < 3; node++) {
    const own = layout.vcs.filter(vc => vc.home === node).length
    t.ok(own >= 1 && own <= 12, `node ${node} holds ${own} VCs, within its memory`)
  }
  // Homes are dealt round-robin within a class: a class of many chunks is spread over every node.
  const homesOfBigClass = new Set(layout.pcs.filter(pc => layout.groups[pc.group] === 'class00').map(pc => pc.home))
  t.same([...homesOfBigClass].sort(), [0, 1, 2])
})

t.test('homes depend on the chunking only, not on memory; PC ids do not depend on the node count', async t => {
  const a = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 12, nodes: 3 })
  const b = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 40, nodes: 3 })
  const single = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 30 })
  t.same(a.pcs.map(pc => pc.home), b.pcs.map(pc => pc.home))
  t.same(a.pcs.map(pc => pc.files), single.pcs.map(pc => pc.files))
  t.not(a.hash, single.hash, 'the node count is part of the layout hash')
})

t.test('groupsPerHome counts the classes each node must hold a VC for', async t => {
  const chunking = cutPhysicalChunks(files, 16, 7)
  const counts = groupsPerHome(chunking, 3)
  const layout = buildLayout(files, { chunkSize: 16, seed: 7, vcCount: 12, nodes: 3 })
  for (let node = 0; node < 3; node++) {
    t.equal(counts[node], new Set(layout.pcs.filter(pc => pc.home === node).map(pc => pc.group)).size)
  }
  t.throws(() => buildLayout(files, { chunkSize: 16, seed: 7, vcCount: Math.min(...counts) - 1, nodes: 3 }), /on node \d/)
})
