// The object writer against real S3 servers (moto and Ceph RGW): one PutObject for an object
// within one part, multipart beyond (parts of S3's smallest size, 5 MiB,
// which moto enforces at CompleteMultipartUpload as S3 does), writes that
// wait for room, and no multipart upload left behind by an abort or a
// failure.
import type { Test } from 'tap'
import { UsageError } from '../../src/errors'
import { MIN_PART_SIZE } from '../../src/s3/object-writer'
import type { ObjectStore } from '../../src/s3/store'
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, seededBytes, storeFailure, testStore, type S3Server } from '../helpers/s3-server'

const PART = MIN_PART_SIZE
let buckets = 0

async function setUp (t: Test, server: S3Server, options: Parameters<typeof testStore>[3] = {}): Promise<{ store: ObjectStore, proxy: FaultProxy }> {
  const bucket = `writer-${++buckets}`
  await createBucket(server, bucket)
  const proxy = await startFaultProxy(t, server.endpoint)
  return { store: testStore(t, { ...server, endpoint: proxy.endpoint }, bucket, { retryDelayMs: 5, ...options }), proxy }
}

/** Writes `bytes` in pieces of `piece` bytes, as a producer would. */
async function writeInPieces (write: (bytes: Buffer) => Promise<void>, bytes: Buffer, piece: number): Promise<void> {
  for (let offset = 0; offset < bytes.length; offset += piece) await write(bytes.subarray(offset, offset + piece))
}

const isPart = (request: { kind: string, query: URLSearchParams }): boolean => request.kind === 'put' && request.query.has('partNumber')
const later = async (): Promise<void> => { for (let i = 0; i < 5; i++) await new Promise(resolve => setImmediate(resolve)) }

