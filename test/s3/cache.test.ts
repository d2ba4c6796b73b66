// The local disk tier of a pack in a bucket (--cache-dir): later epochs
// read chunks from local disk, not the bucket; the cache stays within
// --cache-size; a remount of the same pack finds it again; a damaged cached
// chunk is never served (read from the bucket again); a pack written anew
// never meets the old one's chunks; chunks forged with the right CRC-32s fail
// the cache's HMAC and are read from the bucket; another bucket holding the
// same index over forged chunks has a cache of its own. On moto and on Ceph RGW.
import { promises as fs, readdirSync } from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset } from '../helpers/dataset'
import { emptyDir, forceUnmount, mountWith, redirfsWith, settledStats } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'
import { createBucket, forEachS3Server, testStore } from '../helpers/s3-server'
import { forgeCrc } from '../helpers/crc-forge'
import { INDEX_FILE, loadPackIndex } from '../../src/pack/pack-index'
import { segmentName } from '../../src/pack/storage'
import { BucketPackStorage } from '../../src/s3/pack-storage'
import { parseS3Url } from '../../src/s3/location'

const dataset = generateDataset(31)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

/** The cache's packs' directories, and in them its chunk files (beside them, the cache's key). */
const cachedPacks = (cacheDir: string): string[] => readdirSync(cacheDir).filter(name => name.startsWith('pack-')).map(name => path.join(cacheDir, name))
const cachedChunks = (cacheDir: string): string[] => cachedPacks(cacheDir).flatMap(pack => readdirSync(pack).map(name => path.join(pack, name)))

