// A mount under a memory cgroup (a container's, a Slurm job's): a --memory
// that cannot fit is refused with the numbers, and a daemon the kernel's
// OOM killer takes down is named as such by `stats`, `umount` and its log.
import { execFile } from 'node:child_process'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { memoryCgroup } from '../helpers/cgroup'
import { CLI, CLI_ENV, emptyDir, forceUnmount, isAlive, isMounted, redirfs, waitUntil } from '../helpers/mount'
import { largeSampleTree, MiB } from '../helpers/memory'
import { readEpoch } from '../helpers/readers'

const run = promisify(execFile)
const { root, samples } = largeSampleTree('redirfs-oom-')
t.teardown(() => { rmSync(root, { recursive: true, force: true }) })

async function mountIn (cgroup: ReturnType<typeof memoryCgroup>, mountpoint: string, ...options: string[]): Promise<{ code: number, stdout: string, stderr: string }> {
  const [command, ...args] = cgroup.wrap([process.execPath, CLI, 'mount', root, mountpoint, ...options])
  try {
    const { stdout, stderr } = await run(command, args, { env: CLI_ENV, timeout: 60_000 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number, stdout: string, stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}

t.test('a --memory that does not fit under the cgroup limit is refused, with the numbers', async t => {
  const cgroup = memoryCgroup(t, `redirfs-test-limit-${process.pid}`)
  cgroup.setLimit(256 * MiB)
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const result = await mountIn(cgroup, mountpoint, '--memory', '1G')
  t.equal(result.code, 1)
  t.match(result.stderr, new RegExp(`^redirfs: --memory 1\\.0 GiB plus the daemon's own 160\\.4 MiB for this tree come to 1\\.2 GiB, more than the memory limit of 256\\.0 MiB this mount runs under \\(cgroup ${cgroup.dir}\\): the kernel would kill the daemon mid-epoch; use --memory 95\\.6 MiB or less, or raise the limit\\n$`))
  t.notOk(isMounted(mountpoint))
})

t.test('a daemon killed by the OOM killer mid-epoch: stats, umount and the log say so', async t => {
  const cgroup = memoryCgroup(t, `redirfs-test-oom-${process.pid}`)
  cgroup.setLimit(1024 * MiB)
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const mounted = await mountIn(cgroup, mountpoint, '--memory', '16M', '--chunk-size', '8', '--redirect', 'pool')
  t.equal(mounted.code, 0, mounted.stderr)
  const { pid } = await readStats(mountpoint)
  // Now squeeze the group to what the daemon holds, and make it load samples.
  cgroup.setLimit(cgroup.usage() + 2 * MiB)
  await readEpoch(mountpoint, samples, 1).catch(() => {})
  await waitUntil(() => !isAlive(pid))
  t.notOk(isAlive(pid), 'the kernel killed the daemon')
  const stats = await redirfs('stats', mountpoint)
  t.equal(stats.code, 1)
  t.match(stats.stderr, new RegExp(`^redirfs: the daemon of ${mountpoint} \\(pid ${pid}\\) was probably killed by the kernel's OOM killer \\(\\d+ kills? in its memory cgroup ${cgroup.dir}, limit [\\d.]+ MiB, since the mount\\); give the job more memory or the mount a smaller --memory; its log: (\\S+); run: redirfs umount --force ${mountpoint}\\n$`))
  const log = stats.stderr.match(/its log: (\S+);/)![1]
  t.match(readFileSync(log, 'utf8'), /probably killed by the kernel's OOM killer/, 'the log says it too')
  const umount = await redirfs('umount', mountpoint)
  t.equal(umount.code, 0, umount.stderr)
  t.match(umount.stderr, /^redirfs: unmounted; the daemon .* was probably killed by the kernel's OOM killer/)
  t.notOk(isMounted(mountpoint))
  void path
})

t.test('a daemon moved into a memory cgroup after it mounted, then killed by its OOM killer: stats says so', async t => {
  const cgroup = memoryCgroup(t, `redirfs-test-moved-${process.pid}`)
  cgroup.setLimit(1024 * MiB)
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const mounted = await redirfs('mount', root, mountpoint, '--memory', '16M', '--chunk-size', '8', '--redirect', 'pool')
  t.equal(mounted.code, 0, mounted.stderr)
  const { pid } = await readStats(mountpoint)
  writeFileSync(path.join(cgroup.dir, 'cgroup.procs'), String(pid))
  for (let tries = 0; (await readStats(mountpoint)).memory.cgroup !== cgroup.dir; tries++) {
    if (tries > 300) throw new Error('the daemon never noticed its new cgroup')
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  cgroup.setLimit(cgroup.usage() + 2 * MiB)
  await readEpoch(mountpoint, samples, 1).catch(() => {})
  await waitUntil(() => !isAlive(pid))
  t.notOk(isAlive(pid), 'the kernel killed the daemon')
  const stats = await redirfs('stats', mountpoint)
  t.match(stats.stderr, new RegExp(`was probably killed by the kernel's OOM killer \\(\\d+ kills? in its memory cgroup ${cgroup.dir},`))
})