forEachS3Server(async (t, server) => {
  t.test('an object no larger than one part is one PutObject, byte-exact', async t => {
    const { store, proxy } = await setUp(t, server)
    for (const [key, size] of [['small.bin', 3000], ['one-part.bin', PART], ['empty.bin', 0]] as const) {
      const bytes = seededBytes(40, size)
      const writer = store.createObjectWriter(key, { partSize: PART })
      await writeInPieces(async piece => await writer.write(piece), bytes, 1000_003)
      const written = await writer.close()
      t.equal(written.size, size)
      t.equal(written.etag, (await store.head(key))?.etag, `${key}: the ETag of the object`)
      t.ok((await store.getObject(key)).equals(bytes), `${key}: byte-exact`)
    }
    t.equal(proxy.requests.put, 3, 'three PutObjects')
    t.equal(proxy.requests.post, 0, 'no multipart upload was begun')
  })

  t.test('an object of two parts and a bit is a multipart upload of three parts, byte-exact', async t => {
    const { store, proxy } = await setUp(t, server)
    const bytes = seededBytes(41, 2 * PART + 12_345)
    const writer = store.createObjectWriter('multi.bin', { partSize: PART })
    await writeInPieces(async piece => await writer.write(piece), bytes, 700_001)
    const written = await writer.close()
    t.equal(written.size, bytes.length)
    t.match(written.etag, /^"[0-9a-f]{32}-3"$/, 'a multipart ETag: three parts')
    t.equal(written.etag, (await store.head('multi.bin'))?.etag, 'the object\'s, even from a server whose answer to CompleteMultipartUpload has none (Ceph RGW 16.2)')
    t.ok((await store.getObject('multi.bin', { expectedLength: bytes.length })).equals(bytes), 'byte-exact')
    t.equal(proxy.requests.put, 3, 'three UploadParts')
    t.equal(proxy.requests.post, 2, 'CreateMultipartUpload and CompleteMultipartUpload')
    t.equal(store.stats().bytesWritten, bytes.length)
    t.same(await store.listUploads(''), [], 'no upload left pending')
    await writer.abort()
    t.equal((await store.head('multi.bin'))?.size, bytes.length, 'an abort after close leaves the object alone')
  })

  t.test('write waits while the parts in flight are at the bound, and goes on when one finishes', async t => {
    const { store, proxy } = await setUp(t, server)
    const bytes = seededBytes(42, 2 * PART + 1)
    const writer = store.createObjectWriter('bounded.bin', { partSize: PART, partsInFlight: 1 })
    proxy.inject('hold', { match: isPart })
    await writer.write(bytes.subarray(0, PART + 1)) // part 1 goes out: room was there
    while (proxy.held() < 1) await new Promise(resolve => setTimeout(resolve, 10))
    let wrote = false
    const second = writer.write(bytes.subarray(PART + 1)).then(() => { wrote = true })
    await later()
    t.notOk(wrote, 'the write that fills part 2 and starts part 3 waits for part 1')
    t.equal(proxy.requests.put, 1, 'part 2 has not gone out')
    proxy.release()
    await second
    await writer.close()
    t.ok((await store.getObject('bounded.bin')).equals(bytes), 'byte-exact')
    t.equal(proxy.requests.put, 3)
  })

  t.test('abort removes the multipart upload: nothing is listed as pending and no object appears', async t => {
    const { store } = await setUp(t, server)
    const writer = store.createObjectWriter('aborted/x.bin', { partSize: PART, partsInFlight: 1 })
    await writer.write(seededBytes(43, 2 * PART + 1)) // waits for part 1, so the upload exists
    t.equal((await store.listUploads('aborted/')).length, 1, 'one upload pending before the abort')
    await writer.abort()
    t.same(await store.listUploads('aborted/'), [], 'ListMultipartUploads is empty')
    t.equal(await store.head('aborted/x.bin'), undefined)
    await t.rejects(writer.write(Buffer.from('x')), /called after abort/)
  })

  t.test('a part that fails past its retries fails the writer, which aborts the upload itself', async t => {
    const { store, proxy } = await setUp(t, server, { retries: 1 })
    const writer = store.createObjectWriter('failing.bin', { partSize: PART })
    proxy.inject('internal-error', { times: 2, match: request => isPart(request) && request.query.get('partNumber') === '2' })
    const bytes = seededBytes(44, 3 * PART)
    const failure = await storeFailure((async () => {
      await writeInPieces(async piece => await writer.write(piece), bytes, PART / 2)
      return await writer.close()
    })())
    t.equal(failure.kind, 'failed')
    t.match(failure.message, /^UploadPart s3:\/\/writer-\d+\/failing\.bin failed \(500 InternalError, 2 attempts\)$/)
    t.same(await store.listUploads(''), [], 'no upload left pending')
    t.equal(await store.head('failing.bin'), undefined)
    t.equal((await storeFailure(writer.close())).message, failure.message, 'a later call reports the same failure')
  })

  t.test('a part size below 5 MiB is refused: S3 would refuse the upload at its end', async t => {
    const { store } = await setUp(t, server)
    t.throws(() => store.createObjectWriter('x', { partSize: PART - 1 }), new UsageError(`the part size of an upload must be at least 5 MiB (S3's rule), got ${PART - 1} bytes`))
  })

  t.test('deletePrefix deletes every object under the prefix and the uploads left pending there', async t => {
    const { store } = await setUp(t, server, { listPageSize: 7 })
    const keys = Array.from({ length: 20 }, (_, i) => `gone/${i}.bin`)
    await Promise.all(keys.map(async key => await store.put(key, Buffer.from(key))))
    await store.put('kept/1.bin', Buffer.from('kept'))
    const abandoned = store.createObjectWriter('gone/abandoned.bin', { partSize: PART, partsInFlight: 1 })
    await abandoned.write(seededBytes(45, 2 * PART + 1))
    t.equal(await store.deletePrefix('gone/'), 20)
    t.same(await store.list('gone/'), [])
    t.same(await store.listUploads('gone/'), [])
    t.same((await store.list('')).map(object => object.key), ['kept/1.bin'])
  })
})
