// The pack index format on its own: what is encoded decodes to the same
// header, arrays and paths; a damaged, truncated, older or newer index is
// refused with a one-line error that says what to do.
import { crc32 } from 'node:zlib'
import t from 'tap'
import { UsageError } from '../../src/errors'
import { allocateArrays, CLASS_PACK_VERSION, decodeIndex, encodeIndex, PACK_MAGIC, PACK_VERSION, type PackArrays, type PackHeader } from '../../src/pack/format'

const paths = ['', 'cat', 'cat/a.jpg', 'cat/b.jpg']

/** A consistent index of one chunk of two samples (102 and 103 bytes) at 4096 in segment 0; `change` crafts it before it is encoded. */
function index (change: (arrays: PackArrays, header: PackHeader) => void = () => {}, names = paths): { bytes: Buffer, header: PackHeader } {
  const arrays = allocateArrays(paths.length, 1)
  let end = 0
  let location = 4096
  names.forEach((p, i) => {
    end += Buffer.byteLength(p)
    arrays.pathEnd[i] = end
    arrays.kind[i] = p.endsWith('.jpg') ? 1 : 0
    arrays.mode[i] = p.endsWith('.jpg') ? 0o100644 : 0o40755
    arrays.size[i] = p.endsWith('.jpg') ? 100 + i : 4096
    arrays.mtimeMs[i] = 1.7e12 + i
    arrays.mtimeNsec[i] = 123456789
    arrays.chunk[i] = p.endsWith('.jpg') ? 0 : 0xffffffff
    if (p.endsWith('.jpg')) { arrays.location[i] = location; location += arrays.size[i] }
  })
  arrays.chunkOffset[0] = 4096
  arrays.chunkLength[0] = 205
  arrays.chunkCrc[0] = 0xdeadbeef
  arrays.chunkSegment[0] = 0
  const header: PackHeader = { format: 'redirfs-pack', version: PACK_VERSION, layout: 'class', chunkSize: 2, seed: 5, entries: paths.length, samples: 2, chunks: 1, pathBytes: end, sampleBytes: 205, createdAt: '2026-01-01T00:00:00.000Z', segments: 1, segmentSize: 1 << 20 }
  change(arrays, header)
  return { bytes: encodeIndex(header, arrays, Buffer.from(names.join(''))), header }
}

t.test('an index decodes to the header, arrays and paths it was encoded from', async t => {
  const { bytes, header } = index()
  const decoded = decodeIndex(bytes, 'index.bin')
  t.same(decoded.header, header)
  t.equal(decoded.paths.toString(), paths.join(''))
  t.same([...decoded.arrays.size], [4096, 4096, 102, 103])
  t.same([...decoded.arrays.mtimeNsec], [123456789, 123456789, 123456789, 123456789])
  t.same([...decoded.arrays.chunk], [0xffffffff, 0xffffffff, 0, 0])
  t.same([[...decoded.arrays.chunkOffset], [...decoded.arrays.chunkLength], [...decoded.arrays.chunkCrc]], [[4096], [205], [0xdeadbeef]])
  t.same([...decoded.arrays.kind], [0, 0, 1, 1])
})

t.test('an index decodes from an unaligned copy too (a small read buffer need not start on 8 bytes)', async t => {
  const { bytes } = index()
  const unaligned = Buffer.alloc(bytes.length + 1).subarray(1)
  bytes.copy(unaligned)
  t.same([...decodeIndex(unaligned, 'index.bin').arrays.size], [4096, 4096, 102, 103])
})

t.test('a flipped byte, a truncated index or another magic is refused as not a valid index', async t => {
  const { bytes } = index()
  const flipped = Buffer.from(bytes)
  flipped[PACK_MAGIC.length + 20] ^= 0xff
  t.throws(() => decodeIndex(flipped, 'index.bin'), new UsageError('index.bin is not a valid redirfs pack index: index checksum mismatch (damaged or incomplete)'))
  t.throws(() => decodeIndex(bytes.subarray(0, bytes.length - 9), 'index.bin'), new UsageError('index.bin is not a valid redirfs pack index: index checksum mismatch (damaged or incomplete)'))
  t.throws(() => decodeIndex(Buffer.from('not a pack at all, just text'), 'index.bin'), new UsageError('index.bin is not a valid redirfs pack index: wrong magic'))
})

