import t from 'tap'
import { buildLayout, type SampleFile } from '../../src/redirect/layout'
import { vcId } from '../helpers/ids'
import { SeededRandom } from '../../src/redirect/random'
import { chooseRefill, usefulFill } from '../../src/redirect/refill'
import { SlotTable } from '../../src/redirect/slots'

// One class of 12 files, K = 4, one VC: PCS(v) = three PCs of 4.
const files: SampleFile[] = Array.from({ length: 12 }, (_, i) => ({ path: `a/${String(i).padStart(2, '0')}.jpg`, size: 100, group: 'a' }))
const layout = buildLayout(files, { chunkSize: 4, seed: 3, vcCount: 1 })
const VC = vcId(0)
const [pc0, pc1, pc2] = layout.vcs[VC].pcs

function table (): SlotTable { return new SlotTable(layout) }

t.test('useful fill counts empty slots that the chunk would fill with unconsumed files', async t => {
  const slots = table()
  t.equal(usefulFill(layout, slots, VC, pc0), 4)
  slots.place(VC, 0, layout.pcs[pc1].files[0])
  slots.consume(layout.pcs[pc0].files[1])
  t.equal(usefulFill(layout, slots, VC, pc0), 2, 'slot 0 occupied, offset 1 consumed')
})

t.test('the refill choice takes the chunk that fills the most empty slots', async t => {
  const slots = table()
  slots.consume(layout.pcs[pc0].files[0])
  slots.consume(layout.pcs[pc0].files[1])
  slots.consume(layout.pcs[pc1].files[2])
  t.equal(chooseRefill(layout, slots, new SeededRandom(1), VC, 3), pc2)
})

t.test('the refill choice only takes chunks whose file at the target offset is unconsumed', async t => {
  const slots = table()
  slots.consume(layout.pcs[pc2].files[3])
  slots.consume(layout.pcs[pc1].files[3])
  slots.consume(layout.pcs[pc0].files[0])
  t.equal(chooseRefill(layout, slots, new SeededRandom(1), VC, 3), pc0, 'pc0 fills fewer slots but is the only one that fills slot 3')
})

t.test('no candidate means undefined (the caller rolls the epoch over)', async t => {
  const slots = table()
  for (const pc of [pc0, pc1, pc2]) slots.consume(layout.pcs[pc].files[2])
  t.equal(chooseRefill(layout, slots, new SeededRandom(1), VC, 2), undefined)
})

t.test('ties are broken at random, so every tied chunk gets chosen', async t => {
  const chosen = new Set<number>()
  for (let seed = 0; seed < 50; seed++) chosen.add(chooseRefill(layout, table(), new SeededRandom(seed), VC, 0)!)
  t.same([...chosen].sort(), [pc0, pc1, pc2].sort())
})
