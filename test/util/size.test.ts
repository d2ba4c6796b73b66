// Sizes as users write them, and as messages show them: binary units.
import t from 'tap'
import { UsageError } from '../../src/errors'
import { formatSize, parseSize } from '../../src/util/size'

t.test('a size is read in binary units, with or without i and B, any case', async t => {
  t.equal(parseSize('1048576', '--memory'), 1048576)
  t.equal(parseSize('512M', '--memory'), 512 * 2 ** 20)
  t.equal(parseSize('2g', '--memory'), 2 * 2 ** 30)
  t.equal(parseSize('1.5GiB', '--memory'), 1.5 * 2 ** 30)
  t.equal(parseSize(' 300 KB ', '--memory'), 300 * 1024)
  t.equal(parseSize('1T', '--memory'), 2 ** 40)
})

t.test('what is not a size, or no bytes at all, is a one-line usage error naming the option', async t => {
  t.throws(() => parseSize('lots', '--memory'), new UsageError("--memory must be a size like 512M or 2G, got 'lots'"))
  t.throws(() => parseSize('-1G', '--memory'), new UsageError("--memory must be a size like 512M or 2G, got '-1G'"))
  t.throws(() => parseSize('0', '--cache-size'), new UsageError("--cache-size must be more than 0, got '0'"))
  t.throws(() => parseSize('0.0001', '--memory'), new UsageError("--memory must be more than 0, got '0.0001'"), 'less than a byte')
  t.throws(() => parseSize('9999999T', '--memory'), new UsageError("--memory must be less than 8 PiB, got '9999999T'"), 'more bytes than a number counts one by one')
  t.equal(parseSize('8191T', '--memory'), 8191 * 2 ** 40)
})

t.test('a size is shown in the largest unit it reaches, to one decimal', async t => {
  t.equal(formatSize(0), '0 B')
  t.equal(formatSize(1023), '1023 B')
  t.equal(formatSize(1024), '1.0 KiB')
  t.equal(formatSize(1536), '1.5 KiB')
  t.equal(formatSize(300 * 2 ** 20), '300.0 MiB')
  t.equal(formatSize(2 ** 40), '1.0 TiB')
  t.equal(formatSize(2 ** 50), '1024.0 TiB', 'no unit past TiB')
})
