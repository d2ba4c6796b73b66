// Reading a ListObjectsV2 answer (src/s3/listing-xml.ts): objects with
// their key, size, ETag and time, common prefixes apart from the request's
// own prefix, the continuation, escaped text, keys URL-encoded, and an
// answer cut short.
import t from 'tap'
import { ListingError, parseListing, unescapeXml } from '../../src/s3/listing-xml'

const answer = (body: string): Buffer => Buffer.from(`<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">${body}</ListBucketResult>\n`)

const contents = (key: string, size: number, etag: string): string =>
  `<Contents><Key>${key}</Key><LastModified>2026-01-02T03:04:05.678Z</LastModified><ETag>${etag}</ETag><Size>${size}</Size><StorageClass>STANDARD</StorageClass></Contents>`

t.test('each object with its key, size, ETag and time, in the answer\'s order', async t => {
  const page = parseListing(answer(`<Name>b</Name><Prefix>train/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>${contents('train/a/1.jpg', 10, '&quot;0cc175b9c0f1b6a831c399e269772661&quot;')}${contents('train/a/2.jpg', 0, '"92eb5ffee6ae2fec3ad71c777531578f-3"')}`))
  t.same(page, {
    objects: [
      { key: 'train/a/1.jpg', size: 10, etag: '"0cc175b9c0f1b6a831c399e269772661"', lastModified: new Date('2026-01-02T03:04:05.678Z') },
      { key: 'train/a/2.jpg', size: 0, etag: '"92eb5ffee6ae2fec3ad71c777531578f-3"', lastModified: new Date('2026-01-02T03:04:05.678Z') }
    ],
    prefixes: [],
    truncated: false,
    next: undefined
  })
})

t.test('common prefixes are the ones inside CommonPrefixes, not the request\'s own Prefix', async t => {
  const page = parseListing(answer('<Prefix>train/</Prefix><Delimiter>/</Delimiter><IsTruncated>false</IsTruncated><CommonPrefixes><Prefix>train/ant/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>train/bee/</Prefix></CommonPrefixes>'))
  t.same(page?.prefixes, ['train/ant/', 'train/bee/'])
  t.same(page?.objects, [])
})

t.test('a truncated page gives its continuation token', async t => {
  const page = parseListing(answer(`<IsTruncated>true</IsTruncated>${contents('k', 1, '"x"')}<NextContinuationToken>1/a+b=&amp;c</NextContinuationToken>`))
  t.equal(page?.truncated, true)
  t.equal(page?.next, '1/a+b=&c')
})

t.test('escaped text reads as the characters it stands for, beyond ASCII and control characters included', async t => {
  const page = parseListing(answer(`<IsTruncated>false</IsTruncated>${contents('dog 🐕/a&amp;b &lt;c&gt; &apos;d&apos; &#x0D;&#9;löwe.jpg', 3, '"e"')}`))
  t.equal(page?.objects[0].key, 'dog 🐕/a&b <c> \'d\' \r\tlöwe.jpg')
  t.equal(unescapeXml('&amp;lt;'), '&lt;', 'one level of escaping only')
  t.equal(unescapeXml('&#128512;&#x1F600;'), '😀😀')
})

t.test('an answer cut short, or one that is not a listing, reads as nothing', async t => {
  const whole = answer(`<IsTruncated>false</IsTruncated>${contents('k', 1, '"x"')}`)
  t.equal(parseListing(whole.subarray(0, whole.length / 2)), undefined)
  t.equal(parseListing(whole.subarray(0, whole.lastIndexOf('</ListBucketResult>'))), undefined)
  t.equal(parseListing(Buffer.from('<?xml version="1.0"?><Error><Code>NoSuchBucket</Code></Error>')), undefined)
})

// The store asks for keys URL-encoded (store.ts, listPage), as S3 recommends: XML cannot carry every character a key may hold.
t.test('keys and prefixes of an answer that says they are URL-encoded are decoded; of one that does not, read as text', async t => {
  const page = parseListing(answer(`<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>${contents('d/cat/a%0D%0Ab+c%2Bd%20%26.jpg', 1, '"x"')}` +
    '<CommonPrefixes><Prefix>d/%E7%8C%AB/</Prefix></CommonPrefixes><NextContinuationToken>a+b%2F</NextContinuationToken>'))
  t.equal(page?.objects[0].key, 'd/cat/a\r\nb c+d &.jpg')
  t.same(page?.prefixes, ['d/猫/'])
  t.equal(page?.next, 'a+b%2F', 'the token is not a key: as it came')
  const plain = parseListing(answer(`<IsTruncated>false</IsTruncated>${contents('d/a+b%20.jpg', 1, '"x"')}`))
  t.equal(plain?.objects[0].key, 'd/a+b%20.jpg')
})

t.test('a key the answer says is URL-encoded and is not refuses the page, naming it in one line', async t => {
  t.throws(() => parseListing(answer(`<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>${contents('d/a.jpg%E0%A4%A', 1, '"x"')}`)),
    new ListingError('a key that is not URL-encoded: d/a.jpg%E0%A4%A'))
  t.throws(() => parseListing(answer('<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated><CommonPrefixes><Prefix>d/%ZZ/</Prefix></CommonPrefixes>')), ListingError)
})
