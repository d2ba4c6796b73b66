// The daemon's file descriptor limit: started with a soft limit below the
// hard one (a login shell's usual 1024), it runs with the hard one, so
// opens through the mount have every descriptor the system allows it.
// Node raises it when it starts (src/daemon/fd-limit.ts); this keeps it so.
import { execFile } from 'node:child_process'
import { promises as fs, readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { generateDataset } from '../helpers/dataset'
import { CLI, CLI_ENV, emptyDir, forceUnmount } from '../helpers/mount'

const run = promisify(execFile)
const dataset = generateDataset(43)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

t.test('the daemon runs with its soft descriptor limit raised to the hard one', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const { stdout } = await run('prlimit', ['--nofile=64:1000', CLI, 'mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4'], { env: CLI_ENV })
  const { pid } = await readStats(mountpoint)
  const limits = /^Max open files\s+(\S+)\s+(\S+)/m.exec(readFileSync(`/proc/${pid}/limits`, 'utf8'))
  t.same(limits?.slice(1), ['1000', '1000'])
  const log = readFileSync(/; log (.*)$/m.exec(stdout)![1], 'utf8').split('\n').filter(Boolean).map(line => JSON.parse(line) as { msg: string, fdLimit?: number })
  t.equal(log.find(line => line.msg === 'mounted')?.fdLimit, 1000, 'and its log says so')
})

t.test('files held open through the mount take half the daemon\'s descriptors at most: the next open fails with EMFILE, and the mount goes on serving', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  await run('prlimit', ['--nofile=200:200', CLI, 'mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4'], { env: CLI_ENV })
  const other = [...dataset.others.keys()][0]
  const held: fs.FileHandle[] = []
  t.teardown(async () => { for (const file of held) await file.close().catch(() => {}) })
  let refusal: NodeJS.ErrnoException | undefined
  for (let i = 0; i < 200 && refusal === undefined; i++) {
    try { held.push(await fs.open(`${mountpoint}/${other}`, 'r')) } catch (err) { refusal = err as NodeJS.ErrnoException }
  }
  t.equal(refusal?.code, 'EMFILE')
  t.equal(held.length, 100, 'half of 200')
  t.same(await held[0].readFile(), dataset.others.get(other), 'a file held open reads')
  t.ok((await fs.readdir(mountpoint)).length > 0, 'the mount lists')
  const stats = await readStats(mountpoint)
  t.ok(stats.pid > 0, 'stats answer')
  await held.pop()!.close()
  const again = await fs.open(`${mountpoint}/${other}`, 'r')
  held.push(again)
  t.same(await again.readFile(), dataset.others.get(other), 'a file closed makes room for another')
})
