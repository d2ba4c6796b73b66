import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { crc32 } from 'node:zlib'
import t from 'tap'
import { addonPath, ChunkFile, native } from '../../src/chunks/native'
import { SeededRandom } from '../../src/redirect/random'
import { emptyDir } from '../helpers/mount'

const dir = emptyDir('redirfs-native-')
const file = path.join(dir, 'data.bin')
const random = new SeededRandom(1)
const bytes = Buffer.from(Array.from({ length: 3 * 4096 + 1234 }, () => random.below(256)))
writeFileSync(file, bytes)

t.test('an aligned read returns exactly the bytes of a buffered read, at any offset and length', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  for (const [offset, length] of [[0, 4096], [0, bytes.length], [5, 100], [4095, 2], [4096, 4096], [9000, 4000], [100, 0]]) {
    t.same(await chunkFile.read(offset, length), bytes.subarray(offset, offset + length), `offset ${offset}, length ${length}`)
  }
})

t.test('a read past the end returns what is there, so callers can tell a truncated file', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const tail = await chunkFile.read(bytes.length - 10, 100)
  t.same(tail, bytes.subarray(bytes.length - 10))
})

t.test('the buffered fallback returns the same bytes', async t => {
  const fd = openSync(file, 'r')
  t.teardown(() => closeSync(fd))
  t.same(await native().readAligned(fd, 333, 5000, false), bytes.subarray(333, 5333))
})

t.test('readFiles reads each file into its target and says how much, or why it could not', async t => {
  const other = path.join(dir, 'other.bin')
  writeFileSync(other, 'hello')
  const targets = [Buffer.alloc(bytes.length + 1), Buffer.alloc(6), Buffer.alloc(10)]
  const [a, b, missing] = await native().readFiles([file, other, path.join(dir, 'missing')], targets)
  t.equal(a, bytes.length)
  t.same(targets[0].subarray(0, bytes.length), readFileSync(file))
  t.equal(b, 5)
  t.same(targets[1].subarray(0, 5), Buffer.from('hello'))
  t.type(missing, Error)
  t.match(missing, { code: 'ENOENT', errno: -2 }, 'the error names its errno, as a Node error does')
})

t.test('a file that fills its target (it grew since the scan) comes back whole in a buffer of its own', async t => {
  const target = Buffer.alloc(1000, 0xee)
  const [result] = await native().readFiles([file], [target])
  t.ok(Buffer.isBuffer(result))
  t.same(result, bytes, 'every byte, none cut off')
  const [tooSmallByOne] = await native().readFiles([file], [Buffer.alloc(bytes.length)])
  t.same(tooSmallByOne, bytes, 'a target of exactly the size cannot tell the end: read on')
})

t.test('a failed aligned read rejects with the errno as its code', async t => {
  await t.rejects(native().readAligned(-1, 0, 4096, false), { code: 'EBADF' })
})

t.test('readPieces returns the chunk\'s CRC-32 and exact copies of the pieces asked for', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const offset = 100
  const length = bytes.length - 200
  const pieces = [{ start: 0, size: 10 }, { start: 5000, size: 4096 }, { start: length - 7, size: 7 }, { start: 20, size: 0 }]
  const targets = pieces.map(p => Buffer.alloc(p.size))
  const chunk = await chunkFile.readPieces(offset, length, pieces, targets)
  t.equal(chunk.length, length)
  t.equal(chunk.crc, crc32(bytes.subarray(offset, offset + length)))
  t.equal(chunk.copied, pieces.length)
  t.same(targets, pieces.map(p => bytes.subarray(offset + p.start, offset + p.start + p.size)))
})

t.test('readPieces sums the span once whatever the pieces: in order with gaps, touching, out of order', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const length = bytes.length - 1
  const layouts = [
    [{ start: 3, size: 500 }, { start: 4000, size: 5000 }],
    [{ start: 0, size: 4096 }, { start: 4096, size: length - 4096 }],
    [{ start: 9000, size: 100 }, { start: 10, size: 100 }]
  ]
  for (const pieces of layouts) {
    const chunk = await chunkFile.readPieces(1, length, pieces, pieces.map(p => Buffer.alloc(p.size)))
    t.equal(chunk.crc, crc32(bytes.subarray(1, 1 + length)), JSON.stringify(pieces))
    t.same(chunk.fileCrcs, pieces.map(p => crc32(bytes.subarray(1 + p.start, 1 + p.start + p.size))))
  }
})

t.test('the native CRC-32 is zlib\'s at every length and alignment, from any initial value', async t => {
  const data = Buffer.from(Array.from({ length: 70_000 }, () => random.below(256)))
  let wrong = 0
  for (let length = 0; length <= 300; length++) {
    for (const offset of [0, 1, 7, 16]) {
      const piece = data.subarray(offset, offset + length)
      if (native().crc32(piece) !== crc32(piece) || native().crc32(piece, 0xdeadbeef) !== crc32(piece, 0xdeadbeef)) wrong++
    }
  }
  t.equal(wrong, 0, 'lengths 0 to 300 at four alignments')
  t.equal(native().crc32(data.subarray(3)), crc32(data.subarray(3)), 'a sample-sized run')
})

