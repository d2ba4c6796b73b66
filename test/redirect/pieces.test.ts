import t from 'tap'
import { buildLayout, pcOfFile, type FileId, type PcId, type SampleFile } from '../../src/redirect/layout'
import { vcId } from '../helpers/ids'
import { chooseMixPieces, chooseNextEpochPieces, choosePoolPc } from '../../src/redirect/pieces'
import { SeededRandom } from '../../src/redirect/random'
import { SlotTable } from '../../src/redirect/slots'

// One class of 12 files, K = 4, one VC: PCS(v) = three PCs of 4.
const files: SampleFile[] = Array.from({ length: 12 }, (_, i) => ({ path: `a/${String(i).padStart(2, '0')}.jpg`, size: 100, group: 'a' }))
const layout = buildLayout(files, { chunkSize: 4, seed: 3, vcCount: 1 })
const VC = vcId(0)
const [pc0, pc1, pc2] = layout.vcs[VC].pcs
const filesOf = (pc: PcId): readonly FileId[] => layout.pcs[pc].files

t.test('pool takes only a chunk with files left to serve, outside the excluded ones', async t => {
  const slots = new SlotTable(layout)
  for (const file of filesOf(pc0)) slots.consume(file)
  for (let seed = 0; seed < 20; seed++) {
    t.equal(choosePoolPc(layout, slots, new SeededRandom(seed), VC, new Set([pc1])), pc2)
  }
  for (const file of filesOf(pc2)) slots.consume(file)
  t.equal(choosePoolPc(layout, slots, new SeededRandom(1), VC, new Set([pc1])), undefined, 'nothing qualifies')
})

t.test('mix reads one block per offset range, each from one chunk, only unconsumed files', async t => {
  const slots = new SlotTable(layout)
  slots.consume(filesOf(pc0)[0])
  slots.consume(filesOf(pc1)[0])
  const pieces = chooseMixPieces(layout, slots, new SeededRandom(5), VC, 2)!
  t.equal(pieces.length, 2, 'two blocks of two offsets')
  t.same(pieces.map(piece => piece.files.map(file => layout.fileOffset[file])).map(offsets => offsets.every(o => o < 2) ? 'low' : 'high').sort(), ['high', 'low'])
  for (const piece of pieces) {
    t.ok(piece.files.every(file => pcOfFile(layout, file) === piece.pc), 'a block is one chunk\'s files')
    t.ok(piece.files.every(file => !slots.isConsumed(file)), 'no consumed file is read again')
  }
})

t.test('for the next epoch, pool takes a whole chunk only once every file of it was served', async t => {
  const slots = new SlotTable(layout)
  const served = new Set([...filesOf(pc0), ...filesOf(pc1).slice(0, 3)])
  const pieces = chooseNextEpochPieces(layout, slots, new SeededRandom(2), VC, undefined, new Set(), file => served.has(file))!
  t.same(pieces, [{ pc: pc0, files: filesOf(pc0) }])
  t.equal(chooseNextEpochPieces(layout, slots, new SeededRandom(2), VC, undefined, new Set([pc0]), file => served.has(file)), undefined, 'an excluded chunk never qualifies')
})

t.test('for the next epoch, mix takes only blocks every file of which was served', async t => {
  const slots = new SlotTable(layout)
  // Offsets 0-1 served from pc1 only; offsets 2-3 from no chunk in full.
  const served = new Set([filesOf(pc1)[0], filesOf(pc1)[1], filesOf(pc0)[2], filesOf(pc2)[3]])
  const pieces = chooseNextEpochPieces(layout, slots, new SeededRandom(4), VC, 2, new Set(), file => served.has(file))!
  t.same(pieces, [{ pc: pc1, files: filesOf(pc1).slice(0, 2) }])
})