t.test('an older format asks for a re-pack, saying why; a newer one asks for a newer redirfs', async t => {
  const { bytes } = index()
  const withVersion = (version: number): Buffer => { const copy = Buffer.from(bytes); copy.writeUInt32LE(version, PACK_MAGIC.length); return copy }
  t.throws(() => decodeIndex(withVersion(3), 'p/index.bin'), new UsageError('p/index.bin was written by an older redirfs (pack format 3, which keeps every chunk in one chunks.bin, not in segments); re-pack the dataset: redirfs pack <source> <out>'))
  t.throws(() => decodeIndex(withVersion(1), 'p/index.bin'), /pack format 1, whose redirect groups were top-level directories/)
  t.throws(() => decodeIndex(withVersion(PACK_VERSION + 1), 'p/index.bin'), new UsageError(`p/index.bin is not a valid redirfs pack index: format version ${PACK_VERSION + 1}, this redirfs reads version ${PACK_VERSION}; use a newer redirfs`))
})

/** The one line a crafted index is refused with. */
const refusal = (why: string): UsageError => new UsageError(`index.bin is not a valid redirfs pack index: ${why}`)

t.test('version 4 is read as the class layout and names none; version 5 names its layout, one of the two, and a shared one names no shard', async t => {
  const v4 = index((_, header) => { header.version = CLASS_PACK_VERSION; delete header.layout })
  t.equal(decodeIndex(v4.bytes, 'index.bin').header.layout, undefined, 'a version 4 pack, as every redirfs since segments wrote it')
  t.equal(decodeIndex(index((_, header) => { header.layout = 'shared' }).bytes, 'index.bin').header.layout, 'shared')
  t.throws(() => decodeIndex(index((_, header) => { header.version = CLASS_PACK_VERSION }).bytes, 'index.bin'), refusal('its header\'s layout is "class", which format version 4 does not have'))
  t.throws(() => decodeIndex(index((_, header) => { delete header.layout }).bytes, 'index.bin'), refusal('its header\'s layout is missing, which format version 5 does not have'))
  t.throws(() => decodeIndex(index((_, header) => { (header as unknown as Record<string, unknown>).layout = 'diagonal' }).bytes, 'index.bin'), refusal('its header\'s layout is "diagonal", which format version 5 does not have'))
  t.throws(() => decodeIndex(index((_, header) => { header.layout = 'shared'; header.nodes = 2; header.node = 0 }).bytes, 'index.bin'), refusal('its header names a shard of a cluster, which the shared layout has none of'))
})

t.test('a sample placed before its chunk is refused at load (the crafted index that crashed the daemon)', async t => {
  // The second sample of chunk 0 made to start 8192 bytes before the chunk and to end where it ended: the CRC recomputed.
  const { bytes } = index(a => { a.location[3] = -8192; a.size[3] += 8192 })
  t.throws(() => decodeIndex(bytes, 'index.bin'), refusal('sample "cat/b.jpg" (8295 bytes at -8192) is not inside its chunk 0 (205 bytes at 4096)'))
})

