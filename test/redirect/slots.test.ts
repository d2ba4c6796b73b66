// Slot state on its own: a slot holds one file of its offset, a file is
// loaded at most once per epoch (its consumed bit), a rollover makes the
// VC's files loadable again except those still in memory, and resets drop
// everything they say they drop.
import t from 'tap'
import { buildLayout, pcOfFile, type FileId, type Layout, type VcId } from '../../src/redirect/layout'
import { SlotTable } from '../../src/redirect/slots'
import { vcId } from '../helpers/ids'
import { makeSamples } from '../helpers/samples'

/** Two classes of 6 files, chunks of 4: VC 0 and VC 1 each with two PCs (4 + 2 files). */
function layout (): Layout {
  return buildLayout(makeSamples(2, [6, 6]), { chunkSize: 4, seed: 1, vcCount: 2 })
}

const filesOf = (l: Layout, vc: VcId): FileId[] => l.vcs[vc].pcs.flatMap(pc => l.pcs[pc].files)
const [VC0, VC1] = [vcId(0), vcId(1)]

t.test('a placed file sits at its offset until taken, and counts in resident bytes meanwhile', async t => {
  const l = layout()
  const slots = new SlotTable(l)
  const file = l.pcs[l.vcs[0].pcs[0]].files[2]
  t.equal(slots.capacity[0], 4, 'a VC has the slots of its longest PC')
  t.ok(slots.isSlotEmpty(VC0, 2))
  slots.place(VC0, 2, file)
  t.equal(slots.fileAt(VC0, 2), file)
  t.same(slots.validOffsets(VC0), [2])
  t.equal([slots.validSlots(VC0), slots.emptySlots(VC0)].join(), '1,3')
  t.equal(slots.residentBytes, l.files[file].size)
  t.equal(slots.take(VC0, 2), file)
  t.equal(slots.residentBytes, 0)
  t.throws(() => slots.take(VC0, 2), /slot \(0, 2\) is empty/)
})

t.test('consuming every file of a VC once leaves nothing to load; consuming one twice counts once', async t => {
  const l = layout()
  const slots = new SlotTable(l)
  const files = filesOf(l, VC0)
  t.equal(files.length, 6)
  for (const file of files.slice(0, 5)) slots.consume(file)
  slots.consume(files[0])
  t.notOk(slots.allConsumed(VC0), 'one file still to load')
  slots.consume(files[5])
  t.ok(slots.allConsumed(VC0))
  t.notOk(slots.allConsumed(VC1), 'the other VC is untouched')
  slots.unconsume(files[3])
  t.notOk(slots.allConsumed(VC0), 'a file whose bytes were lost is loadable again')
  t.same(slots.unconsumedFilesOf(pcOfFile(l, files[3])), [files[3]])
})

t.test('a rollover makes the VC\'s files loadable again, except those still in memory here or elsewhere', async t => {
  const l = layout()
  const slots = new SlotTable(l)
  const files = filesOf(l, VC0)
  for (const file of files) slots.consume(file)
  slots.place(VC0, l.fileOffset[files[0]], files[0])
  slots.clearConsumed(VC0, [files[1]])
  t.same(files.filter(file => slots.isConsumed(file)).sort(), [files[0], files[1]].sort(), 'in a slot, and in another node\'s mirror')
  t.notOk(slots.allConsumed(VC0))
})

t.test('a staged chunk counts in memory, can give up one file, and is installed at its files\' offsets', async t => {
  const l = layout()
  const slots = new SlotTable(l)
  const chunk = [...l.pcs[l.vcs[1].pcs[0]].files]
  slots.stage(VC1, [...chunk]) // the table keeps the array it is given
  const bytes = (files: FileId[]): number => files.reduce((sum, file) => sum + l.files[file].size, 0)
  t.equal(slots.residentBytes, bytes(chunk))
  t.ok(slots.takeStaged(VC1, chunk[1]))
  t.notOk(slots.takeStaged(VC1, chunk[1]), 'not twice')
  t.equal(slots.residentBytes, bytes(chunk) - l.files[chunk[1]].size)
  slots.installStaged(VC1)
  t.equal(slots.staged(VC1), undefined)
  t.same(slots.validOffsets(VC1).map(offset => slots.fileAt(VC1, offset)), [chunk[0], chunk[2], chunk[3]])
  t.equal(slots.residentBytes, bytes(chunk) - l.files[chunk[1]].size, 'the same bytes, now in slots')
})

t.test('resetting one VC drops its slots and staged chunk and clears its files; resetting all drops everything', async t => {
  const l = layout()
  const slots = new SlotTable(l)
  const [a, b] = [filesOf(l, VC0), filesOf(l, VC1)]
  slots.place(VC0, l.fileOffset[a[0]], a[0])
  slots.stage(VC0, [a[4]])
  slots.place(VC1, l.fileOffset[b[0]], b[0])
  for (const file of [...a, ...b]) slots.consume(file)
  t.same(slots.resetVc(VC0).sort(), [a[0], a[4]].sort())
  t.notOk(a.some(file => slots.isConsumed(file)))
  t.ok(b.every(file => slots.isConsumed(file)), 'the other VC keeps its epoch')
  t.same(slots.reset(), [b[0]])
  t.equal(slots.residentBytes, 0)
  t.notOk(slots.allConsumed(VC0) || slots.allConsumed(VC1))
})
