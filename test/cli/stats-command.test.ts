// What `redirfs stats` makes of the text a mount's stats file holds: the
// table, one line per row, or one line saying why not; found by the stats
// fuzzer (fuzz/stats.fuzz.ts), which met a TypeError for a daemon whose
// stats lack a list, and rows broken by a line break in a path.
import t from 'tap'
import { formatStats, parseStats } from '../../src/cli/stats-command'
import { UsageError } from '../../src/errors'
import { clusterStats, singleStats } from '../helpers/stats'

t.test('the stats of this version print as the table, a row per line', async t => {
  t.equal(formatStats(singleStats, '/mnt/train').split('\n').length, 13)
  t.equal(formatStats(clusterStats, '/mnt/train').split('\n').length, 19)
})

t.test('stats of another shape are refused in one line naming the first field that is not as this version writes it', async t => {
  const { layout, ...withoutGroups } = singleStats
  const crafted: Array<[string, unknown, string]> = [
    ['a list that is not one', { ...singleStats, layout: { ...layout, someGroups: 'ant' } }, 'layout.someGroups is not a list'],
    ['a section missing its fields', { ...withoutGroups, layout: {} }, 'layout.samples is not a number'],
    ['a peer without an address', { ...clusterStats, cluster: { ...clusterStats.cluster, peers: [{ node: 0 }] } }, 'cluster.peers[0].address is not text'],
    ['a source counter that is a list', { ...singleStats, source: { kind: [] } }, 'source is not a table of numbers and text']
  ]
  for (const [what, stats, why] of crafted) {
    t.throws(() => formatStats(parseStats('/mnt/x', JSON.stringify(stats)), '/mnt/x'),
      new UsageError(`/mnt/x answered stats that redirfs cannot show (${why}); is its daemon another version? remount it, or print them with --json`), what)
  }
})

t.test('text that is not a JSON object with every section is refused in one line', async t => {
  for (const text of ['', 'not json', '[]', '{"dataset":1}']) t.throws(() => parseStats('/mnt/x', text), { name: 'UsageError', message: /^\/mnt\/x answered stats that redirfs cannot read \([^\n]+\); is its daemon another version\? remount it$/ }, JSON.stringify(text))
})

t.test('a line break or a terminal escape in a path stays on its row, written out', async t => {
  const output = formatStats({ ...singleStats, dataset: '/data/a\nb\u001b[2J' }, '/mnt/train')
  t.equal(output.split('\n').length, 13)
  t.match(output, 'mount      /data/a\\u000ab\\u001b[2J at /mnt/train')
})

t.test('readaheads held back by files kept open are said on the loads row, and a daemon that does not count them is still shown', async t => {
  t.match(formatStats(singleStats, '/mnt/train'), /^loads +\d+ chunk loads \(40 ahead of need; 5 held back by files kept open\)/m)
  const { readaheadHeldBack, ...older } = singleStats.protocol
  t.match(formatStats(parseStats('/mnt/x', JSON.stringify({ ...singleStats, protocol: older })), '/mnt/x'), /^loads +\d+ chunk loads \(40 ahead of need\), /m)
})
