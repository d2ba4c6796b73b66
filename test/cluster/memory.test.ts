// A cluster node keeps to its budgets on real daemons: samples within
// --memory and mirrors within --remote-memory over many epochs; after a
// node dies, a successor holds at most its own budget plus the dead node's
// (the VCs it takes over), and its peak RSS stays within those plus the
// overhead the README states for a cluster node.
import { rmSync } from 'node:fs'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { epochWithKill, mountCluster, readClusterEpoch } from '../helpers/cluster'
import { largeSampleTree, MiB, overheadBytes as nodeOverhead, peakRss } from '../helpers/memory'

const BUDGET = 4 * MiB
const REMOTE = 1 * MiB
const overheadBytes = (files: number): number => nodeOverhead(files, true)

const { root, samples } = largeSampleTree('redirfs-cluster-big-')
t.teardown(() => { rmSync(root, { recursive: true, force: true }) })

t.test('3 nodes, 10 epochs, then a node killed and 3 epochs on two: every budget held, a successor within its own plus the dead node\'s', async t => {
  const cluster = await mountCluster(t, [root, root, root], ['--memory', String(BUDGET), '--remote-memory', String(REMOTE), '--chunk-size', '8', '--peer-timeout', '3'])
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  const pids = await cluster.pids()
  for (let epoch = 0; epoch < 10; epoch++) {
    const { errors } = await readClusterEpoch(cluster.mountpoints, samples, 100 + epoch)
    t.same(errors, [], `epoch ${epoch}: no error`)
  }
  const before = await Promise.all(cluster.mountpoints.map(readStats))
  before.forEach((stats, node) => {
    t.ok(stats.protocol.peakResidentBytes <= BUDGET, `node ${node}: samples in memory peaked at ${stats.protocol.peakResidentBytes} of ${BUDGET}`)
    t.ok(stats.cluster!.peakMirrorBytes <= REMOTE, `node ${node}: mirrors peaked at ${stats.cluster!.peakMirrorBytes} of ${REMOTE}`)
    const bound = BUDGET + REMOTE + overheadBytes(samples.length)
    t.ok(peakRss(pids[node]) <= bound, `node ${node}: peak RSS ${(peakRss(pids[node]) / MiB).toFixed(0)} MiB ≤ ${(bound / MiB).toFixed(0)} MiB`)
  })

  const killed = await epochWithKill(t, cluster.mountpoints, samples, pids, 200)
  t.same(killed.errors.filter(e => e.node !== 2), [], 'the survivors finished the epoch of the kill without error')
  const survivors = cluster.mountpoints.slice(0, 2)
  for (let epoch = 0; epoch < 3; epoch++) {
    const { errors } = await readClusterEpoch(survivors, samples, 300 + epoch)
    t.same(errors, [], `epoch ${epoch} on two nodes: no error`)
  }
  const after = await Promise.all(survivors.map(readStats))
  t.ok(after.reduce((sum, s) => sum + s.cluster!.takeovers, 0) > 0, 'the survivors took over the dead node\'s chunks')
  after.forEach((stats, node) => {
    // The dead node had the same --memory (the handshake insists), and each VC it had brings at most its slots.
    const bound = 2 * BUDGET
    t.ok(stats.protocol.peakResidentBytes <= bound, `node ${node}: samples in memory peaked at ${(stats.protocol.peakResidentBytes / MiB).toFixed(2)} MiB after the takeover, within its budget plus the dead node's (${bound / MiB} MiB)`)
    t.ok(stats.cluster!.peakMirrorBytes <= REMOTE, `node ${node}: mirrors still within --remote-memory`)
    const rssBound = bound + REMOTE + overheadBytes(samples.length)
    t.ok(peakRss(pids[node]) <= rssBound, `node ${node}: peak RSS ${(peakRss(pids[node]) / MiB).toFixed(0)} MiB ≤ ${(rssBound / MiB).toFixed(0)} MiB`)
  })
})
