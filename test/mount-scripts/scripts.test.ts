// The cluster launch scripts, with real mounts on loopback: redirfs-cluster
// over a stand-in for ssh (it runs the command here), and redirfs-slurm
// with the SLURM_* variables a job sets and a stand-in scontrol that lists
// three loopback addresses (so every node listens on the same port, as on
// real hosts).
import { execFile, spawn } from 'node:child_process'
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { freePorts, readClusterEpoch, tokenFile } from '../helpers/cluster'
import { classOf, generateDataset } from '../helpers/dataset'
import { CLI, CLI_ENV, emptyDir, forceUnmount, isMounted } from '../helpers/mount'

const run = promisify(execFile)
const SCRIPTS = path.resolve(__dirname, '../../mount-scripts')
const dataset = generateDataset(8)
const tools = mkdtempSync(path.join(os.tmpdir(), 'redirfs-tools-'))
t.teardown(() => { rmSync(dataset.root, { recursive: true, force: true }); rmSync(tools, { recursive: true, force: true }) })

const fakeSsh = path.join(tools, 'ssh')
writeFileSync(fakeSsh, '#!/bin/sh\n# ssh <host> <command>: run the command here\nshift\nexec bash -c "$1"\n')
writeFileSync(path.join(tools, 'scontrol'), '#!/bin/sh\n# scontrol show hostnames <list>\nprintf "127.0.0.1\\n127.0.0.2\\n127.0.0.3\\n"\n')
chmodSync(fakeSsh, 0o755)
chmodSync(path.join(tools, 'scontrol'), 0o755)
const ENV = { ...CLI_ENV, REDIRFS: CLI, REDIRFS_SSH: fakeSsh, PATH: `${tools}:${process.env.PATH}` }
const OPTIONS = ['--memory', '120K', '--chunk-size', '4', '--group-depth', '1', '--peer-wait', '20']

/**
 * Runs `attempt` on ports found free, again on fresh ones (three tries at
 * most) when a node found its port taken in between: the nodes must know
 * each other's ports before any of them binds (see mountCluster).
 */
async function onFreePorts<R extends { output: string }> (count: number, attempt: (ports: number[]) => Promise<R>, undo: () => Promise<void>): Promise<R> {
  for (let tries = 1; ; tries++) {
    const result = await attempt(await freePorts(count))
    if (tries === 3 || !/cannot listen on .*the port is in use/.test(result.output)) return result
    await undo()
  }
}

function checkUnion (t: Test, reads: { opened: string, content: string }[]): void {
  const served = reads.map(r => dataset.byContent.get(r.content)!)
  t.equal(reads.filter((r, i) => served[i] === undefined || classOf(served[i]) !== classOf(r.opened)).length, 0, 'no wrong label')
  t.same([...served].sort(), dataset.samples, 'every sample exactly once across the nodes')
}

t.test('redirfs-cluster up / stats / down from a hostfile', async t => {
  const hostfile = path.join(tools, 'hosts')
  // One host plays three: `{node}` gives each node its own mountpoint.
  const parent = emptyDir('redirfs-scripts-')
  const mountpoint = path.join(parent, 'n{node}')
  const mountpoints = [0, 1, 2].map(i => path.join(parent, `n${i}`))
  for (const m of mountpoints) mkdirSync(m)
  const unmountAll = async (): Promise<void> => { for (const m of mountpoints) await forceUnmount(m) }
  t.teardown(unmountAll)
  const token = tokenFile()

  const up = await onFreePorts(3, async ports => {
    writeFileSync(hostfile, `# node per line: ssh host, peer address\nnode-a 127.0.0.1:${ports[0]}\nnode-b 127.0.0.1:${ports[1]}   # a comment\n\nnode-c 127.0.0.1:${ports[2]}\n`)
    const done = await run(path.join(SCRIPTS, 'redirfs-cluster'), ['up', hostfile, dataset.root, mountpoint, '--token-file', token, ...OPTIONS], { env: ENV })
      .catch((err: { code: number, stdout: string, stderr: string }) => err)
    return { ...done, output: done.stdout + done.stderr }
  }, unmountAll)
  t.equal((up as { code?: number }).code, undefined, `up succeeded: ${up.output}`)
  t.match(up.stdout, /node 0 \(node-a\): redirfs: mounted/)
  t.ok(mountpoints.every(isMounted), 'every node mounted')
  const { reads, errors } = await readClusterEpoch(mountpoints, dataset.samples, 5)
  t.same(errors, [])
  checkUnion(t, reads)
  const stats = await run(path.join(SCRIPTS, 'redirfs-cluster'), ['stats', hostfile, mountpoint], { env: ENV })
  t.match(stats.stdout, /== node 2 \(node-c\)\n/)
  const down = await run(path.join(SCRIPTS, 'redirfs-cluster'), ['down', hostfile, mountpoint], { env: ENV })
  t.equal(down.stderr, '')
  t.notOk(mountpoints.some(isMounted), 'every node unmounted')
})

