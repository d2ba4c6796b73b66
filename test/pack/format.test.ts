// The pack index format on its own: what is encoded decodes to the same
// header, arrays and paths; a damaged, truncated, older or newer index is
// refused with a one-line error that says what to do.
import t from 'tap'
import { UsageError } from '../../src/errors'
import { allocateArrays, decodeIndex, encodeIndex, PACK_MAGIC, PACK_VERSION, type PackHeader } from '../../src/pack/format'

const paths = ['', 'cat', 'cat/a.jpg', 'cat/b.jpg']

function index (): { bytes: Buffer, header: PackHeader } {
  const arrays = allocateArrays(paths.length, 1)
  let end = 0
  paths.forEach((p, i) => {
    end += Buffer.byteLength(p)
    arrays.pathEnd[i] = end
    arrays.kind[i] = p.endsWith('.jpg') ? 1 : 0
    arrays.mode[i] = p.endsWith('.jpg') ? 0o100644 : 0o40755
    arrays.size[i] = p.endsWith('.jpg') ? 100 + i : 4096
    arrays.mtimeMs[i] = 1.7e12 + i
    arrays.mtimeNsec[i] = 123456789
    arrays.chunk[i] = p.endsWith('.jpg') ? 0 : 0xffffffff
  })
  arrays.chunkOffset[0] = 4096
  arrays.chunkLength[0] = 8192
  arrays.chunkCrc[0] = 0xdeadbeef
  arrays.chunkSegment[0] = 0
  const header: PackHeader = { format: 'redirfs-pack', version: PACK_VERSION, chunkSize: 2, seed: 5, entries: paths.length, samples: 2, chunks: 1, pathBytes: end, sampleBytes: 205, createdAt: '2026-01-01T00:00:00.000Z', segments: 1, segmentSize: 1 << 20 }
  return { bytes: encodeIndex(header, arrays, Buffer.from(paths.join(''))), header }
}

t.test('an index decodes to the header, arrays and paths it was encoded from', async t => {
  const { bytes, header } = index()
  const decoded = decodeIndex(bytes, 'index.bin')
  t.same(decoded.header, header)
  t.equal(decoded.paths.toString(), paths.join(''))
  t.same([...decoded.arrays.size], [4096, 4096, 102, 103])
  t.same([...decoded.arrays.mtimeNsec], [123456789, 123456789, 123456789, 123456789])
  t.same([...decoded.arrays.chunk], [0xffffffff, 0xffffffff, 0, 0])
  t.same([[...decoded.arrays.chunkOffset], [...decoded.arrays.chunkLength], [...decoded.arrays.chunkCrc]], [[4096], [8192], [0xdeadbeef]])
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
