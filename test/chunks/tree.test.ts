// The tree's columns, built by hand: entries added in any order come out
// with every directory's children consecutive and in byte order of name
// (what the native server's binary search and listing rely on), and
// paths, lookups, attributes and sample numbers read back as added.
import t from 'tap'
import { DatasetTree, EntryKind, TreeBuilder } from '../../src/chunks/tree'

/** A stat row as a listing gives it (src/chunks/native.ts, Listed). */
const stat = (mode: number, size: number, mtimeSec = 0, mtimeNsec = 0): number[] => [mode, size, 7, 8, 1, 0, 0, mtimeSec, mtimeNsec, 0, 0]
const DIR = 0o40755
const FILE = 0o100644

function build (): { tree: DatasetTree, added: Uint32Array, ids: Record<string, number> } {
  const builder = new TreeBuilder()
  const ids: Record<string, number> = {}
  ids[''] = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  // Added out of order, the way a scan lists directories as they come.
  ids.dog = builder.add(ids[''], 'dog', EntryKind.Directory, stat(DIR, 4096))
  ids['dog/b.jpg'] = builder.add(ids.dog, 'b.jpg', EntryKind.Sample, stat(FILE, 20))
  ids.cat = builder.add(ids[''], 'cat', EntryKind.Directory, stat(DIR, 4096))
  ids['README.txt'] = builder.add(ids[''], 'README.txt', EntryKind.Other, stat(FILE, 5))
  ids['cat/z.jpg'] = builder.add(ids.cat, 'z.jpg', EntryKind.Sample, stat(FILE, 30, 1600000000, 123456789))
  ids['cat/é.jpg'] = builder.add(ids.cat, 'é.jpg', EntryKind.Sample, stat(FILE, 40))
  ids['dog/a.jpg'] = builder.add(ids.dog, 'a.jpg', EntryKind.Sample, stat(FILE, 10))
  const { columns, added } = builder.finish()
  const entryOf = (relative: string): number => added.indexOf(ids[relative])
  const tree = new DatasetTree(columns, ['cat/z.jpg', 'cat/é.jpg', 'dog/a.jpg', 'dog/b.jpg'].map(entryOf), undefined)
  return { tree, added, ids }
}

t.test("every directory's children are consecutive entries in byte order of name, the root first", async t => {
  const { tree } = build()
  const c = tree.columns
  t.equal(tree.count, 8)
  t.equal(tree.pathOf(0), '')
  const listing = (relative: string): string[] => {
    const entry = tree.find(relative)
    return Array.from({ length: c.childCount[entry] }, (_, k) => tree.pathOf(c.firstChild[entry] + k))
  }
  t.same(listing(''), ['README.txt', 'cat', 'dog'], "'R' sorts before 'c' by bytes")
  t.same(listing('cat'), ['cat/z.jpg', 'cat/é.jpg'], 'é (0xc3 0xa9) sorts after z (0x7a)')
  t.same(listing('dog'), ['dog/a.jpg', 'dog/b.jpg'])
  for (let entry = 1; entry < tree.count; entry++) {
    const parent = c.parent[entry]
    t.ok(entry >= c.firstChild[parent] && entry < c.firstChild[parent] + c.childCount[parent], `${tree.pathOf(entry)} lies in its parent's range`)
  }
  t.equal(tree.columns.names[tree.columns.nameEnd[1] - 1], 0, 'each name is followed by a 0 byte')
})

t.test('find is the inverse of pathOf, and says -1 for what is not there', async t => {
  const { tree } = build()
  for (let entry = 0; entry < tree.count; entry++) t.equal(tree.find(tree.pathOf(entry)), entry, tree.pathOf(entry))
  t.equal(tree.find('cat/nope.jpg'), -1)
  t.equal(tree.find('README.txt/x'), -1, 'nothing lies under a file')
  t.equal(tree.find('cow'), -1)
})

t.test('attributes, kinds and listings read back as added', async t => {
  const { tree } = build()
  const z = tree.attributes(tree.find('cat/z.jpg'))
  t.same([z.mode, z.size, z.uid, z.gid, z.nlink, z.mtimeNsec], [FILE, 30, 7, 8, 1, 123456789])
  t.equal(z.mtimeMs, 1600000000123.4568)
  t.equal(tree.kindOf(tree.find('README.txt')), EntryKind.Other)
  t.ok(tree.isDirectory(tree.find('cat')))
  t.same(tree.childNames(tree.find('cat')), ['z.jpg', 'é.jpg'])
  t.equal(tree.childNames(tree.find('README.txt')), undefined)
})

t.test('samples are numbered in the order given, with their size, group and path', async t => {
  const { tree } = build()
  t.same(tree.samples.map(s => [s.path, s.size, s.group]), [['cat/z.jpg', 30, 'cat'], ['cat/é.jpg', 40, 'cat'], ['dog/a.jpg', 10, 'dog'], ['dog/b.jpg', 20, 'dog']])
  t.same(['cat/z.jpg', 'cat/é.jpg', 'dog/a.jpg', 'dog/b.jpg'].map(p => tree.sampleOf(tree.find(p))), [0, 1, 2, 3])
  t.equal(tree.sampleOf(tree.find('README.txt')), undefined)
  t.equal(tree.samples[0].group, tree.samples[1].group, 'samples of one group share its name')
})

