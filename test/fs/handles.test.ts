// HandleTable: what a path's getattr reports while handles are bound to it,
// and the bytes the table counts as held by open handles.
import t from 'tap'
import type { OpenFile } from '../../src/chunks/tree'
import { HandleTable } from '../../src/fs/handles'

const bytes = (length: number): { kind: 'bytes', entry: number, bytes: Buffer } => ({ kind: 'bytes', entry: 7, bytes: Buffer.alloc(length) })

t.test('the newest binding of an entry is the size its getattr reports', async t => {
  const table = new HandleTable()
  table.add(bytes(10))
  table.add(bytes(20))
  t.equal(table.boundSize(7), 20)
  t.equal(table.boundSize(8), undefined, 'an entry with no binding has no bound size')
})

t.test('releasing the newest binding falls back to the one before it, releasing the last to none', async t => {
  const table = new HandleTable()
  const older = table.add(bytes(10))
  const newer = table.add(bytes(20))
  table.remove(newer)
  t.equal(table.boundSize(7), 10)
  table.remove(older)
  t.equal(table.boundSize(7), undefined)
})

t.test('releasing an older binding leaves the newest one reported', async t => {
  const table = new HandleTable()
  const older = table.add(bytes(10))
  table.add(bytes(20))
  table.remove(older)
  t.equal(table.boundSize(7), 20)
})

t.test('a handle released twice, or never added, changes nothing', async t => {
  const table = new HandleTable()
  const first = table.add(bytes(10))
  table.add(bytes(20))
  t.ok(table.remove(first))
  t.equal(table.remove(first), undefined)
  t.equal(table.remove(12345), undefined)
  t.equal(table.boundSize(7), 20)
  t.equal(table.size, 1)
  t.equal(table.boundBytes, 20)
})

t.test('bound bytes count what bytes handles hold; pass-through handles hold none', async t => {
  const table = new HandleTable()
  let closed = 0
  const file: OpenFile = { read: async () => 0, close: async () => { closed++ }, native: { bytes: Buffer.alloc(0) } }
  table.add(bytes(10))
  table.add({ kind: 'passthrough', entry: 3, file })
  t.equal(table.boundBytes, 10)
  t.equal(table.boundSize(3), undefined, 'a pass-through open does not change what getattr reports')
  await table.closeAll()
  t.equal(table.size, 0)
  t.equal(table.boundBytes, 0)
  t.equal(closed, 1, 'closing all closes the pass-through file')
})
