// A 3-node cluster over a bucket: each node reads its home chunks from the
// bucket (shared storage), peers serve each other's over the data channel;
// every sample exactly once per epoch across the nodes, labels right. An
// ImageFolder of objects, and a pack; on moto and on Ceph RGW.
import { promises as fs } from 'node:fs'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset } from '../helpers/dataset'
import { mountCluster, readClusterEpoch } from '../helpers/cluster'
import { redirfsWith } from '../helpers/mount'
import { createBucket, forEachS3Server, testStore, uploadTree } from '../helpers/s3-server'

const dataset = generateDataset(23)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

forEachS3Server(async (t, server) => {
  const env = server.env
  await createBucket(server, 'data')
  await uploadTree(testStore(t, server, 'data'), dataset.root, 'flat/')
  const packed = await redirfsWith(env, 'pack', dataset.root, 's3://data/flat.pack', '--chunk-size', '4', '--segment-size', '32K')
  if (packed.code !== 0) throw new Error(packed.stderr)

  for (const source of ['s3://data/flat', 's3://data/flat.pack']) {
    t.test(`3 nodes over ${source}: 3 epochs, every sample once across the nodes, labels right`, async t => {
      const options = ['--memory', '200K', '--redirect', 'mix', '--peer-timeout', '5', ...(source.endsWith('.pack') ? [] : ['--chunk-size', '4'])]
      const cluster = await mountCluster(t, [source, source, source], options, () => [], env)
      t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
      for (let epoch = 0; epoch < 3; epoch++) {
        const { reads, errors } = await readClusterEpoch(cluster.mountpoints, dataset.samples, 40 + epoch)
        t.same(errors, [], `epoch ${epoch}: no error`)
        const served = reads.map(r => dataset.byContent.get(r.content))
        t.equal(reads.filter((r, i) => served[i] === undefined || classOf(served[i]!) !== classOf(r.opened)).length, 0, `epoch ${epoch}: labels right`)
        t.same([...served].sort(), dataset.samples, `epoch ${epoch}: every sample once across the nodes`)
      }
      const stats = await Promise.all(cluster.mountpoints.map(readStats))
      t.ok(stats.every(s => Number(s.source.getRequests) > 0), 'every node read its home chunks from the bucket')
      t.ok(stats.reduce((sum, s) => sum + s.cluster!.remoteRequests, 0) > 0, 'and nodes served each other')
    })
  }
})
