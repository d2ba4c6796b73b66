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
import { emptyDir, forceUnmount, isAlive, isMounted, waitUntil } from '../helpers/mount'
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
  return await waitUntil(() => !isAlive(pid))
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
  t.match(failed?.stderr, /^redirfs: -o bogus_option=…: redirfs mount has no such option \(names are those of redirfs mount --help, underscores for dashes\)\n$/)
  t.notOk(isMounted(mountpoint))
})

/** The samples of the generated dataset that `extensions` take for samples. */
const samplesWith = (extensions: string[]): number => dataset.samples.filter(s => extensions.includes(path.extname(s).slice(1).toLowerCase())).length

t.test('a value with commas is given in double quotes, from the command line and from an fstab line', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  await run('mount', ['-t', 'fuse.redirfs', dataset.root, mountpoint, '-o', 'memory=300K,extensions="jpg,png",chunk_size=4'])
  t.equal((await readStats(mountpoint)).layout.samples, samplesWith(['jpg', 'png']), 'both extensions, and the options after them')
  await run('umount', [mountpoint])
  const fstab = path.join(emptyDir('redirfs-fstab-'), 'fstab')
  writeFileSync(fstab, `${dataset.root.replace(/ /g, '\\040')} ${mountpoint} fuse.redirfs memory=300K,extensions="png,jpeg",chunk_size=4,noauto 0 0\n`)
  await run('mount', ['--fstab', fstab, mountpoint])
  t.equal((await readStats(mountpoint)).layout.samples, samplesWith(['png', 'jpeg']))
  await run('umount', [mountpoint])
})

t.test('an option list cannot smuggle in flags or arguments: every name must be one of redirfs mount\'s', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  for (const [options, message] of [
    ['=x', /^redirfs: -o =…: redirfs mount has no such option/],
    ['memory=300K,--', /^redirfs: -o --: redirfs mount has no such option/],
    ['memory=300K,-V', /^redirfs: -o -V: redirfs mount has no such option/],
    ['foreground', /^redirfs: -o foreground: a mount by mount\(8\) runs in the background/]
  ] as const) {
    // The helper as mount(8) runs it (mount(8) itself refuses some of these lists before it does).
    const failed = await run(HELPER, [dataset.root, mountpoint, '-o', options]).then(() => undefined, (err: { stderr: string }) => err)
    t.match(failed?.stderr, message, options)
    t.notOk(isMounted(mountpoint), `${options}: nothing mounted`)
  }
})

t.test('a source that begins with a dash is a path, not an option', async t => {
  const parent = emptyDir('redirfs-dash-')
  await fs.cp(dataset.root, path.join(parent, '-V'), { recursive: true })
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  await run(HELPER, ['-V', mountpoint], { cwd: parent })
  const stats = await readStats(mountpoint)
  t.equal(stats.dataset, path.join(parent, '-V'))
  t.equal(stats.layout.samples, dataset.samples.length)
})
