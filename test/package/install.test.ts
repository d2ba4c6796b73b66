// redirfs as users install it: `npm pack` of this checkout, then `npm
// install -g` of the tarball into a temporary prefix, as a new user would
// (npm 11 runs no install scripts: the package carries its compiled
// JavaScript and its native addons built for linux-x64). The installed
// binary prints its version, mounts, serves and unmounts a small dataset.
import { execFile } from 'node:child_process'
import { promises as fs } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { generateDataset } from '../helpers/dataset'
import { CLI_ENV, emptyDir, forceUnmount, isMounted } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const run = promisify(execFile)
const ROOT = path.resolve(__dirname, '../..')
const dataset = generateDataset(61)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

t.test('the packed tarball installs into a working redirfs, with only what the tool needs', async t => {
  const work = emptyDir('redirfs-install-')
  t.teardown(async () => { await fs.rm(work, { recursive: true, force: true }) })
  // --ignore-scripts: dist/ and the addons are already built by the set-up (prepack would build them again).
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: ROOT, env: CLI_ENV, maxBuffer: 32 * 2 ** 20 })
  const [packed] = JSON.parse(stdout) as Array<{ filename: string, files: Array<{ path: string }> }>
  const files = packed.files.map(f => f.path)
  t.ok(files.includes('dist/cli/main.js'), 'the compiled JavaScript')
  t.ok(files.includes('native/build/Release/redirfs_fuse.node') && files.includes('native/build/Release/redirfs_native.node'), 'the native addons')
  t.ok(files.includes('mount-scripts/mount.fuse.redirfs'), 'the mount helper')
  t.same(files.filter(f => /^(test|bench|src|scripts)\//.test(f)), [], 'no tests, bench, sources or build scripts')

  const prefix = path.join(work, 'prefix')
  await run('npm', ['install', '-g', '--prefix', prefix, '--no-audit', '--no-fund', path.join(work, packed.filename)], { env: CLI_ENV, timeout: 600_000, maxBuffer: 32 * 2 ** 20 })
  const installed = path.join(prefix, 'bin', 'redirfs')
  const version = await run(installed, ['--version'], { env: CLI_ENV })
  t.equal(version.stdout.trim(), JSON.parse(await fs.readFile(path.join(ROOT, 'package.json'), 'utf8')).version)

  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const mounted = await run(installed, ['mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4'], { env: CLI_ENV })
  t.match(mounted.stdout, /^redirfs: mounted /)
  const read = await readEpoch(mountpoint, dataset.samples, 7)
  t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, 'every sample once through the installed redirfs')
  await run(installed, ['umount', mountpoint], { env: CLI_ENV })
  t.notOk(isMounted(mountpoint))
})
