// A fake S3 endpoint (plain HTTP, path style, one bucket) that serves a
// bucket described per call, and lies as told: listings (pages, tokens,
// encodings, keys outside the prefix) and GETs (bodies short, long, of
// another range or version, errors, no answer). For the S3 fuzzer
// (fuzz/s3.fuzz.ts) and the tests of what redirfs does with an endpoint
// that misbehaves, which a real server (moto) never does.
import http from 'node:http'
import type { AddressInfo } from 'node:net'

/** The one bucket the endpoint has. */
export const FAKE_BUCKET = 'fuzz'

/** An object of the bucket, and what the endpoint says of it. */
export interface FakeObject {
  key: string
  body: Buffer
  /** The ETag its answers carry. */
  etag: string
  /** What a listing says, as text: its size, ETag and date (undefined: the element is left out). */
  listedSize: string
  listedEtag?: string
  listedDate?: string
  /** How its GETs go wrong, if they do. */
  fault?: 'short' | 'long' | 'no-length' | 'other-range' | 'new-version' | 'error' | 'stall'
  status?: number
}

/** A bucket as the endpoint presents it, for one case. */
export interface FakeBucket {
  prefix: string
  objects: FakeObject[]
  /** Keys each listing page holds at most. */
  pageSize: number
  /** How listings go wrong, if they do. */
  listing?: 'no-token' | 'same-token' | 'unsorted' | 'repeated' | 'stray-prefix' | 'bad-xml' | 'error' | 'bad-encoding'
  /** Whether the endpoint URL-encodes keys when asked (S3 does; one that does not sends them as XML text). */
  encodes: boolean
}

/**
 * Starts the endpoint on a free port of 127.0.0.1; `bucket` is what it serves
 * until it is set again. Stopped in teardown.
 */
