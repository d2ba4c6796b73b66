// The home's ledger of files shipped into other nodes' mirrors: entries
// per VC, who holds what, and nothing left behind once a VC is emptied.
import t from 'tap'
import { ShippedLedger } from '../../src/redirect/ledger'

t.test('a shipped file is found by VC and file, and its holders listed once each, in order', async t => {
  const ledger = new ShippedLedger()
  ledger.add(3, 10, { node: 2, batch: 1 })
  ledger.add(3, 11, { node: 1, batch: 1 })
  ledger.add(3, 12, { node: 2, batch: 2 })
  ledger.add(5, 20, { node: 1, batch: 7 })
  t.same(ledger.get(3, 12), { node: 2, batch: 2 })
  t.equal(ledger.get(3, 99), undefined)
  t.equal(ledger.get(4, 10), undefined)
  t.same(ledger.files(3), [10, 11, 12])
  t.same(ledger.holders(3), [1, 2])
  t.same(ledger.heldBy(3, 2), [[10, { node: 2, batch: 1 }], [12, { node: 2, batch: 2 }]])
  t.same(ledger.vcsHeldBy(1), [3, 5])
  t.same(ledger.vcsHeldBy(2), [3])
  t.equal(ledger.size, 4)
})

t.test('a file shipped again replaces its earlier holding: one entry per file', async t => {
  const ledger = new ShippedLedger()
  ledger.add(0, 1, { node: 1, batch: 1 })
  ledger.add(0, 1, { node: 2, batch: 4 })
  t.same(ledger.entries(0), [[1, { node: 2, batch: 4 }]])
  t.equal(ledger.size, 1)
})

t.test('removing the last file of a VC forgets the VC; removing what is not there changes nothing', async t => {
  const ledger = new ShippedLedger()
  ledger.add(0, 1, { node: 1, batch: 1 })
  ledger.remove(0, 2)
  ledger.remove(9, 1)
  t.equal(ledger.size, 1)
  ledger.remove(0, 1)
  t.equal(ledger.size, 0)
  t.same(ledger.entries(0), [])
  t.same(ledger.vcsHeldBy(1), [], 'no empty VC is left behind')
  ledger.add(0, 1, { node: 1, batch: 1 })
  ledger.clear()
  t.equal(ledger.size, 0)
})
