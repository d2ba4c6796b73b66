// Training straight from a bucket, on real S3 servers (moto and Ceph RGW)
// and real mounts: a plain ImageFolder stored as objects and a pack, in every mode,
// read by PyTorch's ImageFolder + DataLoader(4 workers) for 3 epochs with
// the right labels and every sample exactly once; a train/val root; a pack
// copied in by the aws CLI; an interrupted pack upload never mountable;
// one-line errors for every way the bucket can be wrong.
import { execFile, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { emptyDir, forceUnmount, isMounted, mountWith, redirfsWith, CLI } from '../helpers/mount'
import { checkEpochs, generateTorchDataset, runReader } from '../helpers/torch'
import { createBucket, forEachS3Server, startS3Server, testStore, uploadTree } from '../helpers/s3-server'
import { startFaultProxy } from '../helpers/fault-proxy'

const run = promisify(execFile)
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-s3-mount-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

const flat = generateTorchDataset(path.join(work, 'flat'))
const splits = generateTorchDataset(path.join(work, 'splits'), 'splits')

const MOUNT = ['--memory', '200K', '--chunk-size', '4', '--seed', '1']

forEachS3Server(async (t, server) => {
  await createBucket(server, 'data')
  const store = testStore(t, server, 'data')
  await uploadTree(store, (await flat).root, 'flat/')
  await uploadTree(store, (await splits).root, 'splits/')
  const packed = await redirfsWith(server.env, 'pack', (await flat).root, 's3://data/flat.pack', '--chunk-size', '4', '--segment-size', '64K')
  if (packed.code !== 0) throw new Error(packed.stderr)

  for (const source of ['s3://data/flat', 's3://data/flat.pack']) {
    for (const mode of ['strict', 'pool', 'mix']) {
      t.test(`${mode} over ${source}: ImageFolder + DataLoader(4 workers), 3 epochs, labels right, every sample once`, async t => {
        const mountpoint = emptyDir()
        const mounted = await mountWith(t, server.env, source, mountpoint, ...MOUNT.filter(o => !(source.endsWith('.pack') && (o === '--chunk-size' || o === '4'))), '--redirect', mode)
        t.match(mounted.stdout, source.endsWith('.pack') ? /\(a pack in a bucket\)/ : /\(an ImageFolder of objects in a bucket\)/)
        const report = await runReader('read', mountpoint, (await flat).table, '--workers', '4', '--epochs', '3')
        checkEpochs(t, report.epochs, (await flat).identities())
        const stats = await readStats(mountpoint)
        t.equal(stats.source.kind, source.endsWith('.pack') ? 'pack' : 'objects')
        t.equal(stats.source.failures, 0)
        t.ok(stats.protocol.peakResidentBytes <= 200 * 1024, `samples in memory within --memory (peak ${stats.protocol.peakResidentBytes})`)
        if (source.endsWith('.pack') && mode === 'pool') {
          // A GET per chunk, never per file (mix reads blocks of K/4 files: one, at this K of 4).
          t.ok(Number(stats.source.getRequests) < stats.protocol.filesLoaded, `${stats.source.getRequests} GETs for ${stats.protocol.filesLoaded} files loaded`)
        }
      })
    }
  }

  t.test('objects on memory that holds no chunk of every class: the shared layout, labels right, every sample once per epoch', async t => {
    const mountpoint = emptyDir()
    const mounted = await mountWith(t, server.env, 's3://data/flat', mountpoint, '--memory', '60K', '--chunk-size', '64', '--seed', '1')
    t.match(mounted.stdout, /; mix, chunks shared by the groups/)
    const report = await runReader('read', mountpoint, (await flat).table, '--workers', '4', '--epochs', '3')
    checkEpochs(t, report.epochs, (await flat).identities())
    const stats = await readStats(mountpoint)
    t.equal(stats.layout.kind, 'shared')
    t.equal(stats.source.failures, 0)
    t.ok(stats.protocol.peakResidentBytes <= 60 * 1024, `samples in memory within --memory (peak ${stats.protocol.peakResidentBytes})`)
  })

  t.test('a train/val root in a bucket: labels right, each split exactly once per epoch', async t => {
    const mountpoint = emptyDir()
    await mountWith(t, server.env, 's3://data/splits', mountpoint, '--memory', '400K', '--chunk-size', '4')
    const report = await runReader<{ epochs: Array<{ train: string[], val: string[] | null, trainWrongLabels: number, valWrongLabels: number }> }>('splits', mountpoint, (await splits).table, '--epochs', '2')
    for (const [e, epoch] of report.epochs.entries()) {
      t.equal(epoch.trainWrongLabels + epoch.valWrongLabels, 0, `epoch ${e}: labels right`)
      t.same([...epoch.train].sort(), (await splits).identities('train/'), `epoch ${e}: train exactly once`)
      t.same([...(epoch.val ?? [])].sort(), (await splits).identities('val/'), `epoch ${e}: val exactly once`)
    }
  })

  t.test('a pack copied into the bucket by the aws CLI mounts, and verifies', async t => {
    const local = path.join(emptyDir('redirfs-s3-local-'), 'pack')
    const packed = await redirfsWith(server.env, 'pack', (await flat).root, local, '--chunk-size', '4', '--segment-size', '64K')
    t.equal(packed.code, 0, packed.stderr)
    await run('aws', ['s3', 'cp', '--recursive', '--quiet', '--endpoint-url', server.endpoint, local, 's3://data/copied.pack'], { env: server.env })
    const verified = await redirfsWith(server.env, 'verify', 's3://data/copied.pack')
    t.equal(verified.code, 0, verified.stderr)
    t.match(verified.stdout, /is intact/)
    const mountpoint = emptyDir()
    await mountWith(t, server.env, 's3://data/copied.pack', mountpoint, '--memory', '200K')
    checkEpochs(t, (await runReader('read', mountpoint, (await flat).table, '--workers', '2', '--epochs', '1')).epochs, (await flat).identities())
  })

  t.test('a pack upload stopped before its index is never mountable', async t => {
    const proxy = await startFaultProxy(t, server.endpoint)
    const env = { ...server.env, AWS_ENDPOINT_URL: proxy.endpoint }
    // The index is the last object written: hold it, and kill the upload while it waits.
    proxy.inject('hold', { match: request => request.method === 'PUT' && request.key.endsWith('/index.bin') })
    const packing = spawn(process.execPath, [CLI, 'pack', (await flat).root, 's3://data/interrupted.pack', '--chunk-size', '4', '--segment-size', '64K'], { env, stdio: 'ignore' })
    while (proxy.held() === 0) await new Promise(resolve => setTimeout(resolve, 20))
    packing.kill('SIGKILL')
    await new Promise(resolve => packing.once('exit', resolve))
    // Its connection closes with it, and the held PUT of the index is dropped, never forwarded (forwarded, its whole
    // body already read, the server would store it: the race this test once lost).
    while (proxy.held() > 0) await new Promise(resolve => setTimeout(resolve, 20))
    const mountpoint = emptyDir()
    t.teardown(() => forceUnmount(mountpoint))
    const refused = await redirfsWith(server.env, 'mount', 's3://data/interrupted.pack', mountpoint)
    t.equal(refused.code, 1)
    t.equal(refused.stderr, 'redirfs: s3://data/interrupted.pack has a pack\'s files but no index.bin: an upload that did not finish; pack it again (redirfs pack <dir> s3://data/interrupted.pack)\n')
    t.notOk(isMounted(mountpoint))
  })

  t.test('a bucket that cannot be used fails the mount at once, in one line that says what to do', async t => {
    const mountpoint = emptyDir()
    t.teardown(() => forceUnmount(mountpoint))
    // Bad keys need a server that checks them: RGW always does; moto only with its checks on, and then it
    // rejects the signature of any listing whose prefix holds a '/' (as every listing of a mount's does), so only here.
    const secured = server.checksKeys ? server : await startS3Server(t, { kind: server.kind, authentication: true })
    if (secured !== server) await createBucket(secured, 'data')
    const cases: Array<[string, NodeJS.ProcessEnv, string[], RegExp]> = [
      ['a missing bucket', server.env, ['s3://no-such-bucket/x'], /^redirfs: the bucket no-such-bucket does not exist at http:\/\/127\.0\.0\.1:\d+\n$/],
      ['an endpoint where nothing listens', { ...server.env, AWS_ENDPOINT_URL: 'http://127.0.0.1:9' }, ['s3://data/flat'], /^redirfs: cannot reach the S3 endpoint http:\/\/127\.0\.0\.1:9 \(connection refused\); check --s3-endpoint\n$/],
      ['an empty prefix', server.env, ['s3://data/nothing-here'], /^redirfs: s3:\/\/data\/nothing-here\/ holds no objects: neither a pack .* nor an ImageFolder .*; check the bucket and prefix\n$/],
      ['bad credentials', { ...secured.env, AWS_SECRET_ACCESS_KEY: 'not-the-secret' }, ['s3://data/flat'], /^redirfs: access denied .*credentials.*\n$/i],
      ['a bad URL', server.env, ['s3://Bad_Bucket/x'], /^redirfs: 's3:\/\/Bad_Bucket\/x' has an invalid bucket name/]
    ]
    for (const [what, env, args, message] of cases) {
      const result = await redirfsWith(env, 'mount', ...args, mountpoint)
      t.equal(result.code, 1, `${what}: exit 1`)
      t.match(result.stderr, message, `${what}: says what is wrong`)
    }
    t.notOk(isMounted(mountpoint))
  })
})
