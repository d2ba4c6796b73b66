// How errors become the errno a FUSE operation answers with (src/fs/errno.ts).
import { constants } from 'node:os'
import t from 'tap'
import { FsError, UsageError } from '../../src/errors'
import { errno, errnoOf } from '../../src/fs/errno'

t.test('an FsError answers with its own errno', async t => {
  t.equal(errnoOf(new FsError('EROFS', 'read-only')), -constants.errno.EROFS)
  t.equal(errnoOf(new FsError('ENOENT', 'no such file')), -constants.errno.ENOENT)
})

t.test("a Node or native error answers with its code's errno", async t => {
  t.equal(errnoOf(Object.assign(new Error('x'), { code: 'ENOTDIR' })), -constants.errno.ENOTDIR)
})

t.test('anything else, a usage error included, answers EIO', async t => {
  t.equal(errnoOf(new UsageError('--memory must be a size')), errno('EIO'))
  t.equal(errnoOf(new Error('a bug')), errno('EIO'))
  t.equal(errnoOf(Object.assign(new Error('x'), { code: 'ERR_NOT_AN_ERRNO' })), errno('EIO'))
  t.equal(errnoOf(undefined), errno('EIO'))
})

t.test('an FsError keeps the error it came from', async t => {
  const cause = Object.assign(new Error('pread: Input/output error'), { code: 'EIO' })
  t.equal(new FsError('EIO', 'cannot read the data for a/b.jpg', { cause }).cause, cause)
})