t.test('every inconsistency of a crafted index is refused with one line naming it, before anything is allocated for it', async t => {
  const crafted: Array<[string, (a: PackArrays, h: PackHeader) => void, string]> = [
    ['a trillion entries', (_, h) => { h.entries = 1e12 }, 'its header\'s entries is 1000000000000, not a whole number from 1 to 4294967295'],
    ['more entries than the sections hold', (_, h) => { h.entries = 5; h.samples = 2 }, 'section sizes do not add up'],
    ['a fractional count', (_, h) => { h.samples = 1.5 }, 'its header\'s samples is 1.5, not a whole number'],
    ['an unknown kind', a => { a.kind[2] = 7 }, 'entry "cat/a.jpg" has kind 7 and mode 0100644, which do not go together'],
    ['a sample that is a device', a => { a.mode[2] = 0o020666 }, 'entry "cat/a.jpg" has kind 1 and mode 020666, which do not go together'],
    ['a directory that is a file', a => { a.mode[1] = 0o100755 }, 'entry "cat" has kind 0 and mode 0100755'],
    ['path ends that go back', a => { a.pathEnd[2] = 2 }, 'entry 2\'s path ends at 2, out of order'],
    ['paths out of order', a => { a.pathEnd[1] = 0 }, 'out of order'],
    ['a sample past its chunk\'s end', a => { a.size[3] += 1; a.chunkLength[0] += 0 }, 'is not inside its chunk 0'],
    ['files that do not fill their chunk', a => { a.chunkLength[0] += 4096 }, 'chunk 0 is 4301 bytes, its 2 files hold 205'],
    ['a sample in a chunk that does not exist', a => { a.chunk[3] = 9 }, 'sample "cat/b.jpg" names chunk 9, of 1'],
    ['a chunk off its alignment', a => { a.chunkOffset[0] = 100; a.location[2] = 100; a.location[3] = 202 }, 'chunk 0 is at 100, not on a 4096-byte boundary'],
    ['a chunk in a segment that does not exist', a => { a.chunkSegment[0] = 3 }, 'chunk 0 is in segment 3, of 1'],
    ['a chunk past its segment\'s size', (a, h) => { h.segmentSize = 4096 }, 'chunk 0 ends at 4301, past its segment\'s size 4096'],
    ['more samples than the header says', (_, h) => { h.samples = 1 }, 'it has 2 samples, its header says 1'],
    ['sample bytes the header does not count', (_, h) => { h.sampleBytes = 1 }, 'its samples hold 205 bytes, its header says 1'],
    ['a negative size', a => { a.size[1] = -1 }, 'entry "cat" has size -1'],
    ['times that are not times', a => { a.mtimeNsec[2] = 2e9 }, 'entry "cat/a.jpg" has times that are not times'],
    ['a setuid bit beyond the mode', a => { a.mode[2] = 0o1100644 }, 'entry "cat/a.jpg" has mode 01100644'],
    // Found by the pack index fuzzer (fuzz/pack-index.fuzz.ts): the FUSE server cannot hold this time; a shard's chunk of
    // negative length was taken for another node's (unchecked), and its samples were read wherever the index put them.
    ['a time past what a Date holds', a => { a.mtimeMs[2] = 1e300 }, 'entry "cat/a.jpg" has times that are not times'],
    ['a shard\'s chunk of negative length', (a, h) => { h.nodes = 2; h.node = 0; a.chunkLength[0] = -1 }, 'sample "cat/a.jpg" (102 bytes at 4096) is not inside its chunk 0 (-1 bytes at 4096)']
  ]
  for (const [what, change, why] of crafted) {
    const { bytes } = index(change)
    const err = t.throws(() => decodeIndex(bytes, 'index.bin'), what) as Error
    t.ok(err instanceof UsageError, `${what}: a UsageError`)
    t.match(err.message, why, what)
    t.notOk(err.message.includes('\n'), `${what}: one line`)
  }
})

t.test('a header that is not JSON is refused in one line', async t => {
  const bytes = Buffer.from(index().bytes)
  bytes[PACK_MAGIC.length + 8] = 0x7c // '|' where the header's '{' was; the CRC made anew
  bytes.writeUInt32LE(crc32(bytes.subarray(0, bytes.length - 4)), bytes.length - 4)
  t.throws(() => decodeIndex(bytes, 'index.bin'), refusal('its header is not JSON'))
})

t.test('a path with a component of dots is refused: the tree holds clean relative paths only', async t => {
  const { bytes } = index(() => {}, ['', 'cat', 'cat/..', 'cat/b.jpg'])
  t.throws(() => decodeIndex(bytes, 'index.bin'), refusal('entry "cat/.." is not a clean relative path'))
})

t.test('a path in a message is cut short, never kilobytes of it', async t => {
  const { bytes } = index(a => { a.kind[2] = 9 }, ['', 'cat', `cat/${'x'.repeat(5000)}.jpg`, 'cat/z.jpg'])
  const err = t.throws(() => decodeIndex(bytes, 'index.bin')) as Error
  t.match(err.message, /^index.bin is not a valid redirfs pack index: entry "cat\/x{100,}\.\.\. has kind 9/)
  t.ok(err.message.length < 300, `${err.message.length} characters`)
})
