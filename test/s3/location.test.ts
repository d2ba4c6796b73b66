// s3://bucket/prefix as users write it: what it parses to, and the one
// line a user gets for each way of writing it wrong.
import t from 'tap'
import { UsageError } from '../../src/errors'
import { isS3Url, parseS3Url, s3Url } from '../../src/s3/location'

t.test('a bucket and a prefix: the prefix ends with one slash', async t => {
  t.same(parseS3Url('s3://my-bucket/train'), { bucket: 'my-bucket', prefix: 'train/' })
  t.same(parseS3Url('s3://my-bucket/train/'), { bucket: 'my-bucket', prefix: 'train/' })
  t.same(parseS3Url('s3://my.bucket.2/data/imagenet/train'), { bucket: 'my.bucket.2', prefix: 'data/imagenet/train/' })
})

t.test('a bucket alone, with or without its slash, is the empty prefix', async t => {
  t.same(parseS3Url('s3://abc'), { bucket: 'abc', prefix: '' })
  t.same(parseS3Url('s3://abc/'), { bucket: 'abc', prefix: '' })
})

t.test('the prefix is kept as written: spaces, non-ASCII and doubled slashes are valid in keys', async t => {
  t.same(parseS3Url('s3://abc/k lass/löwe 猫'), { bucket: 'abc', prefix: 'k lass/löwe 猫/' })
  t.same(parseS3Url('s3://abc//x//y'), { bucket: 'abc', prefix: '/x//y/' })
})

t.test('the scheme is recognized in any case', async t => {
  t.ok(isS3Url('s3://b'))
  t.ok(isS3Url('S3://b'))
  t.same(parseS3Url('S3://abc/p'), { bucket: 'abc', prefix: 'p/' })
  t.notOk(isS3Url('/data/s3://b'))
  t.notOk(isS3Url('s3:/abc'))
  t.notOk(isS3Url('https://abc.s3.amazonaws.com/p'))
})

t.test('each malformed URL is a UsageError whose one line says what is wrong', async t => {
  const cases: Array<[string, string]> = [
    ['s3://', "'s3://' names no bucket: write s3://<bucket>/<prefix>"],
    ['s3:///x', "'s3:///x' names no bucket: write s3://<bucket>/<prefix>"],
    ['s3://Bad_Bucket', "'s3://Bad_Bucket' has an invalid bucket name 'Bad_Bucket': bucket names use only lowercase letters, digits, dots and hyphens"],
    ['s3://ab/x', "'s3://ab/x' has an invalid bucket name 'ab': bucket names are 3 to 63 characters long, this one has 2"],
    [`s3://${'a'.repeat(64)}`, `'s3://${'a'.repeat(64)}' has an invalid bucket name '${'a'.repeat(64)}': bucket names are 3 to 63 characters long, this one has 64`],
    ['s3://-abc/x', "'s3://-abc/x' has an invalid bucket name '-abc': bucket names start and end with a lowercase letter or a digit"],
    ['s3://abc./x', "'s3://abc./x' has an invalid bucket name 'abc.': bucket names start and end with a lowercase letter or a digit"],
    ['s3://a..b/x', "'s3://a..b/x' has an invalid bucket name 'a..b': bucket names have no two dots in a row"],
    ['s3://192.168.5.4/x', "'s3://192.168.5.4/x' has an invalid bucket name '192.168.5.4': bucket names are not IP addresses"],
    ['/data/train', "'/data/train' is not an S3 URL: write s3://<bucket>/<prefix>"],
    [`s3://abc/${'k'.repeat(1024)}`, `'s3://abc/${'k'.repeat(1024)}' has a prefix longer than S3's 1024-byte limit on keys`]
  ]
  for (const [url, message] of cases) {
    const err = (() => { try { parseS3Url(url); return undefined } catch (err) { return err } })()
    t.ok(err instanceof UsageError, `${url.slice(0, 40)}: a UsageError`)
    t.equal((err as Error).message, message)
    t.notOk((err as Error).message.includes('\n'), 'one line')
  }
})

t.test('s3Url spells a key back as a URL', async t => {
  t.equal(s3Url('abc', 'train/x.jpg'), 's3://abc/train/x.jpg')
  t.equal(s3Url('abc'), 's3://abc/')
})
