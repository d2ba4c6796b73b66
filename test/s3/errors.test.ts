// The errors a user meets, each one kind and one line: bad credentials
// (moto with its key checks on, and Ceph RGW, checking signatures and keys
// as S3 does), a missing bucket, an endpoint with nothing listening. And
// signing through a proxy: the proxy must forward the Host header that was
// signed.
import { StoreError, describeStoreError } from '../../src/s3/store-error'
import { startFaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, freePort, seededBytes, startS3Server, storeFailure, testStore } from '../helpers/s3-server'

forEachS3Server(async (t, server) => {
  await createBucket(server, 'secured')
  await createBucket(server, 'present')

  t.test('the right keys are accepted by a server that checks them', async t => {
    const store = testStore(t, server, 'secured')
    await store.put('k.bin', seededBytes(50, 100))
    t.ok((await store.getRange('k.bin', 0, 100)).equals(seededBytes(50, 100)))
  })

  t.test('a wrong secret key is denied: SignatureDoesNotMatch, said in one line that names the fix', async t => {
    const store = testStore(t, { ...server, credentials: { ...server.credentials, secretAccessKey: 'not-the-secret' } }, 'secured')
    const err = await storeFailure(store.getRange('k.bin', 0, 1))
    t.equal(err.kind, 'denied')
    t.equal(err.message, `${server.endpoint} rejected the request signature (SignatureDoesNotMatch): the secret key does not match the key id; check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws)`)
    t.equal(store.stats().retries, 0, 'not retried')
    t.equal(store.stats().failures, 1)
  })

  t.test('an unknown access key id is denied: InvalidAccessKeyId', async t => {
    const store = testStore(t, { ...server, credentials: { accessKeyId: 'AKIAUNKNOWNKEY000000', secretAccessKey: 'x' } }, 'secured')
    const err = await storeFailure(store.list(''))
    t.equal(err.kind, 'denied')
    t.equal(err.message, `${server.endpoint} does not know the access key id in use (InvalidAccessKeyId): check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws)`)
  })

  t.test('a HEAD with bad keys is denied too, though its 403 has no body to say why', async t => {
    const store = testStore(t, { ...server, credentials: { ...server.credentials, secretAccessKey: 'not-the-secret' } }, 'secured')
    const err = await storeFailure(store.head('k.bin'))
    t.equal(err.kind, 'denied')
    t.equal(err.message, 'access denied to s3://secured/k.bin (403 Forbidden): check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws) and the bucket\'s permissions')
  })

  t.test('requests signed for the proxy validate through it when it forwards their Host header unchanged', async t => {
    const proxy = await startFaultProxy(t, server.endpoint)
    const store = testStore(t, { ...server, endpoint: proxy.endpoint }, 'secured')
    t.ok((await store.getRange('k.bin', 10, 20)).equals(seededBytes(50, 100).subarray(10, 30)))
    t.equal(proxy.requests.get, 1)
  })

  t.test('a proxy that rewrites the Host header to the server\'s breaks the signature', async t => {
    const proxy = await startFaultProxy(t, server.endpoint, { rewriteHost: true })
    const store = testStore(t, { ...server, endpoint: proxy.endpoint }, 'secured')
    const err = await storeFailure(store.getRange('k.bin', 0, 1))
    t.equal(err.kind, 'denied')
    t.match(err.message, /\(SignatureDoesNotMatch\)/)
  })

  t.test('a missing bucket is no-bucket, for reads, listings, heads and writes alike', async t => {
    // moto with its key checks on rejects the signature of a listing whose prefix or delimiter holds a '/'
    // (RGW, as S3, accepts it): on moto, a server of its own without them.
    const open = server.kind === 'moto' ? await startS3Server(t, { kind: 'moto' }) : server
    const store = testStore(t, open, 'absent')
    const expected = `the bucket absent does not exist at ${open.endpoint}`
    for (const [what, call] of [
      ['getRange', async () => await store.getRange('k', 0, 1)],
      ['list', async () => await store.list('')],
      ['listTree', async () => await store.listTree('p/')],
      ['head', async () => await store.head('k')], // its 404 says nothing of buckets: HeadBucket tells
      ['put', async () => await store.put('k', Buffer.from('x'))]
    ] as const) {
      const err = await storeFailure(call())
      t.equal(err.kind, 'no-bucket', what)
      t.equal(err.message, expected, what)
    }
    t.equal(store.stats().retries, 0)
  })

  t.test('an endpoint with nothing listening is unreachable at once, without retries', async t => {
    const endpoint = `http://127.0.0.1:${await freePort()}`
    const retries: string[] = []
    const store = testStore(t, { ...server, endpoint }, 'present', { onRetry: info => retries.push(info.reason) })
    const err = await storeFailure(store.getRange('k', 0, 1))
    t.equal(err.kind, 'unreachable')
    t.equal(err.message, `cannot reach the S3 endpoint ${endpoint} (connection refused); check --s3-endpoint`)
    t.same(retries, [])
    t.equal(store.stats().failures, 1)
  })

  t.test('store errors are one-line UsageErrors the CLI prints as they are', async t => {
    const store = testStore(t, server, 'absent')
    const err = await storeFailure(store.list(''))
    t.ok(err instanceof StoreError)
    t.equal(err.name, 'StoreError')
    t.equal(describeStoreError(err), err.message)
    t.notOk(err.message.includes('\n'))
    t.equal(describeStoreError(new Error('socket hang up\n    at somewhere')), 'object storage request failed: socket hang up')
  })
}, { authentication: true })
