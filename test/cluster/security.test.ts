// The cluster's secrets are refused, as ssh refuses a private key, when
// other users could read them: whoever reads the token reads every sample.
import { chmodSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { emptyDir, forceUnmount, redirfs } from '../helpers/mount'
import { tokenFile } from '../helpers/cluster'

t.test('a token file others can read is refused at mount, with the fix', async t => {
  const source = emptyDir('redirfs-sec-')
  mkdirSync(path.join(source, 'cat'))
  writeFileSync(path.join(source, 'cat', '0.jpg'), 'a cat')
  t.teardown(() => rmSync(source, { recursive: true, force: true }))
  const token = tokenFile()
  chmodSync(token, 0o644)
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const result = await redirfs('mount', source, mountpoint, '--node', '0', '--peers', '127.0.0.1:1,127.0.0.1:2', '--token-file', token, '--chunk-size', '1')
  t.equal(result.code, 1)
  t.equal(result.stderr, `redirfs: --token-file ${token} can be read by other users (mode 644): it is a secret; run: chmod 600 ${token}\n`)
})
