// appendTo: lists kept per key in a Map.
import t from 'tap'
import { appendTo } from '../../src/util/lists'

t.test('appending keeps each key\'s items in the order they came, starting a list the first time', async t => {
  const lists = new Map<string, number[]>()
  appendTo(lists, 'a', 1)
  appendTo(lists, 'b', 2)
  appendTo(lists, 'a', 3)
  t.same([...lists], [['a', [1, 3]], ['b', [2]]])
})

t.test('appending adds to the list already there rather than replacing it', async t => {
  const kept = [1]
  const lists = new Map([['a', kept]])
  appendTo(lists, 'a', 2)
  t.equal(lists.get('a'), kept)
  t.same(kept, [1, 2])
})
