// Each way a request can fail on its way, injected by the fault proxy in
// front of real S3 servers (moto and Ceph RGW): survived when it passes (the bytes exact, the
// retry counted), and the right error once it outlasts the retries.
import type { Test } from 'tap'
import type { RetryInfo } from '../../src/s3/store'
import { startFaultProxy, type Fault, type FaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, seededBytes, storeFailure, testStore, type S3Server } from '../helpers/s3-server'

let buckets = 0

/**
 * How long a stalled request waits before it is given up: short, so that
 * stalls are quick to test, and long enough that a loaded machine's slow
 * answer is not taken for a stall (which would add a retry to the counts).
 */
const STALL_MS = 3000

/** A bucket of its own and a proxy in front of the server, with quick retries. */
async function setUp (t: Test, server: S3Server, options: { retries?: number, partSize?: number, timeoutMs?: number, concurrency?: number } = {}): Promise<{ proxy: FaultProxy, store: ReturnType<typeof testStore>, bucket: string, retries: RetryInfo[] }> {
  const bucket = `faults-${++buckets}`
  await createBucket(server, bucket)
  const proxy = await startFaultProxy(t, server.endpoint)
  const retries: RetryInfo[] = []
  const store = testStore(t, { ...server, endpoint: proxy.endpoint }, bucket, { retryDelayMs: 5, onRetry: info => retries.push(info), ...options })
  return { proxy, store, bucket, retries }
}

const GET_FAULTS: Fault[] = ['slow-down', 'internal-error', 'reset', 'stall', 'short-body', 'stall-body']

const PERSISTENT: Array<[Fault, string, RegExp]> = [
  ['internal-error', 'failed', /^GetObject s3:\/\/faults-\d+\/p\.bin failed \(500 InternalError, 3 attempts\)$/],
  ['slow-down', 'failed', /^GetObject s3:\/\/faults-\d+\/p\.bin failed \(503 SlowDown, 3 attempts\)$/],
  ['reset', 'unreachable', /^cannot reach the S3 endpoint http:\/\/127\.0\.0\.1:\d+ \(connection reset, 3 attempts\); check --s3-endpoint$/],
  ['stall', 'unreachable', /^cannot reach the S3 endpoint http:\/\/127\.0\.0\.1:\d+ \(no answer for 3 s, 3 attempts\); check --s3-endpoint$/],
  ['short-body', 'failed', /^GetObject s3:\/\/faults-\d+\/p\.bin failed \(body cut short: 1500 of 3000 bytes \(ECONNRESET\), 3 attempts\)$/]
]

