// Mounting the way Linux mounts things: mount(8) with the fuse.redirfs type
// runs mount-scripts/mount.fuse.redirfs, from the command line and from an
// fstab line (a temporary fstab, mount --fstab); umount(8) ends the mount
// and its daemon with it.
import { execFile } from 'node:child_process'
import { existsSync, promises as fs, symlinkSync, unlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset } from '../helpers/dataset'
import { emptyDir, forceUnmount, isAlive, isMounted } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const run = promisify(execFile)
const HELPER = path.resolve(__dirname, '../../mount-scripts/mount.fuse.redirfs')
const INSTALLED = '/sbin/mount.fuse.redirfs'
const dataset = generateDataset(51)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

// Where mount(8) finds the helper; installed for these tests only, unless it already was.
if (!existsSync(INSTALLED)) {
  symlinkSync(HELPER, INSTALLED)
  t.teardown(() => { unlinkSync(INSTALLED) })
}

async function gone (pid: number): Promise<boolean> {
  for (let i = 0; i < 200 && isAlive(pid); i++) await new Promise(resolve => setTimeout(resolve, 50))
  return !isAlive(pid)
}

t.test('mount -t fuse.redirfs with -o options mounts; umount ends the mount and its daemon', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  await run('mount', ['-t', 'fuse.redirfs', dataset.root, mountpoint, '-o', 'memory=300K,chunk_size=4,redirect=pool,noatime'])
  const stats = await readStats(mountpoint)
  t.equal(stats.memory.budgetBytes, 300 * 1024)
  t.equal(stats.chunkSize, 4)
  t.equal(stats.mode, 'pool')
  const read = await readEpoch(mountpoint, dataset.samples, 1)
  t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples)
  await run('umount', [mountpoint])
  t.notOk(isMounted(mountpoint))
  t.ok(await gone(stats.pid), 'the daemon stopped with its mount')
})

t.test('an fstab line mounts it (mount --fstab <file> <mountpoint>)', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const fstab = path.join(emptyDir('redirfs-fstab-'), 'fstab')
  writeFileSync(fstab, `# a test's own fstab\n${dataset.root.replace(/ /g, '\\040')} ${mountpoint} fuse.redirfs memory=300K,chunk_size=4,noauto,nofail,_netdev,x-systemd.automount 0 0\n`)
  await run('mount', ['--fstab', fstab, mountpoint])
  const stats = await readStats(mountpoint)
  t.equal(stats.dataset, dataset.root)
  t.equal(stats.memory.budgetBytes, 300 * 1024)
  await run('umount', [mountpoint])
  t.ok(await gone(stats.pid))
})

t.test('an option redirfs does not know fails the mount, naming it', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const failed = await run('mount', ['-t', 'fuse.redirfs', dataset.root, mountpoint, '-o', 'memory=300K,bogus_option=3']).then(() => undefined, (err: { stderr: string, code: number }) => err)
  t.ok(failed !== undefined, 'mount failed')
  t.match(failed?.stderr, /unknown option '--bogus-option'/)
  t.notOk(isMounted(mountpoint))
})
