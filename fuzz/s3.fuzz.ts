// Fuzzes what comes from an S3 endpoint, as redirfs's own code meets it: a
// fake endpoint (plain HTTP, path style) answers the real store
// (src/s3/store.ts: its listings read by listing-xml.ts, the rest by the
// AWS SDK) from a bucket drawn per case, and lies. Listings: keys with odd
// names ('..', '.', empty parts, line breaks and control characters, very
// long, marker-like, a file and a directory of one name), keys outside the
// prefix asked for, pages that repeat, come unsorted, end without a token
// or loop on one, many pages; sizes that are not the object's (negative,
// huge, not numbers), ETags of every form, dates that are not dates.
// Bodies: short, long, without a length, of another range, of another
// version, errors with or without a body. The property: the scan
// (src/s3/object-dataset.ts scanBucket) gives a tree the mount can serve
// (every file a listed key of the prefix, of its listed size; the native
// server takes it), or refuses in one line; every read through the mount's
// sources delivers exactly the object's bytes or nothing (EIO), never
// throws another error, never hangs.
import pino from 'pino'
import t from 'tap'
import { SampleBuffers } from '../src/chunks/sample-buffers'
import { EntryKind } from '../src/chunks/tree'
import { loadNativeServer } from '../src/fs/native-mount'
import type { FileId } from '../src/redirect/layout'
import { ObjectFileReader, ObjectSource, scanBucket } from '../src/s3/object-dataset'
import { ObjectStore } from '../src/s3/store'
import { FAKE_BUCKET, startFakeS3, type FakeBucket, type FakeObject } from '../test/helpers/fake-s3'
import { AWKWARD_STRINGS, type Draw } from './draw'
import { expectOneLine, fuzz } from './run'

let fake: Awaited<ReturnType<typeof startFakeS3>>
t.before(async () => { fake = await startFakeS3(t) })

// ---------------------------------------------------------------- a bucket drawn

const CLASSES = ['cat', 'dog', 'ant bee', 'é']

/** A key below the prefix: mostly class/file.jpg, sometimes the odd names S3 allows. */
function relativeKey (draw: Draw): string {
  const label = draw.pick(CLASSES)
  const file = `${draw.text(draw.int(1, 6), 'name').replace(/\//g, '_')}.${draw.pick(['jpg', 'png', 'JPEG', 'txt', 'jpg'])}`
  switch (draw.below(14)) {
    case 0: return draw.pick([`${label}/../${file}`, `${label}/./${file}`, `${label}//${file}`, `/${label}/${file}`, `${label}/`, `${label}/sub/`, '..', '.', file])
    case 1: return `${label}/${draw.pick(AWKWARD_STRINGS)}.jpg`
    case 2: return `${label}/${draw.text(draw.int(1, 8), 'any')}.jpg`
    case 3: return `${label}/${'x'.repeat(draw.pick([200, 1000]))}.jpg`
    case 4: return draw.pick([label, `${label}/a.jpg/b.jpg`, `${label}/a.jpg`])
    case 5: return `${label}/sub/deeper/${file}`
    default: return `${label}/${file}`
  }
}

