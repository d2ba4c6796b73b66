// The route a store's ranged GETs take without the SDK, as read from a
// GetObject the SDK sent (src/s3/direct-get.ts). The GETs themselves go
// to real servers in reads.test.ts and faults.test.ts.
import t from 'tap'
import { keyPath, learnRoute, type SentRequest } from '../../src/s3/direct-get'

const SIGNED = 'AWS4-HMAC-SHA256 Credential=AKID/20261127/eu-west-3/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=00'
const EMPTY_HASH = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'

function sent (path: string, overrides: Partial<SentRequest> = {}, headers: Record<string, string> = {}): SentRequest {
  return {
    protocol: 'https:',
    hostname: 'bucket.s3.eu-west-3.amazonaws.com',
    path,
    query: { 'x-id': 'GetObject' },
    headers: { host: 'bucket.s3.eu-west-3.amazonaws.com', authorization: SIGNED, 'x-amz-content-sha256': EMPTY_HASH, ...headers },
    ...overrides
  }
}

t.test('a key is encoded as the SDK puts it in a path: each segment, the slashes kept', async t => {
  t.equal(keyPath("a b/c+d=(1)*!'~é.jpg"), 'a%20b/c%2Bd%3D%281%29%2A%21%27~%C3%A9.jpg')
})

t.test('a bucket in the host name: the path before the key is /, the region and service are the signature\'s', async t => {
  t.same(learnRoute(sent('/train/n01/a%20b.jpg'), 'train/n01/a b.jpg'), {
    protocol: 'https:',
    hostname: 'bucket.s3.eu-west-3.amazonaws.com',
    port: undefined,
    host: 'bucket.s3.eu-west-3.amazonaws.com',
    pathPrefix: '/',
    query: { 'x-id': 'GetObject' },
    payloadHash: EMPTY_HASH,
    region: 'eu-west-3',
    service: 's3'
  })
})

t.test('path style: the bucket is part of the path before the key, the port is kept', async t => {
  const route = learnRoute(sent('/bucket/k.bin', { protocol: 'http:', hostname: '127.0.0.1', port: 9000 }, { host: '127.0.0.1:9000' }), 'k.bin')
  t.match(route, { protocol: 'http:', hostname: '127.0.0.1', port: 9000, host: '127.0.0.1:9000', pathPrefix: '/bucket/' })
})

t.test('only the SDK\'s own query marker is kept: the rest belonged to that one request', async t => {
  t.same(learnRoute(sent('/k', { query: { 'x-id': 'GetObject', partNumber: '2', versionId: 'v1' } }), 'k')?.query, { 'x-id': 'GetObject' })
})

t.test('a request the route cannot be read from teaches nothing', async t => {
  t.equal(learnRoute(sent('/other'), 'k'), undefined, 'a path that does not end in the key')
  t.equal(learnRoute(sent('/a%20b'), 'a+b'), undefined, 'a path with the key encoded otherwise')
  t.equal(learnRoute(sent('/k', {}, { authorization: 'AWS4-ECDSA-P256-SHA256 Credential=AKID/20261127/s3/aws4_request, Signature=00' }), 'k'), undefined, 'SigV4a, a multi-region signature')
  t.equal(learnRoute({ ...sent('/k'), headers: { host: 'h', 'x-amz-content-sha256': EMPTY_HASH } }, 'k'), undefined, 'unsigned (anonymous credentials)')
  t.equal(learnRoute({ ...sent('/k'), headers: { host: 'h', authorization: SIGNED } }, 'k'), undefined, 'no payload hash header')
  t.equal(learnRoute(sent('/k', { protocol: 'ftp:' }), 'k'), undefined, 'a scheme other than http and https')
})
