// What a user reads when the system says no: one line that names what was
// being done, to what, and why, never "unexpected error: E..." or a stack
// trace; figures are rounded as people write them.
import { execFile } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { CLI_ENV, emptyDir, forceUnmount, redirfs, redirfsWith, RUNTIME_DIR } from '../helpers/mount'

const run = promisify(execFile)

const source = emptyDir('redirfs-msg-src-')
mkdirSync(path.join(source, 'cat'))
for (let i = 0; i < 3; i++) writeFileSync(path.join(source, 'cat', `${i}.jpg`), Buffer.alloc(100_000 + i * 7, i))
t.teardown(() => rmSync(source, { recursive: true, force: true }))

/** A small tmpfs of the test's own, unmounted in teardown. */
async function tmpfs (t: Test, options: string): Promise<string> {
  const dir = emptyDir('redirfs-msg-fs-')
  await run('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir])
  t.teardown(async () => { await run('umount', [dir]).catch(() => {}) })
  return dir
}

function oneLine (t: Test, stderr: string): void {
  t.equal(stderr.split('\n').length, 2, 'one line')
  t.notMatch(stderr, /unexpected error|\n\s+at /)
}

t.test('packing onto a read-only filesystem', async t => {
  const ro = await tmpfs(t, 'size=64k,ro')
  const result = await redirfs('pack', source, path.join(ro, 'pack'))
  t.equal(result.code, 1)
  t.equal(result.stderr, `redirfs: cannot write the pack ${ro}/pack: a read-only filesystem (EROFS)\n`)
})

t.test('packing onto a filesystem that fills up leaves nothing behind', async t => {
  const full = await tmpfs(t, 'size=128k')
  const result = await redirfs('pack', source, path.join(full, 'pack'))
  t.equal(result.code, 1)
  t.equal(result.stderr, `redirfs: cannot write the pack ${full}/pack: no space left on the device (ENOSPC); nothing was left behind\n`)
  const { stdout } = await run('ls', ['-A', full])
  t.equal(stdout, '')
})

t.test('verify of a file that is not a pack', async t => {
  const result = await redirfs('verify', path.join(source, 'cat', '0.jpg'))
  t.equal(result.stderr, `redirfs: ${source}/cat/0.jpg is not a redirfs pack (a pack is a directory)\n`)
  oneLine(t, result.stderr)
})

t.test('a pack whose index is not one is not mounted as a plain directory', async t => {
  const damaged = emptyDir('redirfs-msg-pack-')
  writeFileSync(path.join(damaged, 'index.bin'), 'not an index')
  writeFileSync(path.join(damaged, 'chunks.bin'), '')
  t.teardown(() => rmSync(damaged, { recursive: true, force: true }))
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const result = await redirfs('mount', damaged, mountpoint)
  t.equal(result.stderr, `redirfs: ${damaged} has a pack's files, but its index.bin is not a redirfs pack index: check it with redirfs verify ${damaged}, or pack the dataset again\n`)
})

t.test('a system error with nothing more said is still one line naming the operation', async t => {
  const result = await redirfs('pack', source, '/proc/not-here/pack')
  t.equal(result.code, 1)
  oneLine(t, result.stderr)
  t.match(result.stderr, /^redirfs: (cannot write the pack \/proc\/not-here\/pack|the directory of \/proc\/not-here\/pack does not exist)/)
})

t.test('figures are rounded: a mean file size in whole bytes', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const result = await redirfs('mount', source, mountpoint, '--memory', '1K', '--redirect', 'strict')
  t.match(result.stderr, /, mean 97\.7 KiB each\)/)
  t.notMatch(result.stderr, /\d\.\d{3,}/, 'no long fractions')
})

t.test('a path with a line break or a terminal escape in it is named on one line, written out', async t => {
  const result = await redirfs('stats', '/nonexistent/a\nb\u001b[2J')
  t.equal(result.code, 1)
  oneLine(t, result.stderr)
  t.equal(result.stderr, 'redirfs: /nonexistent/a\\u000ab\\u001b[2J is not a redirfs mount\n')
})

t.test('a user and password in an S3 endpoint are refused, never printed or logged', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const env = { ...CLI_ENV, AWS_ACCESS_KEY_ID: 'test', AWS_SECRET_ACCESS_KEY: 'test', AWS_REGION: 'us-east-1' }
  for (const args of [['mount', 's3://bucket/data', mountpoint], ['pack', source, 's3://bucket/out'], ['verify', 's3://bucket/out']]) {
    const result = await redirfsWith(env, ...args, '--s3-endpoint', 'http://alice:s3cret@127.0.0.1:1', '--s3-timeout', '1')
    t.equal(result.code, 1, args[0])
    t.equal(result.stderr, 'redirfs: --s3-endpoint must not hold a user name or password (user:password@host): give S3 credentials by AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY\n', `${args[0]}: refused in one line`)
  }
  // The endpoint from the environment is named without them.
  const fromEnvironment = await redirfsWith({ ...env, AWS_ENDPOINT_URL: 'http://alice:s3cret@127.0.0.1:1' }, 'verify', 's3://bucket/out', '--s3-timeout', '1')
  t.equal(fromEnvironment.code, 1)
  t.match(fromEnvironment.stderr, /^redirfs: cannot reach the S3 endpoint http:\/\/127\.0\.0\.1:1 \(/)
  const logs = readdirSync(RUNTIME_DIR).filter(name => name.includes('.log')).map(name => readFileSync(path.join(RUNTIME_DIR, name), 'utf8'))
  t.notMatch(logs.join('') + fromEnvironment.stderr, /s3cret/, 'the password is in no log and no message')
})
