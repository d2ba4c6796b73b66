import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { native } from '../../src/chunks/native'
import { ARENA_BYTES, capacityFor, SampleBuffers, SHARED_UP_TO } from '../../src/chunks/sample-buffers'
import { emptyDir } from '../helpers/mount'

t.test('capacities are eighths of a power of two, at most 12.5% over the size', async t => {
  t.equal(capacityFor(100_000), 106_496)
  t.equal(capacityFor(65_536), 65_536)
  t.equal(capacityFor(1), 64)
  for (const size of [65, 1000, 4097, 99_999, 1_234_567]) {
    t.ok(capacityFor(size) >= size && capacityFor(size) <= size * 1.125, `${size} -> ${capacityFor(size)}`)
  }
})

t.test('a buffer given back is lent again for a file of a similar size, and holds exactly the new file\'s bytes', async t => {
  const dir = emptyDir('redirfs-slabs-')
  const first = path.join(dir, 'first.bin')
  const second = path.join(dir, 'second.bin')
  writeFileSync(first, Buffer.alloc(100_000, 0xaa))
  writeFileSync(second, Buffer.alloc(99_000, 0x55))
  const buffers = new SampleBuffers()
  const a = buffers.take(100_001)
  const [readA] = await native().readFiles([first], [a])
  t.same(a.subarray(0, readA as number), readFileSync(first))
  buffers.give(a)
  const b = buffers.take(99_001)
  t.equal(b.buffer, a.buffer, 'the same memory, reused')
  const [readB] = await native().readFiles([second], [b])
  t.same(b.subarray(0, readB as number), readFileSync(second), 'no byte of the first file shows')
})

for (const size of [1000, 100_000]) {
  t.test(`a buffer of ${size} bytes given back twice is kept once: two later files never share its bytes`, async t => {
    const buffers = new SampleBuffers()
    const a = buffers.take(size)
    buffers.give(a)
    buffers.give(a.subarray(0, 10))
    const x = buffers.take(size)
    const y = buffers.take(size)
    t.ok(x.buffer !== y.buffer || x.byteOffset + x.length <= y.byteOffset || y.byteOffset + y.length <= x.byteOffset, 'disjoint bytes')
  })
}

t.test('small files share arenas: each its own slot, a few ArrayBuffers for thousands of files', async t => {
  const buffers = new SampleBuffers()
  const lent = Array.from({ length: 10_000 }, (_, i) => buffers.take(98))
  lent.forEach((bytes, i) => bytes.fill(i % 251))
  const memories = new Set(lent.map(bytes => bytes.buffer))
  t.equal(memories.size, Math.ceil(10_000 / Math.floor(ARENA_BYTES / capacityFor(98))), `${memories.size} arenas`)
  t.ok(lent.every((bytes, i) => bytes.length === 98 && bytes.every(byte => byte === i % 251)), 'no file\'s bytes overwrite another\'s')
  t.equal(buffers.stats().slabBytes, memories.size * ARENA_BYTES)
  t.equal(buffers.stats().arenas, 1, 'only the last arena has room (the others are not listed)')
})

t.test('a small buffer given back is lent again for the next file of its capacity', async t => {
  const buffers = new SampleBuffers()
  const a = buffers.take(100)
  const b = buffers.take(100)
  buffers.give(a)
  const c = buffers.take(99)
  t.equal(c.buffer, a.buffer)
  t.equal(c.byteOffset, a.byteOffset, 'the freed slot')
  t.not(c.byteOffset, b.byteOffset)
  t.equal(capacityFor(SHARED_UP_TO + 1) > SHARED_UP_TO, true)
  t.equal(buffers.take(SHARED_UP_TO + 1).buffer.byteLength, capacityFor(SHARED_UP_TO + 1), 'a larger file gets memory of its own')
})

t.test('past the limit, an arena is let go once all its slots are back, not before', async t => {
  const buffers = new SampleBuffers(ARENA_BYTES)
  const slots = Math.floor(ARENA_BYTES / capacityFor(500))
  const first = Array.from({ length: slots }, () => buffers.take(500))
  const second = Array.from({ length: slots }, () => buffers.take(500))
  t.equal(buffers.stats().slabBytes, 2 * ARENA_BYTES, 'lending is never refused')
  for (const bytes of second.slice(1)) buffers.give(bytes)
  t.equal(buffers.stats().slabBytes, 2 * ARENA_BYTES, 'one slot still lent keeps its arena')
  buffers.give(second[0])
  t.equal(buffers.stats().slabBytes, ARENA_BYTES, 'wholly idle past the limit: let go')
  for (const bytes of first) buffers.give(bytes)
  t.equal(buffers.stats().slabBytes, ARENA_BYTES, 'within the limit: kept for the next files')
  t.equal(buffers.stats().idleBytes, slots * capacityFor(500))
  buffers.take(100_000)
  t.equal(buffers.stats().slabBytes, capacityFor(100_000), 'a large file makes room by letting the idle arena go')
})

t.test('buffers in use and kept stay within the limit: past it, given-back buffers are let go', async t => {
  const buffers = new SampleBuffers(3 * capacityFor(100_000))
  const lent = [1, 2, 3, 4].map(() => buffers.take(100_000))
  t.equal(buffers.stats().slabBytes, 4 * capacityFor(100_000), 'lending is never refused: the budget is the protocol\'s to keep')
  for (const bytes of lent) buffers.give(bytes)
  t.ok(buffers.stats().slabBytes <= buffers.limitBytes, `${buffers.stats().slabBytes} bytes kept`)
  t.equal(buffers.stats().idleBytes, buffers.stats().slabBytes)
  buffers.take(50_000)
  t.ok(buffers.stats().slabBytes <= buffers.limitBytes, 'a new size makes room by letting an idle buffer go')
})

t.test('a Buffer that was not lent is freed when given (its memory\'s only view), never kept', async t => {
  const buffers = new SampleBuffers()
  const own = Buffer.allocUnsafeSlow(4096)
  buffers.give(own)
  t.equal(own.length, 0, 'freed now')
  t.equal(buffers.stats().idleBytes, 0)
})
