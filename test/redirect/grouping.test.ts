import t from 'tap'
import { describeGrouping, groupOf, sampleOfGroups } from '../../src/redirect/grouping'
import { buildLayout } from '../../src/redirect/layout'
import type { SampleFile } from '../../src/redirect/layout'

t.test('by default a sample is grouped with the files of the directory that holds it, at any depth', async t => {
  t.equal(groupOf('cat/001.jpg', undefined), 'cat')
  t.equal(groupOf('train/n01/001.jpg', undefined), 'train/n01')
  t.equal(groupOf('val/n01/001.jpg', undefined), 'val/n01', 'a split of the same class is its own group')
  t.equal(groupOf('train/n01/burst 3/001.jpg', undefined), 'train/n01/burst 3', 'a nested directory is a finer group of one class')
})

t.test('--group-depth N groups by the first N directories; a shallower file keeps its own directory', async t => {
  t.equal(groupOf('cat/video1/f001.jpg', 1), 'cat')
  t.equal(groupOf('train/cat/video1/f001.jpg', 2), 'train/cat')
  t.equal(groupOf('train/cat/f001.jpg', 2), 'train/cat')
  t.equal(groupOf('train/cat/f001.jpg', 5), 'train/cat', 'a depth below the file is its directory')
  t.equal(groupOf('train/cat/f001.jpg', 1), 'train', 'too shallow a depth mixes classes: that is the documented risk')
})

t.test('groupings are described for messages and stats', async t => {
  t.equal(describeGrouping(undefined), 'the directory holding each sample')
  t.equal(describeGrouping(1), 'the first 1 directory of each sample\'s path')
  t.equal(describeGrouping(2), 'the first 2 directories of each sample\'s path')
})

t.test('a few group names spread over the list show both splits of a train/val root', async t => {
  const groups = ['train/a', 'train/b', 'train/c', 'train/d', 'val/a', 'val/b', 'val/c', 'val/d']
  t.same(sampleOfGroups(groups), ['train/a', 'train/c', 'val/b', 'val/d'])
  t.same(sampleOfGroups(['x', 'y']), ['x', 'y'])
  t.same(sampleOfGroups(groups, 1), ['train/a'])
})

t.test('no physical or virtual chunk of a train/val root mixes classes or splits', async t => {
  const files: SampleFile[] = []
  for (const split of ['train', 'val']) {
    for (const cls of ['n01', 'n02', 'n03']) {
      for (let i = 0; i < 20; i++) {
        const p = `${split}/${cls}/${String(i).padStart(3, '0')}.jpg`
        files.push({ path: p, size: 100, group: groupOf(p, undefined) })
      }
    }
  }
  files.sort((a, b) => (a.path < b.path ? -1 : 1))
  const layout = buildLayout(files, { chunkSize: 8, seed: 3, vcCount: 12 })
  t.same(layout.groups, ['train/n01', 'train/n02', 'train/n03', 'val/n01', 'val/n02', 'val/n03'])
  for (const pc of layout.pcs) t.equal(new Set(pc.files.map(f => files[f].path.split('/').slice(0, 2).join('/'))).size, 1, 'one split and class per chunk')
  for (const vc of layout.vcs) t.equal(new Set(vc.pcs.map(pc => layout.pcs[pc].group)).size, 1, 'one group per virtual chunk')
})

t.test('the layout hash covers the grouping: the same files grouped otherwise hash otherwise', async t => {
  const paths = ['a/x/1.jpg', 'a/x/2.jpg', 'a/y/1.jpg', 'a/y/2.jpg']
  const by = (depth: number | undefined): SampleFile[] => paths.map(p => ({ path: p, size: 10, group: groupOf(p, depth) }))
  const fine = buildLayout(by(undefined), { chunkSize: 2, seed: 0, vcCount: 2 })
  const coarse = buildLayout(by(1), { chunkSize: 2, seed: 0, vcCount: 2 })
  t.not(fine.hash, coarse.hash)
})