t.test('readPieces of a chunk cut short reports the length it got and copies nothing', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const target = Buffer.alloc(10, 0xee)
  const chunk = await chunkFile.readPieces(bytes.length - 50, 100, [{ start: 0, size: 10 }], [target])
  t.equal(chunk.length, 50)
  t.equal(chunk.crc, crc32(bytes.subarray(bytes.length - 50)))
  t.equal(chunk.copied, 0)
  t.same(target, Buffer.alloc(10, 0xee), 'the target untouched')
})

t.test('readPieces copies no piece into a target too small for it', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const chunk = await chunkFile.readPieces(0, 100, [{ start: 0, size: 10 }, { start: 10, size: 20 }], [Buffer.alloc(10), Buffer.alloc(5)])
  t.equal(chunk.copied, 1, 'the first fits, the second does not: it and any after are not copied')
})

// An empty Buffer has no memory (a null pointer), which memcpy must never be given, even to copy nothing: npm run test:asan
// (UndefinedBehaviorSanitizer) reports it. Found by the chunk reader's fuzzer (native/fuzz/chunk_pieces_fuzzer.cc).
t.test('readPieces copies a piece of no bytes into an empty target, and counts it', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const chunk = await chunkFile.readPieces(0, 100, [{ start: 40, size: 0 }, { start: 40, size: 10 }], [Buffer.alloc(0), Buffer.alloc(10)])
  t.same([chunk.copied, chunk.fileCrcs], [2, [0, crc32(bytes.subarray(40, 50))]])
  t.equal(chunk.crc, crc32(bytes.subarray(0, 100)))
})

// The same for readFiles: a file read with an empty target goes into a buffer of its own, and nothing is copied from the target.
t.test('readFiles reads a file whose target is empty whole into a buffer of its own', async t => {
  const [result] = await native().readFiles([file], [Buffer.alloc(0)])
  t.same(result, bytes)
})

t.test('readPieces refuses a range or piece that is not a whole number inside what is read, before reading anything', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  const target = Buffer.alloc(8192 + 10, 0xee)
  // The crafted pack's piece: 8192 bytes before the run, ending inside it (as unsigned numbers, a wrapped bound).
  for (const [offset, length, start, size] of [[4096, 100, -8192, 8202], [0, 100, 2 ** 64 - 8192, 8202], [0, 100, 90, 11], [0, 100, Number.NaN, 1], [0, 100, 0.5, 1], [-4096, 100, 0, 10], [0, Infinity, 0, 10]]) {
    await t.rejects(chunkFile.readPieces(offset, length, [{ start, size }], [target]), RangeError, `${length} bytes at ${offset}, piece of ${size} at ${start}`)
  }
  t.same(target, Buffer.alloc(8192 + 10, 0xee), 'the target untouched')
})

t.test('discard frees a Buffer that is its memory\'s only view, and leaves shared memory alone', async t => {
  const [own] = await native().readFiles([file], [Buffer.alloc(0)]) as Buffer[]
  t.equal(native().discard(own), true)
  t.equal(own.length, 0, 'every view of freed memory is empty')
  const slab = Buffer.from(bytes)
  const view = slab.subarray(10, 20)
  t.equal(native().discard(view), false)
  t.same(slab, bytes, 'the memory it shares is untouched')
  const small = Buffer.from('pooled by Node')
  t.equal(native().discard(small), false, 'Node\'s small-buffer pool is shared')
  t.equal(small.toString(), 'pooled by Node')
})

t.test('REDIRFS_NATIVE_BUILD chooses a build directory of native/ (the sanitizers\' build), never another path', async t => {
  const before = process.env.REDIRFS_NATIVE_BUILD
  t.teardown(() => { if (before === undefined) delete process.env.REDIRFS_NATIVE_BUILD; else process.env.REDIRFS_NATIVE_BUILD = before })
  const native = path.resolve(__dirname, '../../native')
  delete process.env.REDIRFS_NATIVE_BUILD
  t.equal(addonPath('redirfs_native'), path.join(native, 'build/Release/redirfs_native.node'))
  process.env.REDIRFS_NATIVE_BUILD = 'build-asan'
  t.equal(addonPath('redirfs_fuse'), path.join(native, 'build-asan/build/Release/redirfs_fuse.node'))
  for (const other of ['../../tmp', '/tmp/x', 'build-asan/../..', 'elsewhere']) {
    process.env.REDIRFS_NATIVE_BUILD = other
    t.throws(() => addonPath('redirfs_native'), /REDIRFS_NATIVE_BUILD names a build directory of native\/ \(build, build-asan\)/, other)
  }
})
