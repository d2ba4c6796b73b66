// Runs in a cluster (docs/design.md, "Runs"), with real PyTorch ranks
// (DistributedSampler over 3 nodes, one rank a node, named by
// REDIRFS_RUN_ID as a launcher names a job): a whole job killed mid-epoch
// and started again sees exact epochs on every node, in one agreed
// generation; a node whose daemon died mid-epoch is mounted again, rejoins,
// and takes its chunks back at the next run, and the next job's epochs are
// exact cluster-wide.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { mountCluster } from '../helpers/cluster'
import { forceUnmount, redirfs } from '../helpers/mount'
import { PYTHON, READER, type ReaderReport } from '../helpers/torch'

const run = promisify(execFile)
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-cluster-runs-'))
const data = path.join(work, 'data')
const table = path.join(work, 'table.json')
const include = path.join(work, 'include.txt')
t.teardown(() => rmSync(work, { recursive: true, force: true }))
const OPTIONS = ['--memory', '110K', '--chunk-size', '4', '--group-depth', '1', '--include', include, '--peer-timeout', '3']
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

function samplesUnder (root: string, relative = ''): string[] {
  return readdirSync(path.join(root, relative)).flatMap(name => {
    const child = relative === '' ? name : `${relative}/${name}`
    return statSync(path.join(root, child)).isDirectory() ? samplesUnder(root, child) : [child]
  })
}

let expected: string[] = []
t.before(async () => {
  mkdirSync(data)
  await run(PYTHON, [READER, 'generate', data])
  // 190 samples; leave one out so 189 divide among 3 ranks (DistributedSampler pads otherwise).
  writeFileSync(include, samplesUnder(data).filter(p => p.endsWith('.png') && p !== 'ant/s000.png').join('\n') + '\n')
  expected = Object.keys(JSON.parse(readFileSync(table, 'utf8'))).filter(id => id !== '0:0').sort()
})

const rankArgs = (mountpoints: string[], rank: number, port: string, epochs: number): string[] =>
  [READER, 'read', mountpoints[rank], table, '--workers', '2', '--epochs', String(epochs), '--world', '3', '--rank', String(rank), '--port', port]
const freshPort = (): string => String(31500 + Math.floor(Math.random() * 1000))

/** One job: a rank on each node, as its own process group, named `job`. */
function startJob (mountpoints: string[], job: string, epochs: number): ChildProcess[] {
  const port = freshPort()
  return [0, 1, 2].map(rank => spawn(PYTHON, rankArgs(mountpoints, rank, port, epochs), { detached: true, stdio: 'ignore', env: { ...process.env, REDIRFS_RUN_ID: job } }))
}

async function runJob (t: Test, mountpoints: string[], job: string, epochs: number): Promise<void> {
  const port = freshPort()
  const ranks = await Promise.all([0, 1, 2].map(async rank => {
    const { stdout } = await run(PYTHON, rankArgs(mountpoints, rank, port, epochs), { timeout: 300_000, maxBuffer: 64 * 2 ** 20, env: { ...process.env, REDIRFS_RUN_ID: job } })
    return JSON.parse(stdout.trim().split('\n').pop()!) as ReaderReport
  }))
  for (let e = 0; e < epochs; e++) {
    t.equal(ranks.reduce((sum, r) => sum + r.epochs[e].wrongLabels, 0), 0, `${job}, epoch ${e}: no wrong label`)
    t.same(ranks.flatMap(r => r.epochs[e].received).sort(), expected, `${job}, epoch ${e}: every sample exactly once across the nodes`)
  }
}

async function opensOf (mountpoints: string[]): Promise<number> {
  return (await Promise.all(mountpoints.map(readStats))).reduce((sum, s) => sum + s.protocol.opens - s.protocol.remoteOpens + s.cluster!.remoteOpens, 0)
}

async function killJob (jobs: ChildProcess[]): Promise<void> {
  for (const job of jobs) { try { process.kill(-job.pid!, 'SIGKILL') } catch {} }
  await Promise.all(jobs.map(async job => await new Promise(resolve => job.exitCode !== null || job.signalCode !== null ? resolve(undefined) : job.once('exit', resolve))))
}

t.test('a whole job killed mid-epoch and started again: every node starts one agreed generation, and its epochs are exact', async t => {
  const cluster = await mountCluster(t, [data, data, data], OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  const first = startJob(cluster.mountpoints, 'first-job', 1)
  t.teardown(() => killJob(first))
  while (await opensOf(cluster.mountpoints) < expected.length * 0.6) await sleep(20)
  await killJob(first)
  await runJob(t, cluster.mountpoints, 'second-job', 3)
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.same(stats.map(s => s.cluster!.generation), [0, 1, 2].map(() => ({ number: 2, key: 'REDIRFS_RUN_ID second-job of uid 0' })), 'one agreed generation per job')
})

t.test('a node whose daemon died mid-epoch is mounted again: it rejoins, and the next job is exact cluster-wide', async t => {
  const cluster = await mountCluster(t, [data, data, data], OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  const pids = await cluster.pids()
  const first = startJob(cluster.mountpoints, 'before-the-death', 1)
  t.teardown(() => killJob(first))
  while (await opensOf(cluster.mountpoints) < expected.length / 3) await sleep(20)
  // The node dies, and with it its rank: the job fails, as a distributed job does.
  process.kill(pids[2], 'SIGKILL')
  await killJob(first)
  await forceUnmount(cluster.mountpoints[2])
  const again = await redirfs('mount', data, cluster.mountpoints[2], '--node', '2', '--peers', cluster.peers, '--token-file', cluster.token, '--peer-wait', '30', ...OPTIONS)
  t.equal(again.code, 0, again.stderr)
  const back = await readStats(cluster.mountpoints[0])
  t.equal(back.cluster!.peers[2].state, 'rejoining', 'node 0 takes node 2 back, not yet owning its chunks')
  t.equal(back.cluster!.peersRejoined, 1)
  t.equal((await readStats(cluster.mountpoints[2])).cluster!.peers[2].state, 'rejoining', 'node 2 knows it')

  await runJob(t, cluster.mountpoints, 'after-the-rejoin', 3)
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.same(stats.map(s => s.cluster!.peers.map(p => p.state)), [['self', 'alive', 'alive'], ['alive', 'self', 'alive'], ['alive', 'alive', 'self']], 'every node owns its chunks again')
  t.ok(stats[2].protocol.opens - stats[2].protocol.remoteOpens > 0, 'node 2 served opens of its own chunks')
  t.same(new Set(stats.map(s => s.cluster!.generation.key)), new Set(['REDIRFS_RUN_ID after-the-rejoin of uid 0']))
})