forEachS3Server(async (t, server) => {
  const env = server.env
  await createBucket(server, 'data')
  const packed = await redirfsWith(env, 'pack', dataset.root, 's3://data/cached.pack', '--chunk-size', '4', '--segment-size', '32K')
  if (packed.code !== 0) throw new Error(packed.stderr)

  async function epochs (t: Test, mountpoint: string, count: number, seed: number): Promise<void> {
    for (let e = 0; e < count; e++) {
      const read = await readEpoch(mountpoint, dataset.samples, seed + e)
      t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, `epoch ${e}: every sample once, intact`)
    }
  }

  t.test('later epochs read the chunks from local disk; a remount of the same pack finds them again', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    await epochs(t, mountpoint, 1, 10)
    const first = await settledStats(mountpoint)
    t.ok(Number(first.source.cacheMisses) > 0, 'the first epoch fetched chunks from the bucket')
    await epochs(t, mountpoint, 2, 20)
    const later = await settledStats(mountpoint)
    t.equal(later.source.getRequests, first.source.getRequests, 'no GET after the first epoch')
    t.ok(Number(later.source.cacheHits) > 0)
    await forceUnmount(mountpoint)
    const again = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', again, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'mix')
    await epochs(t, again, 1, 30)
    const remounted = await settledStats(again)
    t.equal(remounted.source.getRequests, 2, 'after a remount the bucket is asked only for the index (its first bytes, then all of it)')
  })

  t.test('in mix mode each chunk is fetched from the bucket once, however many of its blocks miss at once', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    // Blocks of one file: every load of a chunk's files misses the cache until its first fetch is done.
    await mountWith(t, env, 's3://data/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'mix', '--mix-block', '1')
    await epochs(t, mountpoint, 1, 40)
    const stats = await readStats(mountpoint)
    t.equal(stats.source.getRequests, 2 + stats.layout.physicalChunks, 'the index (two GETs), then one GET per chunk')
    t.equal(stats.source.cacheMisses, stats.layout.physicalChunks)
  })

  t.test('the cache stays within --cache-size', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--cache-size', '40K', '--redirect', 'pool')
    await epochs(t, mountpoint, 2, 40)
    const stats = await readStats(mountpoint)
    t.ok(Number(stats.source.cacheBytes) <= 40 * 1024, `${stats.source.cacheBytes} bytes cached`)
    t.ok(Number(stats.source.cacheEvictions) > 0, 'the least recently read went')
    // Readahead may still be filling and evicting: a file gone since the listing holds nothing.
    const onDisk = (await Promise.all(cachedChunks(cacheDir).map(async file => await fs.stat(file).then(stat => stat.size, () => 0)))).reduce((a, b) => a + b, 0)
    t.ok(onDisk <= 40 * 1024, `${onDisk} bytes on disk`)
  })

  t.test('a damaged cached chunk is never served: it is read from the bucket again', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    await epochs(t, mountpoint, 1, 50)
    for (const file of cachedChunks(cacheDir)) {
      const bytes = await fs.readFile(file)
      bytes[0] ^= 0xff
      await fs.writeFile(file, bytes)
    }
    await epochs(t, mountpoint, 2, 60)
    const stats = await readStats(mountpoint)
    t.equal(stats.source.corruptChunks, 0, 'nothing damaged was served or counted against the pack')
    t.equal(stats.protocol.failedOpens, 0)
  })

  t.test('a pack written anew under the same prefix never meets the old one\'s chunks', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    await redirfsWith(env, 'pack', dataset.root, 's3://data/repacked.pack', '--chunk-size', '4', '--seed', '1')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://data/repacked.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir)
    await epochs(t, mountpoint, 1, 70)
    await forceUnmount(mountpoint)
    const { ObjectStore } = await import('../../src/s3/store')
    const store = new ObjectStore({ bucket: 'data', endpoint: server.endpoint, credentials: server.credentials })
    await store.deletePrefix('repacked.pack/')
    await store.close()
    const repacked = await redirfsWith(env, 'pack', dataset.root, 's3://data/repacked.pack', '--chunk-size', '4', '--seed', '2')
    t.equal(repacked.code, 0, repacked.stderr)
    const again = emptyDir()
    await mountWith(t, env, 's3://data/repacked.pack', again, '--memory', '300K', '--cache-dir', cacheDir)
    await epochs(t, again, 1, 80)
    t.equal(cachedPacks(cacheDir).length, 2, 'each pack has its own cache directory')
  })

  t.test('chunks forged in the cache with the right lengths and CRC-32s are never served (the shared-cache attack)', async t => {
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    await epochs(t, mountpoint, 1, 90)
    await forceUnmount(mountpoint)
    // Every sample of every cached chunk rewritten as "PWNED", 4 bytes of each solved for so that its CRC-32 is the index's.
    const store = testStore(t, server, 'data')
    const pack = await loadPackIndex(new BucketPackStorage(store, parseS3Url('s3://data/cached.pack')))
    const forged = cachedChunks(cacheDir)
    for (const file of forged) {
      const chunk = Number(path.basename(file, '.chunk'))
      const bytes = await fs.readFile(file)
      for (let entry = 0; entry < pack.header.entries; entry++) {
        if (pack.arrays.kind[entry] !== 1 || pack.arrays.chunk[entry] !== chunk) continue
        const start = pack.arrays.location[entry] - pack.arrays.chunkOffset[chunk]
        const sample = bytes.subarray(start, start + pack.arrays.size[entry])
        sample.fill('PWNED')
        forgeCrc(sample, 0, pack.arrays.crc[entry])
      }
      await fs.writeFile(file, bytes)
    }
    const again = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', again, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    await epochs(t, again, 2, 100)
    const stats = await readStats(again)
    t.equal(stats.source.cacheForged, forged.length, 'each forged chunk failed its HMAC')
    t.equal(stats.source.corruptChunks, 0, 'and was read from the bucket instead')
    t.equal(stats.protocol.failedOpens, 0)
  })

  t.test('a bucket that copies a pack\'s index over forged chunks never feeds the real pack\'s cache (the poisoning attack)', async t => {
    // Another bucket: the same index.bin, every sample of its segments "PWNED" with the index's CRC-32s.
    await createBucket(server, 'forged')
    const real = testStore(t, server, 'data')
    const forger = testStore(t, server, 'forged')
    const pack = await loadPackIndex(new BucketPackStorage(real, parseS3Url('s3://data/cached.pack')))
    await forger.put(`cached.pack/${INDEX_FILE}`, await real.getObject(`cached.pack/${INDEX_FILE}`))
    for (let segment = 0; segment < pack.header.segments; segment++) {
      const bytes = await real.getObject(`cached.pack/${segmentName(segment)}`)
      for (let entry = 0; entry < pack.header.entries; entry++) {
        if (pack.arrays.kind[entry] !== 1 || pack.arrays.chunkSegment[pack.arrays.chunk[entry]] !== segment || pack.arrays.size[entry] < 4) continue
        const sample = bytes.subarray(pack.arrays.location[entry], pack.arrays.location[entry] + pack.arrays.size[entry])
        sample.fill('PWNED')
        forgeCrc(sample, 0, pack.arrays.crc[entry])
      }
      await forger.put(`cached.pack/${segmentName(segment)}`, bytes)
    }
    const cacheDir = emptyDir('redirfs-cache-')
    const mountpoint = emptyDir()
    await mountWith(t, env, 's3://forged/cached.pack', mountpoint, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    const served = await readEpoch(mountpoint, dataset.samples, 110)
    t.ok(served.some(r => !dataset.byContent.has(r.content)), 'the forged bucket serves forged bytes (they pass its index\'s checks)')
    await forceUnmount(mountpoint)
    const again = emptyDir()
    await mountWith(t, env, 's3://data/cached.pack', again, '--memory', '300K', '--cache-dir', cacheDir, '--redirect', 'pool')
    await epochs(t, again, 1, 120)
    t.equal(cachedPacks(cacheDir).length, 2, 'each bucket\'s pack has a cache of its own')
    const stats = await readStats(again)
    t.ok(Number(stats.source.cacheMisses) >= stats.layout.physicalChunks, 'the real pack met none of the forged chunks: it fetched each of its own')
  })
})