t.test('redirfs-cluster up fails as a whole when one node fails, and leaves nothing mounted', async t => {
  const ports = await freePorts(2)
  const hostfile = path.join(tools, 'hosts-bad')
  writeFileSync(hostfile, `a 127.0.0.1:${ports[0]}\nb 127.0.0.1:${ports[1]}\n`)
  const mountpoint = emptyDir('redirfs-scripts-')
  t.teardown(() => forceUnmount(mountpoint))
  const up = await run(path.join(SCRIPTS, 'redirfs-cluster'), ['up', hostfile, '/nonexistent/data', mountpoint, '--token-file', tokenFile(), ...OPTIONS], { env: ENV }).catch((err: { code: number, stderr: string }) => err)
  t.equal((up as { code: number }).code, 1)
  t.match((up as { stderr: string }).stderr, /FAILED: redirfs: source \/nonexistent\/data does not exist/)
  t.notOk(isMounted(mountpoint))
  const noHosts = await run(path.join(SCRIPTS, 'redirfs-cluster'), ['up', path.join(tools, 'missing'), dataset.root, mountpoint], { env: ENV }).catch((err: { code: number, stderr: string }) => err)
  t.match((noHosts as { stderr: string }).stderr, /cannot read hostfile/)
})

t.test('redirfs-slurm: node id and peers from the job; three tasks mount a working cluster', async t => {
  const token = tokenFile()
  const job = { ...ENV, SLURM_JOB_NODELIST: 'gpu[01-03]', REDIRFS_PORT: '7373' }
  const dry = await run(path.join(SCRIPTS, 'redirfs-slurm'), ['up', dataset.root, '/mnt/train', '--token-file', token], { env: { ...job, SLURM_NODEID: '1', REDIRFS_DRY_RUN: '1' } })
  t.match(dry.stdout, /--node 1 --peers 127\.0\.0\.1:7373,127\.0\.0\.2:7373,127\.0\.0\.3:7373 --token-file/)
  const outside = await run(path.join(SCRIPTS, 'redirfs-slurm'), ['up', dataset.root, '/mnt/train'], { env: ENV }).catch((err: { stderr: string }) => err)
  t.match((outside as { stderr: string }).stderr, /SLURM_NODEID is not set: run this with srun inside a job/)

  const mountpoints = [0, 1, 2].map(() => emptyDir('redirfs-slurm-'))
  const unmountAll = async (): Promise<void> => { for (const m of mountpoints) await forceUnmount(m) }
  t.teardown(unmountAll)
  const { tasks, output } = await onFreePorts(1, async ([port]) => {
    const ran = await Promise.all(mountpoints.map(async (mountpoint, node) => await new Promise<{ code: number | null, stderr: string }>(resolve => {
      const child = spawn(path.join(SCRIPTS, 'redirfs-slurm'), ['up', dataset.root, mountpoint, '--token-file', token, ...OPTIONS],
        { env: { ...job, REDIRFS_PORT: String(port), SLURM_NODEID: String(node) }, stdio: ['ignore', 'ignore', 'pipe'] })
      let stderr = ''
      child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
      child.on('close', code => resolve({ code, stderr }))
    })))
    return { tasks: ran.map(r => r.code), output: ran.map(r => r.stderr).join('') }
  }, unmountAll)
  t.same(tasks, [0, 0, 0], `every task mounted ${output}`)
  const { reads, errors } = await readClusterEpoch(mountpoints, dataset.samples, 6)
  t.same(errors, [])
  checkUnion(t, reads)
  for (const mountpoint of mountpoints) await run(path.join(SCRIPTS, 'redirfs-slurm'), ['down', mountpoint], { env: ENV })
  t.notOk(mountpoints.some(isMounted))
})
