// A native build that cannot work says which Debian package is missing,
// before compiling anything (scripts/build-native.sh, run by the set-up).
import { execFile } from 'node:child_process'
import { cpSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'

const run = promisify(execFile)
const SCRIPT = path.resolve(__dirname, '../../scripts/build-native.sh')

/** A copy of native/ to build in, so the project's own addons are never touched. */
function nativeCopy (t: Test): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'redirfs-native-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  cpSync(path.resolve(__dirname, '../../native'), dir, { recursive: true, filter: source => !source.includes('/build') })
  return dir
}

async function build (dir: string, env: NodeJS.ProcessEnv): Promise<{ code: number, stderr: string }> {
  try {
    await run('bash', [SCRIPT, dir], { env: { ...process.env, ...env } })
    return { code: 0, stderr: '' }
  } catch (err) {
    const e = err as { code: number, stderr: string }
    return { code: e.code, stderr: e.stderr }
  }
}

t.test('without libfuse3-dev, the build stops and names it', async t => {
  const result = await build(nativeCopy(t), { PKG_CONFIG_LIBDIR: '/nonexistent', PKG_CONFIG_PATH: '' })
  t.not(result.code, 0)
  t.match(result.stderr, /pkg-config finds no fuse3.*install Debian's libfuse3-dev/)
})

t.test('without a C++ compiler, the build stops and names build-essential', async t => {
  // A PATH with every tool the build uses except g++.
  const bin = mkdtempSync(path.join(os.tmpdir(), 'redirfs-bin-'))
  t.teardown(() => rmSync(bin, { recursive: true, force: true }))
  for (const tool of ['bash', 'node', 'make', 'python3', 'pkg-config', 'dirname', 'readlink']) {
    const found = (await run('bash', ['-c', `command -v ${tool}`])).stdout.trim()
    symlinkSync(found, path.join(bin, tool))
  }
  const result = await build(nativeCopy(t), { PATH: bin })
  t.not(result.code, 0)
  t.match(result.stderr, /no C\+\+ compiler or make.*install Debian's build-essential/)
})
