// Keys in S3's order (their UTF-8 bytes), which JavaScript's own string
// order gets wrong outside the Basic Multilingual Plane.
import t from 'tap'
import { compareKeys, sortByKey } from '../../src/s3/key-order'
import { SeededRandom } from '../../src/redirect/random'

const byBytes = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b))

t.test('keys that UTF-16 order sorts differently from UTF-8 order sort by their bytes', async t => {
  const keys = ['a/\u{1F600}.jpg', 'a/\uFF5E.jpg', 'a/\uE000.jpg', 'a/z.jpg', 'a/é.jpg', 'a.jpg', 'a/', 'a0']
  t.same([...keys].sort(compareKeys), [...keys].sort(byBytes))
  t.ok('\u{1F600}' < '\uFF5E', 'JavaScript puts the emoji first')
  t.ok(compareKeys('\u{1F600}', '\uFF5E') > 0, 'its UTF-8 bytes (F0 ...) come after EF ...')
})

t.test('on seeded random keys from every plane the order equals Buffer.compare of the UTF-8 bytes', async t => {
  const random = new SeededRandom(7)
  const alphabet = ['a', 'b', '/', '.', ' ', 'é', '猫', '\uE000', '\uFFFD', '\u{1F600}', '\u{10000}', '\u{10FFFF}']
  const keys = Array.from({ length: 2000 }, () => Array.from({ length: 1 + random.below(6) }, () => alphabet[random.below(alphabet.length)]).join(''))
  t.same([...keys].sort(compareKeys), [...keys].sort(byBytes))
})

t.test('sortByKey leaves a sorted list as it is and sorts any other', async t => {
  const sorted = [{ key: 'a' }, { key: 'b' }, { key: 'c' }]
  t.equal(sortByKey(sorted), sorted)
  t.same(sortByKey([{ key: 'b/\u{1F600}' }, { key: 'b/\uFF5E' }, { key: 'a' }]).map(item => item.key), ['a', 'b/\uFF5E', 'b/\u{1F600}'])
})
