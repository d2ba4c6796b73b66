// The home's ledger of files shipped into other nodes' mirrors: entries
// per VC, who holds what, and nothing left behind once a VC is emptied.
import t from 'tap'
import { ShippedLedger } from '../../src/redirect/ledger'
import { fileId, nodeId, vcId } from '../helpers/ids'

t.test('a shipped file is found by VC and file, and its holders listed once each, in order', async t => {
  const ledger = new ShippedLedger()
  ledger.add(vcId(3), fileId(10), { node: nodeId(2), batch: 1 })
  ledger.add(vcId(3), fileId(11), { node: nodeId(1), batch: 1 })
  ledger.add(vcId(3), fileId(12), { node: nodeId(2), batch: 2 })
  ledger.add(vcId(5), fileId(20), { node: nodeId(1), batch: 7 })
  t.same(ledger.get(vcId(3), fileId(12)), { node: 2, batch: 2 })
  t.equal(ledger.get(vcId(3), fileId(99)), undefined)
  t.equal(ledger.get(vcId(4), fileId(10)), undefined)
  t.same(ledger.files(vcId(3)), [10, 11, 12])
  t.same(ledger.holders(vcId(3)), [1, 2])
  t.same(ledger.heldBy(vcId(3), nodeId(2)), [[10, { node: 2, batch: 1 }], [12, { node: 2, batch: 2 }]])
  t.same(ledger.vcsHeldBy(nodeId(1)), [3, 5])
  t.same(ledger.vcsHeldBy(nodeId(2)), [3])
  t.equal(ledger.size, 4)
})

t.test('a file shipped again replaces its earlier holding: one entry per file', async t => {
  const ledger = new ShippedLedger()
  ledger.add(vcId(0), fileId(1), { node: nodeId(1), batch: 1 })
  ledger.add(vcId(0), fileId(1), { node: nodeId(2), batch: 4 })
  t.same(ledger.entries(vcId(0)), [[1, { node: 2, batch: 4 }]])
  t.equal(ledger.size, 1)
})

t.test('removing the last file of a VC forgets the VC; removing what is not there changes nothing', async t => {
  const ledger = new ShippedLedger()
  ledger.add(vcId(0), fileId(1), { node: nodeId(1), batch: 1 })
  ledger.remove(vcId(0), fileId(2))
  ledger.remove(vcId(9), fileId(1))
  t.equal(ledger.size, 1)
  ledger.remove(vcId(0), fileId(1))
  t.equal(ledger.size, 0)
  t.same(ledger.entries(vcId(0)), [])
  t.same(ledger.vcsHeldBy(nodeId(1)), [], 'no empty VC is left behind')
  ledger.add(vcId(0), fileId(1), { node: nodeId(1), batch: 1 })
  ledger.clear()
  t.equal(ledger.size, 0)
})