forEachS3Server(async (t, server) => {
  for (const fault of GET_FAULTS) {
    t.test(`a GET that meets ${fault} once is retried and gives the exact bytes`, async t => {
      const { proxy, store, bucket, retries } = await setUp(t, server, { timeoutMs: STALL_MS })
      const bytes = seededBytes(20, 50_000)
      await store.put('data/object.bin', bytes)
      proxy.inject(fault, { match: request => request.kind === 'get' })
      const range = await store.getRange('data/object.bin', 1000, 40_000)
      t.ok(range.equals(bytes.subarray(1000, 41_000)), 'byte-exact')
      t.equal(proxy.injected[fault], 1)
      t.equal(proxy.requests.get, 2, 'the faulted GET and its retry')
      t.equal(store.stats().retries, 1)
      t.equal(store.stats().getRequests, 2)
      t.equal(store.stats().failures, 0)
      t.equal(store.stats().bytesRead, 40_000, 'bytes of a failed attempt are not counted as read')
      t.equal(retries.length, 1)
      t.match(retries[0], { operation: 'GetObject', url: `s3://${bucket}/data/object.bin`, attempt: 1 })
    })
  }

  t.test('the reasons given to onRetry name the fault', async t => {
    const { proxy, store, retries } = await setUp(t, server, { timeoutMs: STALL_MS })
    await store.put('r.bin', seededBytes(21, 5000))
    for (const fault of ['slow-down', 'internal-error', 'reset', 'stall', 'short-body'] as const) proxy.inject(fault, { match: request => request.kind === 'get' })
    t.ok((await store.getObject('r.bin')).equals(seededBytes(21, 5000)))
    t.same(retries.map(retry => retry.reason), ['503 SlowDown', '500 InternalError', 'connection reset', 'no answer for 3 s', 'body cut short: 2500 of 5000 bytes (ECONNRESET)'])
    t.same(retries.map(retry => retry.attempt), [1, 2, 3, 4, 5])
  })

  t.test('a fault in one part of a split range is retried for that part alone', async t => {
    const { proxy, store } = await setUp(t, server, { partSize: 10_000 })
    const bytes = seededBytes(22, 45_000)
    await store.put('split.bin', bytes)
    proxy.inject('short-body', { match: request => request.range === 'bytes=20000-29999' })
    proxy.inject('reset', { match: request => request.range === 'bytes=40000-44999' })
    const range = await store.getRange('split.bin', 0, 45_000)
    t.ok(range.equals(bytes), 'byte-exact')
    t.equal(store.stats().getRequests, 7, 'five parts and two retries')
    t.equal(store.stats().retries, 2)
  })

  t.test('a read to a sink gets each byte of the range at its offset, over split parts and a part cut short and read again', async t => {
    const { proxy, store } = await setUp(t, server, { partSize: 10_000 })
    const bytes = seededBytes(23, 45_000)
    await store.put('sink.bin', bytes)
    proxy.inject('short-body', { match: request => request.range === 'bytes=11000-20999' })
    const got = Buffer.alloc(40_000, 0xee)
    const writes: Array<[number, number]> = []
    await store.readRangeTo('sink.bin', 1000, { length: 40_000, write: (at, piece) => { writes.push([at, piece.length]); piece.copy(got, at) } })
    t.ok(got.equals(bytes.subarray(1000, 41_000)), 'byte-exact')
    t.ok(writes.every(([at, length]) => at >= 0 && at + length <= 40_000), 'every write inside the range')
    t.equal(store.stats().getRequests, 5, 'four parts and one retry')
    // The retried part is written again from its start: each of its bytes twice at most, never outside it.
    const times = new Uint8Array(40_000)
    for (const [at, length] of writes) for (let i = at; i < at + length; i++) times[i]++
    t.ok(times.subarray(10_000, 20_000).every(n => n >= 1 && n <= 2) && [...times.subarray(0, 10_000), ...times.subarray(20_000)].every(n => n === 1), 'the other parts once each')
  })

  t.test('listings survive 503, a body cut short and a body that stalls, and list every key', async t => {
    const { proxy, store } = await setUp(t, server, { timeoutMs: STALL_MS })
    const keys = Array.from({ length: 30 }, (_, i) => `list/${String(i).padStart(2, '0')}.bin`)
    await Promise.all(keys.map(async key => await store.put(key, Buffer.from(key))))
    for (const fault of ['slow-down', 'short-body', 'stall-body'] as const) proxy.inject(fault, { match: request => request.kind === 'list' })
    t.same((await store.list('list/')).map(object => object.key), keys)
    t.equal(store.stats().listRequests, 4)
    t.equal(store.stats().retries, 3)
  })

  t.test('a PUT survives a reset, a 500 and no answer, and the object is exact', async t => {
    const { proxy, store } = await setUp(t, server, { timeoutMs: STALL_MS })
    const bytes = seededBytes(23, 70_000)
    for (const fault of ['reset', 'internal-error', 'stall'] as const) proxy.inject(fault, { match: request => request.kind === 'put' })
    await store.put('put.bin', bytes)
    t.equal(store.stats().putRequests, 4)
    t.equal(store.stats().retries, 3)
    t.equal(store.stats().bytesWritten, 70_000, 'bytes of failed attempts are not counted as written')
    t.ok((await store.getObject('put.bin')).equals(bytes))
  })

  t.test('a HEAD survives a 503 (its answer has no body to say SlowDown)', async t => {
    const { proxy, store } = await setUp(t, server)
    await store.put('h.bin', seededBytes(24, 100))
    proxy.inject('slow-down', { match: request => request.kind === 'head' })
    t.equal((await store.head('h.bin'))?.size, 100)
    t.equal(store.stats().retries, 1)
  })

  for (const [fault, kind, message] of PERSISTENT) {
    t.test(`${fault} on every attempt fails as '${kind}' after the retries, counted as one failure`, async t => {
      const { proxy, store } = await setUp(t, server, { retries: 2, timeoutMs: STALL_MS })
      await store.put('p.bin', seededBytes(25, 3000))
      proxy.inject(fault, { times: 3, match: request => request.kind === 'get' })
      const err = await storeFailure(store.getRange('p.bin', 0, 3000))
      t.equal(err.kind, kind)
      t.match(err.message, message)
      t.equal(proxy.pending(), 0, 'every attempt met the fault')
      t.equal(store.stats().getRequests, 3)
      t.equal(store.stats().retries, 2)
      t.equal(store.stats().failures, 1)
      t.equal(store.stats().inFlight, 0)
    })
  }

  t.test('a part that fails for good fails the whole split read, after every other part has stopped', async t => {
    const { proxy, store } = await setUp(t, server, { retries: 1, partSize: 1000 })
    await store.put('parts.bin', seededBytes(26, 8000))
    proxy.inject('internal-error', { times: 2, match: request => request.range === 'bytes=3000-3999' })
    const into = Buffer.alloc(8000)
    const err = await storeFailure(store.getRange('parts.bin', 0, 8000, { into }))
    t.equal(err.kind, 'failed')
    t.equal(store.stats().inFlight, 0, 'nothing is still reading into the buffer')
    t.equal(store.stats().failures, 1, 'one failure: the part that failed, not the parts it stopped')
  })

  t.test('a refused connection is retried to an endpoint that answered before, and fails at once to one that never did', async t => {
    const { proxy, store } = await setUp(t, server, { retries: 2 })
    await store.put('gone.bin', Buffer.from('x'))
    await proxy.stop() // the endpoint goes away: as a server restarting looks
    const err = await storeFailure(store.getRange('gone.bin', 0, 1))
    t.equal(err.kind, 'unreachable')
    t.match(err.message, /\(connection refused, 3 attempts\)/)
    t.equal(store.stats().retries, 2)
    const fresh = testStore(t, { ...server, endpoint: proxy.endpoint }, store.bucket, { retries: 2 })
    const first = await storeFailure(fresh.getRange('gone.bin', 0, 1))
    t.equal(first.message, `cannot reach the S3 endpoint ${proxy.endpoint} (connection refused); check --s3-endpoint`)
    t.equal(fresh.stats().retries, 0)
  })

  t.test('an object replaced between a failed attempt and its retry is a changed error, never the new bytes', async t => {
    const { proxy, store, bucket } = await setUp(t, server)
    const first = await store.put('replaced.bin', seededBytes(27, 4000))
    proxy.inject('short-body', { match: request => request.kind === 'get' })
    proxy.inject('hold', { match: request => request.kind === 'get' })
    const reading = storeFailure(store.getRange('replaced.bin', 0, 4000))
    while (proxy.held() < 1) await new Promise(resolve => setTimeout(resolve, 10))
    await testStore(t, server, bucket).put('replaced.bin', seededBytes(28, 4000)) // behind the proxy's back
    proxy.release()
    const err = await reading
    t.equal(err.kind, 'changed')
    t.equal(proxy.log.filter(request => request.kind === 'get').at(-1)?.headers['if-match'], first.etag, 'the retry asked for the version the first answer had')
    t.equal(store.stats().retries, 1)
  })

  t.test('an object replaced between the parts of a split read is a changed error, never a mix of versions', async t => {
    const { proxy, store, bucket } = await setUp(t, server, { partSize: 1000 })
    const first = await store.put('mixed.bin', seededBytes(29, 2000))
    proxy.inject('hold', { match: request => request.range === 'bytes=1000-1999' })
    const reading = storeFailure(store.getRange('mixed.bin', 0, 2000))
    while (proxy.held() < 1 || store.stats().bytesRead < 1000) await new Promise(resolve => setTimeout(resolve, 10))
    await testStore(t, server, bucket).put('mixed.bin', seededBytes(30, 2000))
    proxy.release()
    const err = await reading
    t.equal(err.kind, 'changed')
    t.match(err.message, /^s3:\/\/faults-\d+\/mixed\.bin changed while redirfs read it \(its ETag is now "[0-9a-f]+", not "[0-9a-f]+"\): it was replaced or rewritten since it was listed$/)
    t.equal(proxy.log.find(request => request.range === 'bytes=1000-1999')?.headers['if-match'], undefined, 'both parts went out before either answer: nothing to pin yet')
    t.not(first.etag, (await store.head('mixed.bin'))?.etag)
  })

  t.test('concurrency bounds the requests in flight across all callers', async t => {
    const { proxy, store } = await setUp(t, server, { concurrency: 3 })
    const bytes = seededBytes(31, 10_000)
    await store.put('bounded.bin', bytes)
    proxy.inject('hold', { times: 3, match: request => request.kind === 'get' })
    const reads = Array.from({ length: 10 }, async (_, i) => await store.getRange('bounded.bin', i * 1000, 1000))
    await new Promise(resolve => setImmediate(resolve))
    t.equal(store.stats().inFlight, 3, 'ten reads, three requests in flight')
    while (proxy.held() < 3) await new Promise(resolve => setTimeout(resolve, 10))
    t.equal(store.stats().inFlight, 3, 'the held three keep the others waiting')
    proxy.release()
    t.ok(Buffer.concat(await Promise.all(reads)).equals(bytes))
    t.equal(proxy.requests.get, 10)
  })
})
