// What a scan of a bucket makes of a listing an endpoint got wrong, and a
// read that cannot be made: found by the S3 fuzzer (fuzz/s3.fuzz.ts), which
// met keys outside the prefix shown under wrong names, a key listed twice
// shown twice, sizes no object has (NaN, negative, past 2^53) in the tree,
// and one sample too large for a buffer failing its whole load.
import pino from 'pino'
import t from 'tap'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import type { FileId } from '../../src/redirect/layout'
import { ObjectSource, scanBucket } from '../../src/s3/object-dataset'
import type { ObjectInfo, ObjectStore } from '../../src/s3/store'

const object = (key: string, size: number): ObjectInfo => ({ key, size, etag: '"e"', lastModified: new Date(1e12) })

/** A store whose listing is `objects` and whose reads give each object `size` bytes of its key's first letter. */
function storeListing (objects: ObjectInfo[]): ObjectStore {
  return {
    listTreePages: async (_prefix: string, onPage: (page: ObjectInfo[]) => void) => { onPage(objects) },
    getObject: async (key: string, options: { into?: Buffer, expectedLength?: number }) => {
      const bytes = options.into?.subarray(0, options.expectedLength) ?? Buffer.alloc(options.expectedLength ?? 0)
      return bytes.fill(key.charCodeAt(key.length - 5))
    },
    stats: () => ({})
  } as unknown as ObjectStore
}

const location = { bucket: 'b', prefix: 'data/' }

t.test('a key outside the prefix, a key listed twice and a size no object has are left out by name, never shown', async t => {
  const listing = [object('data/cat/1.jpg', 10), object('data/cat/1.jpg', 99), object('dat/cat/2.jpg', 10), object('data/cat/3.jpg', Number.NaN), object('data/cat/4.jpg', -1), object('data/cat/5.jpg', 2 ** 53 + 2)]
  await t.rejects(scanBucket(storeListing(listing), location), { name: 'UsageError', message: /^5 entries of the source cannot be served: cat\/1\.jpg \(a key the listing gave twice\), cat\/3\.jpg \(a size of NaN in the listing, which no object has\), cat\/4\.jpg \(a size of -1 in the listing, which no object has\), and 2 more; / })
  const warnings: string[] = []
  const dataset = await scanBucket(storeListing(listing), location, { skipUnservable: true, onWarning: w => warnings.push(w) })
  t.same(dataset.tree.samples.map(s => [s.path, s.size]), [['cat/1.jpg', 10]])
  t.same(warnings.sort(), [
    'left out cat/1.jpg: a key the listing gave twice', 'left out cat/3.jpg: a size of NaN in the listing, which no object has', 'left out cat/4.jpg: a size of -1 in the listing, which no object has',
    'left out cat/5.jpg: a size of 9007199254740994 in the listing, which no object has', 'left out dat/cat/2.jpg: a key outside the prefix data/ that the listing of it gave'
  ])
})

// Found by the S3 fuzzer after the listing came to be read by listing-xml.ts, which reads LastModified as it is given (the SDK
// refused the whole listing): a date that is not one made a NaN time, and a tree the native server refuses.
t.test('an object whose LastModified is not a time is left out by name, never a NaN time in the tree', async t => {
  const listing = [object('data/cat/1.jpg', 10), { ...object('data/cat/2.jpg', 10), lastModified: new Date('2025-13-45T99:99:99Z') }, { ...object('data/dog/', 0), lastModified: new Date('yesterday') }]
  await t.rejects(scanBucket(storeListing(listing), location), { name: 'UsageError', message: /^2 entries of the source cannot be served: cat\/2\.jpg \(a LastModified in the listing that is not a time\), dog\/ \(a LastModified in the listing that is not a time\); / })
  const dataset = await scanBucket(storeListing(listing), location, { skipUnservable: true, onWarning: () => {} })
  t.same(dataset.tree.samples.map(s => s.path), ['cat/1.jpg'])
  t.ok(Array.from(dataset.tree.columns.mtimeSec).every(Number.isFinite))
})

t.test('a sample too large for a buffer fails its own read only, not the others of its load', async t => {
  const dataset = await scanBucket(storeListing([object('data/cat/a.jpg', 10), object('data/cat/b.jpg', 2 ** 40), object('data/cat/c.jpg', 10)]), location)
  const buffers = new SampleBuffers()
  const source = new ObjectSource(storeListing([]), dataset, buffers, pino({ level: 'silent' }))
  const delivered = await source.fetch({ pc: 0, files: [0, 1, 2] as FileId[] })
  t.same([...delivered.keys()].sort(), [0, 2])
  t.equal(source.stats().readErrors, 1)
})
