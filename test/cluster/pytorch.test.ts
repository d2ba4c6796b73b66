// Three unmodified PyTorch trainers, DistributedSampler(num_replicas=3),
// each reading its own node's mount of a 3-node cluster for 3 epochs:
// every (sample, label) right and, across the three, every sample exactly
// once per epoch. DistributedSampler pads an epoch to a multiple of the
// world size, so the mount shows a subset that divides evenly (--include).
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { mountCluster } from '../helpers/cluster'

const run = promisify(execFile)
const PYTHON = '/usr/bin/python3'
const READER = path.join(__dirname, '..', 'fidelity', 'torch_reader.py')
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-torch3-'))
const data = path.join(work, 'data')
const table = path.join(work, 'table.json')
const include = path.join(work, 'include.txt')
t.teardown(() => rmSync(work, { recursive: true, force: true }))

function samplesUnder (root: string, relative = ''): string[] {
  return readdirSync(path.join(root, relative)).flatMap(name => {
    const child = relative === '' ? name : `${relative}/${name}`
    return statSync(path.join(root, child)).isDirectory() ? samplesUnder(root, child) : [child]
  })
}

t.before(async () => {
  mkdirSync(data)
  await run(PYTHON, [READER, 'generate', data])
  // 190 samples; leave out ant/s000.png (identity 0:0) so 189 divide among 3 ranks.
  const shown = samplesUnder(data).filter(p => p.endsWith('.png') && p !== 'ant/s000.png')
  writeFileSync(include, shown.join('\n') + '\n')
})

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: 3 nodes, 3 DistributedSampler ranks x 2 workers, 3 epochs: the union is every shown sample once per epoch, labels right`, async t => {
    const cluster = await mountCluster(t, [data, data, data], ['--memory', '110K', '--chunk-size', '4', '--group-depth', '1', '--redirect', mode, '--include', include, '--peer-timeout', '5'])
    t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
    const port = String(30500 + Math.floor(Math.random() * 1000))
    const ranks = await Promise.all([0, 1, 2].map(async rank => {
      const { stdout } = await run(PYTHON, [READER, 'read', cluster.mountpoints[rank], table, '--workers', '2', '--epochs', '3', '--world', '3', '--rank', String(rank), '--port', port], { timeout: 300_000, maxBuffer: 64 * 2 ** 20 })
      return JSON.parse(stdout.trim().split('\n').pop()!) as { samples: number, epochs: { received: string[], wrongLabels: number }[] }
    }))
    const expected = Object.keys(JSON.parse(readFileSync(table, 'utf8'))).filter(id => id !== '0:0').sort()
    t.equal(ranks[0].samples, 189, 'ImageFolder sees the 189 shown samples')
    for (let e = 0; e < 3; e++) {
      t.equal(ranks.reduce((sum, r) => sum + r.epochs[e].wrongLabels, 0), 0, `epoch ${e}: no wrong label on any rank`)
      t.same(ranks.flatMap(r => r.epochs[e].received).sort(), expected, `epoch ${e}: the union is every sample once`)
    }
    const stats = await Promise.all(cluster.mountpoints.map(readStats))
    t.ok(stats.reduce((sum, s) => sum + s.protocol.redirects, 0) > 0, 'redirection happened')
    t.ok(stats.reduce((sum, s) => sum + s.cluster!.remoteRequests, 0) > 0, 'nodes served each other')
  })
}
