// A pack in a bucket with a damaged segment object (a byte of one sample
// flipped before it was put there): the damaged file is never served,
// whether its chunk is read whole or a run or block of it (each file is
// checked against its CRC-32 as the GET scatters it into its buffer); the
// chunk is counted corrupt, and every other sample comes intact. On moto
// and on Ceph RGW.
import { promises as fs } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { loadPackIndex } from '../../src/pack/pack-index'
import { segmentName } from '../../src/pack/storage'
import { generateDataset } from '../helpers/dataset'
import { emptyDir, mountWith, redirfs } from '../helpers/mount'
import { checkDamagedChunk, epochBoundary, readFileAsTrainer } from '../helpers/readers'
import { createBucket, forEachS3Server, testStore, uploadTree } from '../helpers/s3-server'

const dataset = generateDataset(33)
const work = emptyDir('redirfs-s3-packs-')
t.teardown(async () => {
  await fs.rm(dataset.root, { recursive: true, force: true })
  await fs.rm(work, { recursive: true, force: true })
})

forEachS3Server(async (t, server) => {
  // Packed here, one byte of a sample flipped, then the whole pack put into the bucket.
  const pack = path.join(work, `${server.kind}.pack`)
  const packed = await redirfs('pack', dataset.root, pack, '--chunk-size', '4', '--seed', '3', '--segment-size', '64K')
  if (packed.code !== 0) throw new Error(packed.stderr)
  const index = await loadPackIndex(pack)
  const victim = index.sampleEntry[5]
  const victimPath = index.path(victim)
  const chunk = index.arrays.chunk[victim]
  const segment = await fs.open(path.join(pack, segmentName(index.arrays.chunkSegment[chunk])), 'r+')
  const at = index.arrays.location[victim] + 10
  const byte = Buffer.alloc(1)
  await segment.read(byte, 0, 1, at)
  byte[0] ^= 0xff
  await segment.write(byte, 0, 1, at)
  await segment.close()
  await createBucket(server, 'data')
  await uploadTree(testStore(t, server, 'data'), pack, 'damaged.pack/')
  const inChunk = new Set(index.tree.samples.filter((_, id) => index.arrays.chunk[index.sampleEntry[id]] === chunk).map(sample => sample.path))

  t.test('off: the damaged file is EIO, its chunk counted corrupt, every other chunk\'s samples intact', async t => {
    const mountpoint = emptyDir()
    await mountWith(t, server.env, 's3://data/damaged.pack', mountpoint, '--memory', '300K', '--redirect', 'off')
    // The first read of the chunk (whole) fails as a whole; a later one, of the files left, is checked file by file.
    await checkDamagedChunk(t, mountpoint, dataset, victimPath, inChunk)
    t.ok(Number((await readStats(mountpoint)).source.corruptChunks) >= 1)
  })

  t.test('mix, blocks of one file: no damaged byte is served, and only the damaged file is missing from the epoch', async t => {
    const mountpoint = emptyDir()
    await mountWith(t, server.env, 's3://data/damaged.pack', mountpoint, '--memory', '300K', '--redirect', 'mix', '--mix-block', '1')
    await epochBoundary()
    const outcomes = await Promise.allSettled(dataset.samples.map(async relative => await readFileAsTrainer(mountpoint, relative)))
    const served = outcomes.flatMap(outcome => outcome.status === 'fulfilled' ? [dataset.byContent.get(outcome.value.content)] : [])
    t.notOk(served.includes(undefined), 'every served sample is one of the dataset, intact')
    t.same([...served].sort(), dataset.samples.filter(relative => relative !== victimPath), 'each other sample once; the damaged one never')
    const stats = await readStats(mountpoint)
    t.ok(Number(stats.source.corruptChunks) >= 1, 'the damaged block failed its check (read ahead again, it fails again)')
    t.equal(stats.protocol.failedOpens, 1)
  })
})
