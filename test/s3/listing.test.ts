// Listing an ImageFolder stored as objects: listTree (one delimited
// listing, then every first-level directory at once) against a plain full
// listing, on a tree uploaded from a local directory with the test helper,
// on moto and on Ceph RGW.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { SeededRandom } from '../../src/redirect/random'
import { ObjectStore } from '../../src/s3/store'
import { FAKE_BUCKET, startFakeS3, type FakeBucket, type FakeObject } from '../helpers/fake-s3'
import { startFaultProxy } from '../helpers/fault-proxy'
import { createBucket, forEachS3Server, seededBytes, testStore, uploadTree } from '../helpers/s3-server'

/** Files per class; 'dog 🐕' and 'löwe' test key order beyond ASCII. */
const CLASSES: Record<string, number> = { ant: 80, bee: 1, cat: 120, 'dog 🐕': 50, löwe: 49 }
/** Beside the classes, at the top: 'ant.txt' sorts between 'ant' and 'ant/' keys' neighbours by bytes ('.' < '/'). */
const TOP_FILES = ['README.txt', 'ant.txt', 'labels.csv']
const PAGE = 50

/** A local ImageFolder with nested directories and seeded sizes; removed in teardown. */
function localTree (): { root: string, sizes: Map<string, number> } {
  const root = mkdtempSync(path.join(os.tmpdir(), 'redirfs-s3-tree-'))
  t.teardown(() => rmSync(root, { recursive: true, force: true }))
  const random = new SeededRandom(30)
  const sizes = new Map<string, number>()
  const write = (relative: string, bytes: Buffer): void => {
    mkdirSync(path.dirname(path.join(root, relative)), { recursive: true })
    writeFileSync(path.join(root, relative), bytes)
    sizes.set(relative, bytes.length)
  }
  for (const [name, count] of Object.entries(CLASSES)) {
    for (let i = 0; i < count; i++) {
      const sub = i % 7 === 3 ? 'nested/deeper/' : i % 5 === 1 ? 'sub dir/' : ''
      write(`${name}/${sub}img${String(i).padStart(3, '0')}${i % 9 === 4 ? '-\u{1F600}' : ''}.jpg`, seededBytes(i + 1000 * name.length, 10 + random.below(200)))
    }
  }
  for (const name of TOP_FILES) write(name, Buffer.from(name))
  return { root, sizes }
}

forEachS3Server(async (t, server) => {
  t.test('listTree of a tree uploaded from a directory equals the plain full listing, keys in byte order, sizes and ETags exact', async t => {
    await createBucket(server, 'tree')
    const store = testStore(t, server, 'tree', { listPageSize: PAGE })
    const { root, sizes } = localTree()
    const uploaded = await uploadTree(store, root, 'data/train/')
    await store.put('data/trainee.bin', Buffer.from('outside the prefix'))
    await store.put('other/x.jpg', Buffer.from('outside the prefix'))
    t.equal(uploaded.length, 303)

    const before = store.stats().listRequests
    const tree = await store.listTree('data/train/')
    const treeRequests = store.stats().listRequests - before
    const flat = await store.list('data/train/')
    const flatRequests = store.stats().listRequests - before - treeRequests

    t.same(tree, flat, 'the same objects, in the same order, with the same sizes, ETags and times')
    t.same(tree.map(object => object.key), uploaded, 'every uploaded key, in UTF-8 byte order')
    t.same(tree.map(object => object.size), uploaded.map(key => sizes.get(key.slice('data/train/'.length))), 'sizes as on disk')
    t.ok(tree.every(object => /^"[0-9a-f]{32}"$/.test(object.etag)), 'ETags as S3 gives them, quoted')
    // One delimited page (5 directories, 3 files), then per class ceil(files / 50) pages.
    t.equal(treeRequests, 1 + 2 + 1 + 3 + 1 + 1, 'LIST requests of listTree')
    t.equal(flatRequests, Math.ceil(303 / PAGE), 'LIST requests of the plain listing')
  })

  t.test('listTree lists every first-level directory at once', async t => {
    await createBucket(server, 'parallel')
    const proxy = await startFaultProxy(t, server.endpoint)
    const store = testStore(t, { ...server, endpoint: proxy.endpoint }, 'parallel')
    for (const name of ['a', 'b', 'c', 'd', 'e']) await store.put(`p/${name}/1.jpg`, Buffer.from(name))
    await store.put('p/top.txt', Buffer.from('top'))
    proxy.inject('hold', { times: 5, match: request => request.kind === 'list' && request.query.get('prefix') !== 'p/' })
    const listing = store.listTree('p/')
    // Held listings never answer, so requests in flight can only grow until the test releases them.
    while (!(proxy.held() >= 1 && store.stats().inFlight === proxy.held())) await new Promise(resolve => setTimeout(resolve, 10))
    t.equal(proxy.held(), 5, 'the five directories are listed at the same time')
    proxy.release()
    t.same((await listing).map(object => object.key), ['p/a/1.jpg', 'p/b/1.jpg', 'p/c/1.jpg', 'p/d/1.jpg', 'p/e/1.jpg', 'p/top.txt'])
    t.equal(proxy.requests.list, 6)
  })

  t.test('a prefix with nothing under it lists as empty with one request', async t => {
    await createBucket(server, 'empty-tree')
    const store = testStore(t, server, 'empty-tree')
    t.same(await store.listTree('nothing/'), [])
    t.same(await store.list('nothing/'), [])
    t.equal(store.stats().listRequests, 2)
  })

  t.test('the bucket root lists as the empty prefix', async t => {
    await createBucket(server, 'rooted')
    const store = testStore(t, server, 'rooted')
    for (const key of ['z.txt', 'a/1', 'a/b/2', 'b/3']) await store.put(key, Buffer.from(key))
    t.same((await store.listTree('')).map(object => object.key), ['a/1', 'a/b/2', 'b/3', 'z.txt'])
  })

  // Listings ask for keys URL-encoded (listing-xml.ts): what each server makes of '+', '%', a space and XML's own characters
  // (a space may come as %20 or, as S3 writes it, '+'), in keys and in the directories listed on their own.
  t.test('keys of characters URL encoding and XML both treat specially list exactly and read back', async t => {
    await createBucket(server, 'odd-keys')
    const store = testStore(t, server, 'odd-keys', { listPageSize: 2 })
    const keys = ['d/c/&<>\'".jpg', 'd/c/a b.jpg', 'd/c/a+b.jpg', 'd/c/tab\t.jpg', 'd/c/x%20y%.jpg', 'd/e+f %41/g.jpg', 'd/猫 x/\u{1F600}.jpg']
    for (const key of keys) await store.put(key, Buffer.from(key))
    const listed = (await store.listTree('d/')).map(object => object.key)
    t.same(listed, [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))))
    t.same((await store.list('d/')).map(object => object.key), listed)
    for (const key of listed) t.equal((await store.getObject(key)).toString(), key, JSON.stringify(key))
  })
})