export async function startFakeS3 (t: { teardown: (fn: () => Promise<void>) => void }): Promise<{ endpoint: string, serve: (bucket: FakeBucket) => void }> {
  let bucket: FakeBucket = { prefix: '', objects: [], pageSize: 1000, encodes: true }

  const xml = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

  /** A key as a listing sends it: URL-encoded (as S3 does it, a space as '+') when asked and the endpoint can, else as XML text. */
  function sent (key: string, encoded: boolean): string {
    if (!encoded) return xml(key)
    return bucket.listing === 'bad-encoding' ? `${encodeURIComponent(key)}%E0%A4%A` : encodeURIComponent(key).replace(/%20/g, '+').replace(/%2F/g, '/')
  }

  /** A ListObjectsV2 page of `keys`, as S3 writes it (every element optional where S3's may be missing). */
  function listingPage (contents: FakeObject[], prefixes: string[], prefix: string, token: string | undefined, encoded: boolean): string {
    const items = contents.map(o => '<Contents>' + `<Key>${sent(o.key, encoded)}</Key>` + (o.listedDate !== undefined ? `<LastModified>${xml(o.listedDate)}</LastModified>` : '') +
      (o.listedEtag !== undefined ? `<ETag>${xml(o.listedEtag)}</ETag>` : '') + `<Size>${xml(o.listedSize)}</Size><StorageClass>STANDARD</StorageClass></Contents>`).join('')
    const common = prefixes.map(p => `<CommonPrefixes><Prefix>${sent(p, encoded)}</Prefix></CommonPrefixes>`).join('')
    const next = token !== undefined ? `<NextContinuationToken>${xml(token)}</NextContinuationToken>` : ''
    return `<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>${FAKE_BUCKET}</Name><Prefix>${xml(prefix)}</Prefix>` +
      `<KeyCount>${contents.length}</KeyCount><MaxKeys>1000</MaxKeys>${encoded ? '<EncodingType>url</EncodingType>' : ''}<IsTruncated>${token !== undefined || bucket.listing === 'no-token'}</IsTruncated>${items}${common}${next}</ListBucketResult>`
  }

  function listing (query: URLSearchParams, response: http.ServerResponse): void {
    const prefix = query.get('prefix') ?? ''
    const delimiter = query.get('delimiter') ?? undefined
    const start = Number(query.get('continuation-token') ?? '0')
    if (bucket.listing === 'error') return errorAnswer(response, 503, 'SlowDown')
    if (bucket.listing === 'bad-xml') { response.writeHead(200, { 'content-type': 'application/xml' }); response.end('<ListBucketResult><Contents><Key>a'); return }
    // What falls under the prefix, grouped at the delimiter as S3 groups it; a stray prefix (outside the one asked for) when the endpoint lies.
    const under = bucket.objects.filter(o => o.key.startsWith(prefix) || bucket.listing === 'stray-prefix')
    const contents: FakeObject[] = []
    const prefixes = new Set<string>()
    for (const o of under) {
      const rest = o.key.startsWith(prefix) ? o.key.slice(prefix.length) : o.key
      const cut = delimiter === undefined ? -1 : rest.indexOf(delimiter)
      if (cut >= 0) prefixes.add((o.key.startsWith(prefix) ? prefix : '') + rest.slice(0, cut + 1))
      else contents.push(o)
    }
    let page = contents.slice(start, start + bucket.pageSize)
    if (bucket.listing === 'unsorted') page = [...page].reverse()
    if (bucket.listing === 'repeated') page = [...page, ...page]
    const more = start + bucket.pageSize < contents.length
    const token = bucket.listing === 'same-token' ? '0' : more ? String(start + bucket.pageSize) : undefined
    response.writeHead(200, { 'content-type': 'application/xml' })
    response.end(listingPage(page, start === 0 ? [...prefixes] : [], prefix, token, bucket.encodes && query.get('encoding-type') === 'url'))
  }

  function errorAnswer (response: http.ServerResponse, status: number, code: string, body = true): void {
    response.writeHead(status, { 'content-type': 'application/xml' })
    response.end(body ? `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${code}\nwith a second line</Message></Error>` : undefined)
  }

  /** A GET or HEAD of an object: its bytes (the range asked for), or the way the case has it go wrong. */
  function object (request: http.IncomingMessage, response: http.ServerResponse, key: string): void {
    const found = bucket.objects.find(o => o.key === key)
    if (found === undefined) return errorAnswer(response, 404, 'NoSuchKey', request.method !== 'HEAD')
    const ifMatch = request.headers['if-match']
    const etag = found.fault === 'new-version' ? '"another-version"' : found.etag
    if (ifMatch !== undefined && ifMatch.replace(/"/g, '') !== etag.replace(/"/g, '')) return errorAnswer(response, 412, 'PreconditionFailed')
    if (found.fault === 'error') return errorAnswer(response, found.status ?? 500, found.status === 403 ? 'AccessDenied' : 'InternalError', request.method !== 'HEAD')
    if (found.fault === 'stall') return // no answer: the store's idle timer
    const size = found.body.length
    const range = /^bytes=(\d+)-(\d+)$/.exec(request.headers.range ?? '')
    let [first, last] = range !== null ? [Number(range[1]), Math.min(Number(range[2]), size - 1)] : [0, size - 1]
    // Another range than the one asked for (a whole-object GET answered with fewer bytes is just another object: no fault).
    if (found.fault === 'other-range' && range !== null) [first, last] = [0, Math.max(0, size - 2)]
    let body = found.body.subarray(first, last + 1)
    const headers: http.OutgoingHttpHeaders = { etag, 'last-modified': new Date(0).toUTCString(), 'content-type': 'application/octet-stream' }
    if (range !== null) headers['content-range'] = `bytes ${first}-${last}/${size}`
    if (found.fault !== 'no-length') headers['content-length'] = String(body.length)
    if (found.fault === 'long' && request.method !== 'HEAD') body = Buffer.concat([body, Buffer.from('more bytes than said')])
    response.writeHead(range !== null ? 206 : 200, headers)
    if (request.method === 'HEAD') { response.end(); return }
    if (found.fault === 'short') { response.write(body.subarray(0, Math.floor(body.length / 2))); response.destroy(); return }
    response.end(body)
  }

  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://fake')
    const [, name, ...rest] = url.pathname.split('/')
    if (name !== FAKE_BUCKET) return errorAnswer(response, 404, 'NoSuchBucket')
    const key = rest.map(decodeURIComponent).join('/')
    if (request.method === 'GET' && key === '' && url.searchParams.get('list-type') === '2') return listing(url.searchParams, response)
    if (key === '' && request.method === 'HEAD') { response.writeHead(200); response.end(); return }
    return object(request, response, key)
  })

  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise(resolve => server.close(resolve))
  })
  return { endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, serve: served => { bucket = served } }
}
