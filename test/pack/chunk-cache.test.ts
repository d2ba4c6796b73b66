// The disk tier on its own, on a real filesystem with a real second user
// (nobody): a cache anyone else may write is refused in one line; a chunk
// forged with the right length and CRC-32s fails its HMAC and is never
// read; the files stay within the limit, least recently read evicted.
import { chmodSync, chownSync, mkdirSync, promises as fs, readdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { crc32 } from 'node:zlib'
import pino from 'pino'
import t from 'tap'
import { UsageError } from '../../src/errors'
import { CACHE_KEY_FILE, ChunkCache } from '../../src/pack/chunk-cache'
import { forgeCrc } from '../helpers/crc-forge'
import { emptyDir } from '../helpers/mount'
import { asNobody, NOBODY } from '../helpers/unprivileged'

const log = pino({ level: 'silent' })
const identity = 'f'.repeat(40)
const packDir = `pack-${identity.slice(0, 20)}`
/** Three chunks of 5,000, 3,000 and 9,000 bytes. */
const chunkLengths = Float64Array.from([5000, 3000, 9000])
const chunkBytes = (chunk: number): Buffer => Buffer.alloc(chunkLengths[chunk], `chunk ${chunk} `)
const open = async (root: string, limit = 1 << 20): Promise<ChunkCache> => await ChunkCache.open(root, identity, limit, chunkLengths, log)

/** Reads chunk `chunk` whole through the cache as the pack source does: checked, then read; undefined when the cache will not serve it. */
async function readWhole (cache: ChunkCache, chunk: number): Promise<Buffer | undefined> {
  if (!cache.has(chunk) || !(cache.checked(chunk) || await cache.check(chunk))) return undefined
  const target = Buffer.alloc(chunkLengths[chunk])
  const read = await cache.readPieces(chunk, 0, chunkLengths[chunk], [{ start: 0, size: chunkLengths[chunk] }], [target])
  return read === undefined ? undefined : target
}

t.test('a cache root others may write is refused in one line: nobody could plant a pack\'s chunks there', async t => {
  for (const mode of [0o777, 0o1777, 0o775]) {
    const root = emptyDir('redirfs-cache-')
    chmodSync(root, mode)
    await t.rejects(open(root), new UsageError(`cannot use --cache-dir ${root}: ${root} may be written by ${mode & 0o002 ? 'anyone' : 'its group'} (mode 0${mode.toString(8)}); make it writable by its owner only (chmod go-w)`), `mode 0${mode.toString(8)}`)
  }
})

t.test('a pack directory another user made in the cache (while it was open to them) is refused', async t => {
  const root = emptyDir('redirfs-cache-')
  chmodSync(root, 0o1777)
  const made = await asNobody('mkdir', ['-m', '0777', path.join(root, packDir)])
  t.equal(made.code, 0, made.stderr)
  chmodSync(root, 0o755) // closed afterwards: what nobody put there stays
  await t.rejects(open(root), new UsageError(`cannot use --cache-dir ${root}: ${path.join(root, packDir)} belongs to uid ${NOBODY}, not to this user (uid 0) or root`))
})

t.test('a directory above the cache that others may change is refused; a root-owned sticky one (/tmp) is not', async t => {
  const shared = emptyDir('redirfs-cache-')
  chmodSync(shared, 0o777)
  const root = path.join(shared, 'cache')
  await t.rejects(open(root), /a directory above it, may be changed by others \(uid 0, mode 0777\)/)
  chmodSync(shared, 0o1777)
  t.ok(await open(root), 'sticky and root\'s: nobody can replace the cache directory in it')
})

t.test('a --cache-dir that is another user\'s symbolic link is refused: they would choose where the cache and its key go', async t => {
  const shared = emptyDir('redirfs-cache-')
  chmodSync(shared, 0o1777)
  const elsewhere = emptyDir('redirfs-cache-target-')
  const given = path.join(shared, 'cache')
  const made = await asNobody('ln', ['-s', elsewhere, given])
  t.equal(made.code, 0, made.stderr)
  await t.rejects(open(given), new UsageError(`cannot use --cache-dir ${given}: ${given} is a symbolic link of uid ${NOBODY}, not of this user (uid 0) or root`))
  t.same(readdirSync(elsewhere), [], 'nothing was written where it led')
})

t.test('a file in a pack directory that is a link, another user\'s, or writable by others is refused', async t => {
  const plant: Array<[string, (file: string) => void, RegExp]> = [
    ['a link', file => symlinkSync('/etc/passwd', file), /0\.chunk is not a file but a symbolic link/],
    ['nobody\'s', file => { writeFileSync(file, ''); chownSync(file, NOBODY, NOBODY) }, /0\.chunk belongs to uid 65534/],
    ['group-writable', file => { writeFileSync(file, ''); chmodSync(file, 0o664) }, /0\.chunk may be written by its group/]
  ]
  for (const [what, make, why] of plant) {
    const root = emptyDir('redirfs-cache-')
    await open(root)
    make(path.join(root, packDir, '0.chunk'))
    await t.rejects(open(root), why, what)
  }
})

t.test('the cache\'s key is made once, private; a key others may read is refused', async t => {
  const root = emptyDir('redirfs-cache-')
  await open(root)
  const key = path.join(root, CACHE_KEY_FILE)
  t.equal(statSync(key).mode & 0o777, 0o600)
  const first = await fs.readFile(key)
  await open(root)
  t.same(await fs.readFile(key), first, 'a remount keeps it')
  chmodSync(key, 0o644)
  await t.rejects(open(root), /key is not this user's private key of the cache/)
})

t.test('a kept chunk reads back after a remount, its HMAC checked once', async t => {
  const root = emptyDir('redirfs-cache-')
  await (await open(root)).keep(1, chunkBytes(1))
  const again = await open(root)
  t.notOk(again.checked(1), 'a remount checks it anew')
  t.same(await readWhole(again, 1), chunkBytes(1))
  t.ok(again.checked(1))
  t.equal(again.stats().cacheForged, 0)
})

t.test('a chunk forged with the right length and CRC-32s fails its HMAC and is never read (the shared-cache attack)', async t => {
  const root = emptyDir('redirfs-cache-')
  const cache = await open(root)
  await cache.keep(0, chunkBytes(0))
  // Every byte of the chunk replaced, 4 of them solved for so that its CRC-32 (all a pack's index says of it) holds.
  const file = path.join(root, packDir, '0.chunk')
  const bytes = await fs.readFile(file)
  const forged = Buffer.alloc(chunkLengths[0], 'PWNED ')
  forgeCrc(forged, 0, crc32(chunkBytes(0)))
  forged.copy(bytes)
  await fs.writeFile(file, bytes)
  const remounted = await open(root)
  t.equal(await readWhole(remounted, 0), undefined, 'not served from the cache')
  t.equal(remounted.stats().cacheForged, 1)
  t.notOk(remounted.has(0), 'dropped')
  t.same(readdirSync(path.join(root, packDir)), [], 'and removed')
})

t.test('a chunk changed after its check is checked again before it is read', async t => {
  const root = emptyDir('redirfs-cache-')
  const cache = await open(root)
  await cache.keep(2, chunkBytes(2))
  t.same(await readWhole(cache, 2), chunkBytes(2), 'checked when written')
  const file = path.join(root, packDir, '2.chunk')
  const bytes = await fs.readFile(file)
  bytes[10] ^= 1
  await fs.writeFile(file, bytes)
  const target = Buffer.alloc(chunkLengths[2])
  t.equal(await cache.readPieces(2, 0, chunkLengths[2], [{ start: 0, size: chunkLengths[2] }], [target]), undefined, 'not read: its file is not the one checked')
  t.notOk(cache.checked(2))
  t.equal(await cache.check(2), false, 'checked again, its HMAC fails')
  t.equal(cache.stats().cacheForged, 1)
})

t.test('the files stay within the limit: room is made first, the least recently read go', async t => {
  const root = emptyDir('redirfs-cache-')
  // Room for two of the smaller chunks' files (each padded to 4 KiB blocks, plus a block for its HMAC).
  const cache = await open(root, 3 * 4096 + 2 * 4096)
  await cache.keep(0, chunkBytes(0)) // 2 blocks + 1
  await cache.keep(1, chunkBytes(1)) // 1 block + 1
  t.same(await readWhole(cache, 0), chunkBytes(0), 'chunk 0 read: chunk 1 is now the least recently read')
  await cache.keep(2, chunkBytes(2)) // 3 blocks + 1: chunk 1 must go, then chunk 0
  const sizes = readdirSync(path.join(root, packDir)).map(name => statSync(path.join(root, packDir, name)).size)
  t.ok(sizes.reduce((a, b) => a + b, 0) <= 5 * 4096, `${sizes.join(' + ')} bytes on disk`)
  t.notOk(cache.has(1), 'the least recently read went first')
  t.ok(cache.has(2))
  t.ok(cache.stats().cacheEvictions >= 1)
  const tooLarge = await open(emptyDir('redirfs-cache-'), 4096)
  await tooLarge.keep(2, chunkBytes(2))
  t.equal(tooLarge.stats().cacheRejected, 1, 'a chunk larger than the whole cache is not kept')
})

t.test('a remount finds the chunks it wrote and removes what does not belong', async t => {
  const root = emptyDir('redirfs-cache-')
  const cache = await open(root)
  await cache.keep(0, chunkBytes(0))
  await cache.keep(1, chunkBytes(1))
  mkdirSync(path.join(root, packDir, 'stray'), { recursive: true })
  await fs.rm(path.join(root, packDir, 'stray'), { recursive: true })
  writeFileSync(path.join(root, packDir, '7.chunk.1234.tmp'), 'a write cut short', { mode: 0o600 })
  const again = await open(root)
  t.ok(again.has(0) && again.has(1))
  t.same(readdirSync(path.join(root, packDir)).sort(), ['0.chunk', '1.chunk'], 'the stray file removed')
})
