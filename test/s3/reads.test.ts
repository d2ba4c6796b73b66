// ObjectStore reads against real S3 servers (moto and Ceph RGW): ranges, whole
// objects, heads, the split of a large range into parallel parts filling
// one buffer, reads into a caller's buffer, If-Match, and the counters.
import { startFaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, seededBytes, storeFailure, testStore } from '../helpers/s3-server'

forEachS3Server(async (t, server) => {
  let buckets = 0
  /** A bucket of its own for each test, so counts and listings do not mix. */
  async function freshBucket (): Promise<string> {
    const name = `reads-${++buckets}`
    await createBucket(server, name)
    return name
  }

  t.test('a small range is one GET and gives exactly the bytes at that offset', async t => {
    const store = testStore(t, server, await freshBucket())
    const bytes = seededBytes(1, 10_000)
    await store.put('a/object.bin', bytes)
    const range = await store.getRange('a/object.bin', 1234, 567)
    t.same(range, bytes.subarray(1234, 1234 + 567))
    t.equal(store.stats().getRequests, 1)
  })

  t.test('a range larger than partSize is ranged GETs of partSize, all in flight at once, filling one buffer byte-exact', async t => {
    const bucket = await freshBucket()
    const proxy = await startFaultProxy(t, server.endpoint)
    const store = testStore(t, { ...server, endpoint: proxy.endpoint }, bucket, { partSize: 100_000 })
    const bytes = seededBytes(2, 650_000)
    await store.put('big.bin', bytes)
    proxy.inject('hold', { times: 6, match: request => request.kind === 'get' })
    const reading = store.getRange('big.bin', 20_000, 550_000)
    await new Promise(resolve => setImmediate(resolve))
    t.equal(store.stats().inFlight, 6, 'six parts of 100000 bytes (the last 50000) are in flight before any answers')
    while (proxy.held() < 6) await new Promise(resolve => setTimeout(resolve, 10))
    proxy.release()
    const range = await reading
    t.equal(range.length, 550_000)
    t.ok(range.equals(bytes.subarray(20_000, 570_000)), 'byte-exact')
    t.equal(store.stats().getRequests, 6)
    t.equal(store.stats().bytesRead, 550_000)
  })

  t.test('a read into a buffer fills that buffer from its start and returns a view of it, not a copy', async t => {
    const store = testStore(t, server, await freshBucket(), { partSize: 4096 })
    const bytes = seededBytes(3, 20_000)
    await store.put('into.bin', bytes)
    for (const length of [1000, 10_000]) { // one GET, and three parts
      const into = Buffer.alloc(length + 10, 0xee)
      const range = await store.getRange('into.bin', 5, length, { into })
      t.equal(range.buffer, into.buffer, `${length} bytes: the same memory`)
      t.equal(range.byteOffset, into.byteOffset)
      t.equal(range.length, length)
      t.ok(into.subarray(0, length).equals(bytes.subarray(5, 5 + length)), `${length} bytes: byte-exact in the caller's buffer`)
      t.same(into.subarray(length), Buffer.alloc(10, 0xee), 'nothing written past the range')
    }
  })

  t.test('a whole object is read byte-exact, split like a range when its length is known', async t => {
    const store = testStore(t, server, await freshBucket(), { partSize: 50_000 })
    const bytes = seededBytes(4, 120_001)
    await store.put('whole.bin', bytes)
    t.ok((await store.getObject('whole.bin')).equals(bytes), 'unknown length: one GET')
    t.equal(store.stats().getRequests, 1)
    t.ok((await store.getObject('whole.bin', { expectedLength: bytes.length })).equals(bytes), 'known length: three ranged GETs')
    t.equal(store.stats().getRequests, 4)
    t.equal((await storeFailure(store.getObject('empty', { expectedLength: 0 }))).kind, 'not-found')
    await store.put('empty', Buffer.alloc(0))
    t.equal((await store.getObject('empty', { expectedLength: 0 })).length, 0, 'an empty object')
  })

  t.test('a whole object of another length than expected is a changed error, not its bytes', async t => {
    const store = testStore(t, server, await freshBucket(), { partSize: 50_000 })
    await store.put('sized.bin', seededBytes(5, 1000))
    for (const expectedLength of [999, 1001, 80_000]) {
      const err = await storeFailure(store.getObject('sized.bin', { expectedLength }))
      t.equal(err.kind, 'changed', `expected ${expectedLength}: changed`)
      t.match(err.message, /s3:\/\/reads-\d+\/sized\.bin changed/)
    }
    t.equal(store.stats().retries, 0, 'a length the answer announces is not retried')
  })

  t.test('a range past the end of the object is a changed error', async t => {
    const store = testStore(t, server, await freshBucket())
    await store.put('short.bin', seededBytes(6, 1000))
    const overlapping = await storeFailure(store.getRange('short.bin', 900, 200))
    t.equal(overlapping.kind, 'changed')
    t.match(overlapping.message, /bytes 900-1099 were asked, it has 1000 bytes/)
    t.equal((await storeFailure(store.getRange('short.bin', 2000, 10))).kind, 'changed', '416 InvalidRange')
  })

  t.test('If-Match with the ETag of an object since overwritten is a changed error, with or without parts', async t => {
    const store = testStore(t, server, await freshBucket(), { partSize: 4000 })
    const first = await store.put('versioned.bin', seededBytes(7, 10_000))
    t.ok((await store.getRange('versioned.bin', 0, 100, { ifMatch: first.etag })).equals(seededBytes(7, 100)), 'the ETag still matches')
    await store.put('versioned.bin', seededBytes(8, 10_000))
    for (const length of [100, 10_000]) {
      const err = await storeFailure(store.getRange('versioned.bin', 0, length, { ifMatch: first.etag }))
      t.equal(err.kind, 'changed', `${length} bytes: changed`)
      t.match(err.message, /412 PreconditionFailed/)
    }
    t.equal((await storeFailure(store.getObject('versioned.bin', { ifMatch: first.etag }))).kind, 'changed', 'a whole object too')
    t.equal(store.stats().retries, 0)
  })

  t.test('head gives size and ETag, and undefined for a missing key', async t => {
    const store = testStore(t, server, await freshBucket())
    const written = await store.put('dir/headed.bin', seededBytes(9, 4321))
    const head = await store.head('dir/headed.bin')
    t.equal(head?.size, 4321)
    t.equal(head?.etag, written.etag)
    t.ok(head?.lastModified instanceof Date)
    t.equal(await store.head('dir/missing.bin'), undefined)
    t.equal(store.stats().failures, 0, 'a missing key is an answer, not a failure')
  })

  t.test('a missing key is a not-found error naming its URL', async t => {
    const bucket = await freshBucket()
    const store = testStore(t, server, bucket)
    const err = await storeFailure(store.getRange('nothing/here.bin', 0, 10))
    t.equal(err.kind, 'not-found')
    t.equal(err.message, `s3://${bucket}/nothing/here.bin does not exist`)
  })

  t.test('stats count each kind of request, the bytes, and the failures', async t => {
    const bucket = await freshBucket()
    const store = testStore(t, server, bucket, { partSize: 1000 })
    await store.put('s/one.bin', seededBytes(10, 2500))
    await store.put('s/two.bin', seededBytes(11, 300))
    await store.getRange('s/one.bin', 0, 2500) // three parts
    await store.getObject('s/two.bin')
    await store.head('s/one.bin')
    await store.head('s/none.bin') // the bucket was seen: no HeadBucket
    await store.list('s/')
    await storeFailure(store.getRange('s/none.bin', 0, 1))
    await store.delete('s/two.bin')
    t.same(store.stats(), {
      getRequests: 5,
      listRequests: 1,
      headRequests: 2,
      putRequests: 2,
      deleteRequests: 1,
      bytesRead: 2800,
      bytesWritten: 2800,
      retries: 0,
      failures: 1,
      inFlight: 0
    })
  })

  t.test('a HEAD miss before the bucket was seen asks HeadBucket once (a HEAD 404 cannot tell a missing bucket)', async t => {
    const store = testStore(t, server, await freshBucket())
    t.equal(await store.head('a'), undefined)
    t.equal(store.stats().headRequests, 2, 'HeadObject and HeadBucket')
    t.equal(await store.head('b'), undefined)
    t.equal(store.stats().headRequests, 3, 'the bucket is known now')
  })
})