/** A store of the fake endpoint (test/helpers/fake-s3.ts), which lies as told where moto never does (and holds keys moto cannot). */
async function fakeStore (t: Test, bucket: FakeBucket): Promise<ObjectStore> {
  const fake = await startFakeS3(t)
  fake.serve(bucket)
  const store = new ObjectStore({ bucket: FAKE_BUCKET, endpoint: fake.endpoint, pathStyle: true, region: 'us-east-1', credentials: { accessKeyId: 'k', secretAccessKey: 's' }, retries: 0 })
  t.teardown(async () => { await store.close() })
  return store
}

const objectsOf = (keys: string[]): FakeObject[] => keys.map(key => ({ key, body: Buffer.from(key), etag: '"e"', listedSize: String(Buffer.byteLength(key)) }))

// Found by the S3 fuzzer (fuzz/s3.fuzz.ts): keys came as XML text, which turns a carriage return into a line feed, so such a
// key was listed under another name and could never be read; they are asked for URL-encoded now, as S3 recommends.
t.test('keys with any character list exactly and read back: a listing asks for them URL-encoded', async t => {
  const keys = ['d/cat/&<>.jpg', 'd/cat/a\r\nb.jpg', 'd/cat/c\rd.jpg', 'd/cat/e+f g%20.jpg', 'd/猫/\u{1F600}.jpg']
  const store = await fakeStore(t, { prefix: 'd/', objects: objectsOf(keys), pageSize: 2, encodes: true })
  const listed = await store.listTree('d/')
  t.same(listed.map(object => object.key), keys)
  for (const { key } of listed) t.equal((await store.getObject(key)).toString(), key, JSON.stringify(key))
})

t.test('an endpoint that hands back a continuation token it gave before is refused in one line, never listed for ever', async t => {
  const store = await fakeStore(t, { prefix: 'p/', objects: objectsOf(['p/a.jpg', 'p/b.jpg', 'p/c.jpg']), pageSize: 1, listing: 'same-token', encodes: true })
  await t.rejects(store.list('p/'), { name: 'StoreError', message: `ListObjectsV2 s3://${FAKE_BUCKET}/p/ failed (a continuation token it gave before: the listing repeats itself)` })
})

t.test('a listing whose keys are not URL-encoded as it says is refused in one line', async t => {
  const store = await fakeStore(t, { prefix: 'p/', objects: objectsOf(['p/a.jpg']), pageSize: 10, listing: 'bad-encoding', encodes: true })
  await t.rejects(store.list('p/'), { name: 'StoreError', message: `ListObjectsV2 s3://${FAKE_BUCKET}/p/ failed (a key that is not URL-encoded: p%2Fa.jpg%E0%A4%A)` })
})
