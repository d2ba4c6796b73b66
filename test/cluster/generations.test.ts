// Runs across a cluster (docs/design.md, "Runs"), on real daemons with one
// trainer process per node named by REDIRFS_RUN_ID: two jobs reading at
// once on different nodes are detected and said on every node, as on one
// node, until a job starts after both ended.
import { promises as fs } from 'node:fs'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { defaultLogFile } from '../../src/daemon/registry'
import { Job, mountCluster, untilStats } from '../helpers/cluster'
import { generateDataset } from '../helpers/dataset'

const dataset = generateDataset(43)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
const OPTIONS = ['--memory', '120K', '--chunk-size', '4', '--group-depth', '1', '--peer-timeout', '3']

t.test('two jobs at once on different nodes: every node says NOT EXACT and logs it, until a job starts after both ended', async t => {
  const cluster = await mountCluster(t, [dataset.root, dataset.root, dataset.root], OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  const twoA = new Job(t, cluster.mountpoints, 'twoA', [0, 1])
  const twoB = new Job(t, cluster.mountpoints, 'twoB', [2])
  for (let epoch = 0; epoch < 2; epoch++) await Promise.all([twoA.epoch(dataset.samples, 10 + epoch), twoB.epoch(dataset.samples, 20 + epoch)])
  // Each node hears of the other job within a few renewals of its leases.
  const during = await untilStats(cluster.mountpoints, 'every node to say two jobs read at once', stats => stats.every(s => s!.runs!.exact === false))
  t.ok(during.every(s => s!.runs!.concurrentRuns > 0), 'every node counts it')
  await Promise.all([twoA.end(), twoB.end()])
  for (const node of [0, 1, 2]) t.match(await fs.readFile(await defaultLogFile(cluster.mountpoints[node]), 'utf8'), /two jobs read this cluster at once/, `node ${node} logs it`)

  const after = new Job(t, cluster.mountpoints, 'after-both')
  await after.epoch(dataset.samples, 30)
  await after.end()
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.same(stats.map(s => s.runs!.exact), [true, true, true], 'a job after both ended is exact again')
})
