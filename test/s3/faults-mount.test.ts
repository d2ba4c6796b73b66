// A bucket mount through a fault-injecting proxy of the tests' own: 503
// SlowDown, 500, connection resets, stalls and bodies cut short are
// retried and nothing is lost or duplicated; a GET that fails past its
// retries is EIO for exactly the open that needed it; an object replaced
// during the mount is an error (If-Match), never other bytes. On moto
// and on Ceph RGW.
import { promises as fs } from 'node:fs'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset } from '../helpers/dataset'
import { emptyDir, mountWith } from '../helpers/mount'
import { epochBoundary, readEpoch, readFileAsTrainer } from '../helpers/readers'
import { startFaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, testStore, uploadTree, type S3Server } from '../helpers/s3-server'

const dataset = generateDataset(21)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

async function mountThrough (t: Test, server: S3Server, ...options: string[]): Promise<{ mountpoint: string, proxy: Awaited<ReturnType<typeof startFaultProxy>> }> {
  const proxy = await startFaultProxy(t, server.endpoint)
  const env: NodeJS.ProcessEnv = { ...server.env, AWS_ENDPOINT_URL: proxy.endpoint }
  const mountpoint = emptyDir()
  await mountWith(t, env, 's3://data/flat', mountpoint, '--memory', '300K', '--chunk-size', '4', '--s3-timeout', '2', ...options)
  return { mountpoint, proxy }
}

const sampleGets = (request: { method: string, key: string }): boolean => request.method === 'GET' && /\.(jpg|png|JPEG)$/.test(request.key)

forEachS3Server(async (t, server) => {
  await createBucket(server, 'data')
  await uploadTree(testStore(t, server, 'data'), dataset.root, 'flat/')

  t.test('transient faults on sample GETs are retried: every sample once per epoch, nothing failed', async t => {
    const { mountpoint, proxy } = await mountThrough(t, server)
    proxy.inject('slow-down', { times: 4, match: sampleGets })
    proxy.inject('internal-error', { times: 2, match: sampleGets })
    proxy.inject('reset', { times: 3, match: sampleGets })
    proxy.inject('short-body', { times: 3, match: sampleGets })
    proxy.inject('stall', { times: 1, match: sampleGets })
    for (let epoch = 0; epoch < 2; epoch++) {
      const read = await readEpoch(mountpoint, dataset.samples, 90 + epoch)
      t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, `epoch ${epoch}: every sample once, intact`)
    }
    t.equal(proxy.pending(), 0, 'every fault was met')
    const stats = await readStats(mountpoint)
    t.ok(Number(stats.source.retries) >= 13, `${stats.source.retries} retries`)
    t.equal(stats.source.failures, 0)
    t.equal(stats.protocol.failedOpens, 0)
  })

  t.test('a GET that fails past its retries is EIO for exactly the open that needed it; every other sample comes once', async t => {
    const { mountpoint, proxy } = await mountThrough(t, server)
    const victim = dataset.samples.find(s => s.startsWith('cat/'))!
    proxy.inject('slow-down', { times: 1000, match: request => request.method === 'GET' && request.key === `flat/${victim}` })
    await epochBoundary()
    const outcomes = await Promise.allSettled(dataset.samples.map(async sample => await readFileAsTrainer(mountpoint, sample)))
    const failed = outcomes.filter(o => o.status === 'rejected')
    t.equal(failed.length, 1, 'one open failed')
    t.equal(failed[0]?.status === 'rejected' && (failed[0].reason as NodeJS.ErrnoException).code, 'EIO')
    const served = outcomes.flatMap(o => o.status === 'fulfilled' ? [dataset.byContent.get(o.value.content)!] : [])
    t.same(served.sort(), dataset.samples.filter(s => s !== victim), 'every other sample once; the unreadable one never')
    const stats = await readStats(mountpoint)
    t.ok(Number(stats.source.failures) >= 1)
    t.equal(stats.protocol.failedOpens, 1)
  })

  t.test('an object replaced during the mount is EIO for the open that needed it, never other bytes', async t => {
    const { mountpoint } = await mountThrough(t, server, '--redirect', 'off')
    const victim = dataset.samples.find(s => s.startsWith('dog/'))!
    const original = await fs.readFile(`${dataset.root}/${victim}`)
    await testStore(t, server, 'data').put(`flat/${victim}`, Buffer.from(original).fill(0x33, 0, 32))
    await epochBoundary()
    await t.rejects(readFileAsTrainer(mountpoint, victim), { code: 'EIO' })
    const stats = await readStats(mountpoint)
    t.equal(stats.source.changedFiles, 1, 'counted as changed')
    await testStore(t, server, 'data').put(`flat/${victim}`, original)
  })
})