function drawBucket (draw: Draw): FakeBucket {
  const prefix = draw.pick(['data/', 'data/', '', 'a b/', 'deep/er/', 'data/'])
  const count = draw.chance(0.03) ? draw.int(1000, 2000) : draw.int(0, 30)
  const objects: FakeObject[] = []
  for (let i = 0; i < count; i++) {
    // Keys are UTF-8 on the wire: a lone surrogate drawn becomes U+FFFD, as it would reach any endpoint.
    const key = Buffer.from(draw.chance(0.03) ? draw.pick(['other/cat/x.jpg', 'dat/cat/y.jpg', 'data', 'data/']) : prefix + (count > 100 ? `c${i % 7}/f${i}.jpg` : relativeKey(draw))).toString()
    const body = count > 100 ? Buffer.from(key) : draw.bytes(draw.chance(0.1) ? 0 : draw.int(1, 3000))
    const etag = `"${draw.u32().toString(16)}"`
    const o: FakeObject = { key, body, etag, listedSize: String(body.length), listedEtag: etag, listedDate: '2025-06-01T12:00:00.000Z' }
    if (draw.chance(0.1)) o.listedSize = draw.pick(['-1', '0', String(body.length + 1), '9007199254740993', '1e3', 'abc', '', '18446744073709551616', '  5', String(2 ** 40)])
    if (draw.chance(0.1)) o.listedEtag = draw.pick([undefined, '', 'unquoted', 'W/"weak"', '"a"b"', '"' + 'e'.repeat(300) + '"', '"\n"'])
    if (draw.chance(0.05)) o.listedDate = draw.pick([undefined, 'yesterday', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59.999Z', '2025-13-45T99:99:99Z', '1970-01-01T00:00:00Z'])
    if (draw.chance(0.15)) o.fault = draw.pick(['short', 'long', 'no-length', 'other-range', 'new-version', 'error', 'error', 'stall'] as const)
    if (o.fault === 'stall' && !draw.chance(0.2)) o.fault = 'short' // a stall costs the idle timeout: rarely
    if (o.fault === 'error') o.status = draw.pick([500, 503, 403, 404, 400])
    objects.push(o)
  }
  if (objects.length > 0 && draw.chance(0.1)) objects.push({ ...objects[0], body: draw.bytes(10) }) // one key twice
  objects.sort((a, b) => Buffer.compare(Buffer.from(a.key), Buffer.from(b.key)))
  const listing = draw.chance(0.15) ? draw.pick(['no-token', 'same-token', 'unsorted', 'repeated', 'stray-prefix', 'bad-xml', 'error', 'bad-encoding'] as const) : undefined
  // Pages of one key make a request per key: for small buckets only.
  const pageSize = count > 100 ? draw.pick([1000, 250]) : draw.pick([1000, 1000, 7, 1, 250])
  return { prefix, objects, pageSize, listing, encodes: draw.chance(0.8) }
}

// ---------------------------------------------------------------- the property

const silent = pino({ level: 'silent' })

t.test('any listing and any body is a tree the mount can serve and exact bytes, or refused in one line', async t => {
  await fuzz(t, 's3', { runs: 150, seconds: 60 }, async draw => {
    const bucket = drawBucket(draw)
    fake.serve(bucket)
    const store = new ObjectStore({ bucket: FAKE_BUCKET, endpoint: fake.endpoint, pathStyle: true, region: 'us-east-1', credentials: { accessKeyId: 'fuzz', secretAccessKey: 'fuzz' }, retries: 1, retryDelayMs: 0, timeoutMs: 1000, listPageSize: 1000 })
    try {
      const location = { bucket: FAKE_BUCKET, prefix: bucket.prefix }
      let dataset
      try {
        dataset = await scanBucket(store, location, { skipUnservable: draw.chance(0.7) })
      } catch (err) {
        expectOneLine(err, 'the scan refused it')
        return
      }
      const { tree } = dataset
      // Every file is an object of the prefix, of the size its listing gave (of a key listed twice, one of them). Keys sent as XML
      // text (by an endpoint that does not encode them) are read as they came (listing-xml.ts: no line-end normalization), so
      // every key is its object's own.
      for (let entry = 0; entry < tree.count; entry++) {
        const kind = tree.kindOf(entry)
        if (kind === EntryKind.Directory) continue
        const key = bucket.prefix + tree.pathOf(entry)
        const candidates = bucket.objects.filter(o => o.key === key)
        if (candidates.length === 0) throw new Error(`the tree has ${JSON.stringify(tree.pathOf(entry))}, and the prefix ${JSON.stringify(bucket.prefix)} no object ${JSON.stringify(key)}`)
        if (!candidates.some(o => tree.columns.size[entry] === Number(o.listedSize))) throw new Error(`${JSON.stringify(key)} has size ${tree.columns.size[entry]} in the tree, its listing said ${candidates.map(o => o.listedSize).join(' and ')}`)
      }
      /** What the endpoint serves for a key: the bytes of its first object of that key. */
      const served = (key: string): FakeObject => bucket.objects.find(o => o.key === key)!
      // The native server takes the tree's columns as the mount gives them.
      try {
        const { FuseServer } = loadNativeServer()
        new FuseServer({ ...tree.columns, controlName: 'x' }, () => {}, { reopenWindowMs: 0, fuseThreads: 1, ownerUid: 0, ownerGid: 0 }).close()
      } catch (err) {
        throw new Error(`a tree the scan gave is one the native server refuses: ${(err as Error).message}`)
      }
      // Reads: samples through the chunk source, other files through the file reader: the object's bytes, or nothing.
      const buffers = new SampleBuffers(16 * 2 ** 20)
      const source = new ObjectSource(store, dataset, buffers, silent)
      const ids = tree.samples.map((_, id) => id as FileId)
      for (let i = 0; i < ids.length && i < 16; i += 8) {
        const request = ids.slice(i, i + 8)
        const delivered = await source.fetch({ pc: 0, files: request })
        for (const [id, bytes] of delivered) {
          const object = served(bucket.prefix + tree.samples[id].path)
          if (!bytes.equals(object.body)) throw new Error(`${JSON.stringify(object.key)} was served ${bytes.length} bytes that are not its ${object.body.length}`)
          buffers.give(bytes)
        }
      }
      const files = new ObjectFileReader(store, dataset)
      for (let entry = 0, opened = 0; entry < tree.count && opened < 3; entry++) {
        if (tree.kindOf(entry) !== EntryKind.Other) continue
        opened++
        const path = tree.pathOf(entry)
        await files.open(path).then(async file => {
          const bytes = (file.native as { bytes: Buffer }).bytes
          const object = served(bucket.prefix + path)
          if (!bytes.equals(object.body)) throw new Error(`${JSON.stringify(path)} was opened with ${bytes.length} bytes that are not its object's ${object.body.length} (fault: ${object.fault ?? 'none'})`)
          await file.close()
        }, (err: unknown) => {
          if ((err as { errno?: string }).errno !== 'EIO') throw new Error(`opening ${JSON.stringify(path)} failed with ${(err as Error).stack}`)
        })
      }
    } finally {
      await store.close()
    }
  })
})
