import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { ChunkFile, native } from '../../src/chunks/native'
import { SeededRandom } from '../../src/redirect/random'
import { emptyDir } from '../helpers/mount'

const dir = emptyDir('redirfs-native-')
const file = path.join(dir, 'data.bin')
const random = new SeededRandom(1)
const bytes = Buffer.from(Array.from({ length: 3 * 4096 + 1234 }, () => random.below(256)))
writeFileSync(file, bytes)

t.test('an aligned O_DIRECT read returns exactly the bytes of a buffered read, at any offset and length', async t => {
  const chunkFile = ChunkFile.open(file)
  t.teardown(() => chunkFile.close())
  t.equal(chunkFile.direct, true, '/tmp is on a filesystem that allows O_DIRECT here')
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

t.test('readFiles returns each file whole, and an error for each file it cannot read', async t => {
  const other = path.join(dir, 'other.bin')
  writeFileSync(other, 'hello')
  const [a, b, missing] = await native().readFiles([file, other, path.join(dir, 'missing')])
  t.same(a, readFileSync(file))
  t.same(b, Buffer.from('hello'))
  t.type(missing, Error)
  t.match((missing as Error).message, /No such file or directory/)
})
