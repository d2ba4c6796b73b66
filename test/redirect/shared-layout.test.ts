import t from 'tap'
import { buildSharedLayout } from '../../src/redirect/shared-layout'
import { makeSamples, UNEVEN_CLASSES } from '../helpers/samples'

const files = makeSamples(1, UNEVEN_CLASSES)

t.test('every file is in exactly one chunk and one block, each at most K and the block size long', async t => {
  const layout = buildSharedLayout(files, { chunkSize: 16, blockSize: 4, seed: 7 })
  const inChunks = layout.pcs.flatMap(pc => pc.files)
  t.same([...inChunks].sort((a, b) => a - b), files.map((_, id) => id), 'the chunks hold the dataset, once')
  t.ok(layout.pcs.every(pc => pc.files.length >= 1 && pc.files.length <= 16))
  t.ok(layout.blocks.every(block => block.files.length >= 1 && block.files.length <= 4))
  t.same(layout.blocks.flatMap(block => block.files), inChunks, 'blocks cut the chunks in order')
  layout.pcs.forEach((pc, id) => { for (const file of pc.files) t.equal(layout.filePc[file], id) })
  layout.blocks.forEach((block, id) => { for (const file of block.files) t.equal(layout.fileBlock[file], id) })
})

t.test('a chunk holds many classes, and each class is spread evenly over the chunks', async t => {
  const layout = buildSharedLayout(files, { chunkSize: 16, seed: 7 })
  const classesPerChunk = layout.pcs.map(pc => new Set(pc.files.map(file => layout.groupOf[file])).size)
  t.ok(Math.min(...classesPerChunk.slice(0, -1)) >= 5, `every full chunk holds at least 5 of the 10 classes (${Math.min(...classesPerChunk)})`)
  layout.filesOfGroup.forEach((members, group) => {
    // A class of n files among F sits in every F / n-th place: at most one more than its share in any chunk.
    const share = 16 * members.length / files.length
    for (const pc of layout.pcs) {
      const count = pc.files.filter(file => layout.groupOf[file] === group).length
      t.ok(count <= Math.ceil(share) + 1, `class ${group}: ${count} files in a chunk, share ${share.toFixed(1)}`)
    }
    t.equal(layout.files[members[0]].group, layout.groups[group])
  })
})

t.test('the layout is a function of the files, K, block size and seed: its hash says so', async t => {
  const a = buildSharedLayout(files, { chunkSize: 16, seed: 7 })
  t.equal(buildSharedLayout(files, { chunkSize: 16, seed: 7 }).hash, a.hash)
  t.same(buildSharedLayout(files, { chunkSize: 16, seed: 7 }).pcs, a.pcs)
  t.not(buildSharedLayout(files, { chunkSize: 16, seed: 8 }).hash, a.hash)
  t.not(buildSharedLayout(files, { chunkSize: 32, seed: 7 }).hash, a.hash)
  t.throws(() => buildSharedLayout(files, { chunkSize: 0, seed: 7 }), /chunk size must be a whole number/)
})
