// A node's mirrors of other nodes' VCs, on their own (test/redirect/cluster.test.ts drives them with the protocol).
import t from 'tap'
import { buildLayout, vcOfFile } from '../../src/redirect/layout'
import { MirrorTable } from '../../src/redirect/mirror'
import { fileId } from '../helpers/ids'
import { makeSamples } from '../helpers/samples'

t.test('a request tried again names the last batch and the files given back as the mirror stands then: after a reset, none of the mirror before it', async t => {
  const files = makeSamples(3, [16])
  const layout = buildLayout(files, { chunkSize: 8, seed: 1, vcCount: 1, nodes: 2 })
  const mirror = new MirrorTable(layout, 1e9, 'pool', 1)
  const remote = layout.files.map((_, id) => fileId(id)).filter(file => layout.vcs[vcOfFile(layout, file)].home === 1)
  const [opened, shipped, kept, next] = remote
  const first = mirror.open(opened)
  if (first.kind !== 'request') throw new Error('the first open asks the owner')
  mirror.finishRequest(first.request, { served: opened, batch: [shipped, kept], batchNumber: 5, vcEpoch: 0 })
  const givenBack = mirror.answerReclaim(vcOfFile(layout, shipped), true, [layout.fileOffset[shipped]]).returned
  t.equal(givenBack, shipped)
  mirror.open(kept) // served from the mirror: it holds nothing more of the VC
  const second = mirror.open(next)
  if (second.kind !== 'request') throw new Error('an open the mirror cannot answer asks the owner')
  t.same([second.request.lastBatch, second.request.givenBackBefore], [5, [{ file: shipped, batch: 5 }]], 'as built')
  t.same([mirror.current(second.request).lastBatch, mirror.current(second.request).givenBackBefore], [5, [{ file: shipped, batch: 5 }]], 'the same while nothing changed')
  mirror.reset()
  t.same([mirror.current(second.request).lastBatch, mirror.current(second.request).givenBackBefore], [0, []], 'after a reset: the mirror starts again at batch 0')
})