t.test("an entry removed before finishing is left out of its directory's listing", async t => {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  const unreadable = builder.add(root, 'locked', EntryKind.Directory, stat(DIR, 4096))
  const cat = builder.add(root, 'cat', EntryKind.Directory, stat(DIR, 4096))
  builder.add(cat, '1.jpg', EntryKind.Sample, stat(FILE, 1))
  builder.remove(unreadable)
  const { columns, added } = builder.finish()
  const tree = new DatasetTree(columns, [added.indexOf(3)], undefined)
  t.equal(tree.count, 3)
  t.same(tree.childNames(0), ['cat'])
  t.equal(tree.find('locked'), -1)
  t.same(tree.samples.map(s => s.path), ['cat/1.jpg'])
})

t.test('a tree larger than the builder starts with grows and keeps every name', async t => {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  const dir = builder.add(root, 'd', EntryKind.Directory, stat(DIR, 4096))
  const names = Array.from({ length: 5000 }, (_, i) => `a-rather-long-file-name-${String(i).padStart(5, '0')}.jpg`)
  for (const name of names) builder.add(dir, name, EntryKind.Other, stat(FILE, name.length))
  const tree = new DatasetTree(builder.finish().columns, [], undefined)
  t.same(tree.childNames(tree.find('d')), names)
  t.equal(tree.attributes(tree.find(`d/${names[4321]}`)).size, names[4321].length)
})

t.test('samples that another set of users may read are another group, even in one directory', async t => {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  const cat = builder.add(root, 'cat', EntryKind.Directory, stat(DIR, 4096))
  const modes: Record<string, number> = { 'all.jpg': 0o644, 'also.jpg': 0o444, 'not-group.jpg': 0o604, 'owner.jpg': 0o600, 'none.jpg': 0o000 }
  for (const [name, mode] of Object.entries(modes)) builder.add(cat, name, EntryKind.Sample, stat(0o100000 | mode, 10))
  const { columns } = builder.finish()
  const tree = new DatasetTree(columns, Array.from({ length: columns.parent.length }, (_, e) => e).filter(e => columns.kind[e] === EntryKind.Sample), undefined)
  const groupOf = (name: string): string => tree.samples.find(s => s.path === `cat/${name}`)!.group
  t.equal(groupOf('all.jpg'), 'cat')
  t.equal(groupOf('also.jpg'), 'cat', 'read bits alike: one group, whatever the write bits')
  t.equal(groupOf('not-group.jpg'), 'cat [readable by uid 7, others, not gid 8]', 'others may read it, but not its group')
  t.equal(groupOf('owner.jpg'), 'cat [readable by uid 7, not gid 8, others]')
  t.equal(groupOf('none.jpg'), 'cat [root only]')
})

t.test('with a coarser grouping, a directory below the group root that keeps users out makes its samples another group', async t => {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  const cat = builder.add(root, 'cat', EntryKind.Directory, stat(DIR, 4096))
  const open = builder.add(cat, 'open', EntryKind.Directory, stat(DIR, 4096))
  const closed = builder.add(cat, 'closed', EntryKind.Directory, stat(0o40700, 4096))
  builder.add(open, 'a.jpg', EntryKind.Sample, stat(FILE, 10))
  builder.add(closed, 'b.jpg', EntryKind.Sample, stat(FILE, 10))
  const { columns } = builder.finish()
  const samples = Array.from({ length: columns.parent.length }, (_, e) => e).filter(e => columns.kind[e] === EntryKind.Sample)
  const tree = new DatasetTree(columns, samples, 1)
  t.same(tree.samples.map(s => [s.path, s.group]).sort(), [['cat/closed/b.jpg', 'cat [readable by uid 7, not gid 8, others; through cat/closed]'], ['cat/open/a.jpg', 'cat']])
})

t.test('with a coarser grouping, two directories that keep out different users make two groups, though described alike', async t => {
  const builder = new TreeBuilder()
  const root = builder.add(0, '', EntryKind.Directory, stat(DIR, 4096))
  const train = builder.add(root, 'train', EntryKind.Directory, stat(DIR, 4096))
  // Each 0750 root-owned, of another group: only that group's members pass.
  const a = builder.add(train, 'a', EntryKind.Directory, [0o40750, 4096, 0, 200, 1, 0, 0, 0, 0, 0, 0])
  const b = builder.add(train, 'b', EntryKind.Directory, [0o40750, 4096, 0, 300, 1, 0, 0, 0, 0, 0, 0])
  builder.add(a, 'x.jpg', EntryKind.Sample, stat(FILE, 10))
  builder.add(b, 'y.jpg', EntryKind.Sample, stat(FILE, 10))
  const { columns } = builder.finish()
  const samples = Array.from({ length: columns.parent.length }, (_, e) => e).filter(e => columns.kind[e] === EntryKind.Sample)
  const tree = new DatasetTree(columns, samples, 1)
  const [x, y] = tree.samples
  t.not(x.group, y.group)
  t.same([x.group, y.group].sort(), ['train [root only; through train/a]', 'train [root only; through train/b]'])
})
