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
