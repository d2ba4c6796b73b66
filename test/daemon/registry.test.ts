// The runtime directory of a user who is not root: their own, checked, and
// never written through a link someone planted (as the real user nobody).
import { chownSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { CLI_ENV, emptyDir } from '../helpers/mount'
import { cliAsNobody, NOBODY, openToEveryone } from '../helpers/unprivileged'

const source = emptyDir('redirfs-reg-src-')
mkdirSync(path.join(source, 'cat'))
writeFileSync(path.join(source, 'cat', '0.jpg'), 'a cat')
openToEveryone(source)
t.teardown(() => rmSync(source, { recursive: true, force: true }))

/** The CLI as nobody, with a temporary directory of the test's: where its runtime directory goes. */
async function mountAsNobody (tmp: string, mountpoint: string): Promise<{ code: number, stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...CLI_ENV, TMPDIR: tmp }
  delete env.XDG_RUNTIME_DIR
  delete env.REDIRFS_RUNTIME_DIR
  return await cliAsNobody(['mount', source, mountpoint], env)
}

t.test('a runtime directory another user made is refused, with what to do', async t => {
  const tmp = emptyDir('redirfs-reg-tmp-')
  openToEveryone(tmp)
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }))
  mkdirSync(path.join(tmp, `redirfs-${NOBODY}`), { mode: 0o777 }) // root's, as if planted
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  const result = await mountAsNobody(tmp, mountpoint)
  t.equal(result.code, 1)
  t.match(result.stderr, new RegExp(`^redirfs: the runtime directory ${tmp}/redirfs-${NOBODY} belongs to uid 0, not to you \\(uid ${NOBODY}\\): someone else may have made it; remove it, or set REDIRFS_RUNTIME_DIR to a directory only you can write\\n$`))
})

t.test('a link planted where the log goes is not followed', async t => {
  const tmp = emptyDir('redirfs-reg-tmp-')
  openToEveryone(tmp)
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }))
  const own = path.join(tmp, `redirfs-${NOBODY}`)
  mkdirSync(own, { mode: 0o700 })
  chownSync(own, NOBODY, NOBODY)
  const victim = path.join(tmp, 'victim')
  writeFileSync(victim, 'untouched\n')
  chownSync(victim, NOBODY, NOBODY)
  const mountpoint = emptyDir()
  openToEveryone(mountpoint)
  // The log's name is a hash of the mountpoint: plant a link under every name it could have.
  const { createHash } = await import('node:crypto')
  symlinkSync(victim, path.join(own, createHash('sha1').update(mountpoint).digest('hex').slice(0, 16) + '.log'))
  const result = await mountAsNobody(tmp, mountpoint)
  t.equal(result.code, 1)
  t.match(result.stderr, /^redirfs: cannot open the log .*\.log: it is a symbolic link\n$/)
  t.equal(readFileSync(victim, 'utf8'), 'untouched\n')
})
