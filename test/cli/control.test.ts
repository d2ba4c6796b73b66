// Controlling a mount: `stats` and `reset` act only on a real redirfs
// mount, through the mount itself; nothing a user can plant names a
// process for them, and only the user who mounted (or root) may reset.
import { spawn } from 'node:child_process'
import { mkdirSync, promises as fs, writeFileSync } from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset } from '../helpers/dataset'
import { againstFakeMount } from '../helpers/fake-mount'
import { emptyDir, isAlive, mount, redirfs } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'
import { openToEveryone, redirfsAsNobody } from '../helpers/unprivileged'

const dataset = generateDataset(7)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

t.test('a directory dressed up as a mount is refused, and the process its stats name is left alone', async t => {
  const sleeper = spawn('sleep', ['300'], { stdio: 'ignore' })
  t.teardown(() => { sleeper.kill('SIGKILL') })
  const fake = emptyDir('redirfs-fake-')
  mkdirSync(path.join(fake, '.redirfs'))
  writeFileSync(path.join(fake, '.redirfs', 'stats'), JSON.stringify({ pid: sleeper.pid, protocol: { resets: 0 } }))
  writeFileSync(path.join(fake, '.redirfs', 'reset'), JSON.stringify({ resets: 1, droppedFiles: 0 }))
  for (const command of ['reset', 'stats']) {
    const result = await redirfs(command, fake)
    t.equal(result.code, 1, command)
    t.equal(result.stderr, `redirfs: ${fake} is not a redirfs mount\n`, `${command}: says why, in one line`)
  }
  t.ok(isAlive(sleeper.pid!), 'the named process still runs')
})

t.test('reset starts a fresh epoch through the mount; only the user who mounted, or root, may', async t => {
  const mountpoint = emptyDir()
  openToEveryone(dataset.root, mountpoint)
  await mount(t, dataset.root, mountpoint, '--allow-other', '--memory', '300K', '--chunk-size', '4')
  await readEpoch(mountpoint, dataset.samples.slice(0, 40), 1)
  const before = await readStats(mountpoint)
  const denied = await redirfsAsNobody('reset', mountpoint)
  t.equal(denied.code, 1)
  t.equal(denied.stderr, `redirfs: only the user who mounted ${mountpoint}, or root, may reset it\n`)
  t.equal((await readStats(mountpoint)).protocol.resets, before.protocol.resets, 'nothing was reset')
  const seen = await redirfsAsNobody('stats', mountpoint)
  t.equal(seen.code, 0, 'anyone who may see the mount may read its stats')
  const reset = await redirfs('reset', mountpoint)
  t.equal(reset.code, 0, reset.stderr)
  t.match(reset.stdout, /starts a fresh epoch \(\d+ samples waiting in memory dropped\)/)
  const after = await readStats(mountpoint)
  t.equal(after.protocol.resets, before.protocol.resets + 1)
  t.equal(after.protocol.residentBytes, 0, 'nothing of the old epoch waits in memory')
})

/** What a fake answers: every key `stats` and `reset` look for, none of the shape. */
const LOOKALIKE = JSON.stringify({ dataset: 'x', mountpoint: 'x', mode: 'x', layout: {}, memory: {}, protocol: {}, source: {}, fs: {}, resets: 1, droppedFiles: 0 })

t.test('a FUSE mount another user made that calls itself redirfs is not taken for one', async t => {
  const fake = await againstFakeMount('nobody', LOOKALIKE, ['stats', 'reset'])
  t.match(fake.mountLine, /fuse redirfs .*user_id=65534/, 'the table shows a mount named redirfs, made by nobody')
  for (const [i, command] of ['stats', 'reset'].entries()) {
    t.equal(fake.results[i]?.code, 1, command)
    t.match(fake.results[i]?.stderr, /^redirfs: \S+ is a FUSE mount of uid 65534: redirfs trusts only your own mounts and root's \(run this as uid 65534\)\n$/, `${command}: says whose it is, in one line`)
  }
})

t.test('a mount that never answers its control files is one line, not a hang', async t => {
  const fake = await againstFakeMount(0, 'hang', ['stats', 'reset'])
  for (const [i, command] of ['stats', 'reset'].entries()) {
    t.equal(fake.results[i]?.code, 1, `${command}: exits 1, before the test's bound of 60 s`)
    t.match(fake.results[i]?.stderr, new RegExp(`^redirfs: \\S+ did not answer ${command} within 5 s: its daemon is stuck or overloaded; see its log, or unmount it \\(redirfs umount --force \\S+\\)\\n$`))
  }
})

t.test('stats answered in a shape this version does not write is one line', async t => {
  const fake = await againstFakeMount(0, LOOKALIKE, ['stats'])
  t.equal(fake.results[0]?.code, 1)
  t.match(fake.results[0]?.stderr, /^redirfs: \S+ answered stats that redirfs cannot show \(pid is not a number\); is its daemon another version\? remount it, or print them with --json\n$/, 'naming the first field that is not as this version writes it')
})
