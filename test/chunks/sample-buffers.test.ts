import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { native } from '../../src/chunks/native'
import { capacityFor, SampleBuffers } from '../../src/chunks/sample-buffers'
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

t.test('a buffer given back twice is kept once: two later files never share it', async t => {
  const buffers = new SampleBuffers()
  const a = buffers.take(1000)
  buffers.give(a)
  buffers.give(a.subarray(0, 10))
  const x = buffers.take(1000)
  const y = buffers.take(1000)
  t.not(x.buffer, y.buffer)
})

t.test('buffers in use and kept stay within the limit: past it, given-back buffers are let go', async t => {
  const buffers = new SampleBuffers()
  buffers.limitBytes = 3 * capacityFor(100_000)
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
