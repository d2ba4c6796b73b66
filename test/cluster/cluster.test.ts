// Three real daemons on loopback, each mounting the same generated dataset,
// read as three DistributedSampler ranks would: together they must get
// every sample exactly once per epoch, with the right labels; a wrong token
// or another layout is refused; a node killed mid-epoch is survived (shared
// storage) or costs exactly its samples, as EIO (sharded packs).
import { promises as fs, readFileSync } from 'node:fs'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import t, { type Test } from 'tap'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { readStats } from '../../src/cli/stats-command'
import { parseAddress } from '../../src/cluster/addresses'
import { PeerCallError } from '../../src/cluster/call-error'
import { PeerClient } from '../../src/cluster/peer-client'
import { loadCredentials } from '../../src/cluster/security'
import { cutPhysicalChunks, homeOfChunk } from '../../src/redirect/layout'
import { defaultLogFile } from '../../src/daemon/registry'
import { epochWithKill, freePorts, mountCluster, readClusterEpoch, tokenFile, type NodeRead } from '../helpers/cluster'
import { classOf, generateDataset, splitClassOf } from '../helpers/dataset'
import { emptyDir, forceUnmount, isMounted, redirfs } from '../helpers/mount'
import { changeAttempts } from '../helpers/read-only'

const dataset = generateDataset(6)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
// Each node's memory holds about a sixth of the dataset: most opens are redirected or remote.
const NODE_OPTIONS = ['--memory', '120K', '--chunk-size', '4', '--group-depth', '1', '--peer-timeout', '3']

function checkEpoch (t: Test, reads: NodeRead[], expected: readonly string[], what: string): void {
  const served = reads.map(r => dataset.byContent.get(r.content))
  t.equal(served.filter(s => s === undefined).length, 0, `${what}: every read is a whole sample`)
  t.equal(reads.filter((r, i) => classOf(served[i]!) !== classOf(r.opened)).length, 0, `${what}: no wrong label`)
  t.same([...served].sort(), [...expected].sort(), `${what}: every sample exactly once across the nodes`)
}

const sum = (stats: any[], pick: (s: any) => number): number => stats.reduce((total, s) => total + pick(s), 0)

for (const mode of ['strict', 'pool', 'mix']) {
  t.test(`${mode}: 3 nodes x 4 readers, 3 epochs: the union is the dataset every epoch, labels right`, async t => {
    const cluster = await mountCluster(t, [dataset.root, dataset.root, dataset.root], [...NODE_OPTIONS, '--redirect', mode])
    t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
    for (let epoch = 0; epoch < 3; epoch++) {
      const { reads, errors } = await readClusterEpoch(cluster.mountpoints, dataset.samples, 40 + epoch)
      t.same(errors, [], `epoch ${epoch}: no errors`)
      checkEpoch(t, reads, dataset.samples, `epoch ${epoch}`)
    }
    const stats = await Promise.all(cluster.mountpoints.map(readStats))
    t.ok(sum(stats, s => s.cluster!.remoteRequests) > 0, 'nodes asked each other')
    t.ok(sum(stats, s => s.cluster!.prefetchUsed) > 0, 'prefetched files were used')
    t.ok(sum(stats, s => s.protocol.redirects) > 0, 'redirection happened')
    t.same(stats.map(s => s.cluster!.peers.map((p: any) => p.state)), [['self', 'alive', 'alive'], ['alive', 'self', 'alive'], ['alive', 'alive', 'self']])
  })
}

t.test('3 nodes over a train/val root with the default grouping: every split and class kept apart, the union exact', async t => {
  const splits = generateDataset(8, { splits: true })
  t.teardown(async () => { await fs.rm(splits.root, { recursive: true, force: true }) })
  // The busiest node is home to about two thirds of the ~70 directories; each needs one chunk of 2.
  // Node 1 listens on every interface (its --peers entry stays 127.0.0.1), its data channel on a port it is given; node 2 has a small mirror.
  const [dataPort] = await freePorts(1)
  const cluster = await mountCluster(t, [splits.root, splits.root, splits.root], ['--memory', '250K', '--chunk-size', '2', '--redirect', 'pool', '--peer-timeout', '3'],
    (node, ports) => node === 1 ? ['--listen', `0.0.0.0:${ports[1]}`, '--data-port', String(dataPort)] : node === 2 ? ['--remote-memory', '8K'] : [])
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  for (const [what, attempt] of changeAttempts(cluster.mountpoints[0], splits.samples[0], 'train')) await t.rejects(attempt(), { code: 'EROFS' }, `cluster mount: ${what}`)
  t.match(cluster.results[0].stdout, /samples in \d+ groups \(train\/ant, /)
  for (let epoch = 0; epoch < 2; epoch++) {
    const { reads, errors } = await readClusterEpoch(cluster.mountpoints, splits.samples, 30 + epoch)
    t.same(errors, [], `epoch ${epoch}: no errors`)
    const served = reads.map(r => splits.byContent.get(r.content))
    t.equal(reads.filter((r, i) => served[i] === undefined || splitClassOf(served[i]!) !== splitClassOf(r.opened)).length, 0, `epoch ${epoch}: every sample from the opened split and class`)
    t.same([...served].sort(), splits.samples, `epoch ${epoch}: every sample exactly once across the nodes`)
  }
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.ok(sum(stats, s => s.protocol.redirects) > 0, 'redirection happened')
  t.ok(sum(stats, s => s.cluster!.remoteRequests) > 0, 'nodes asked each other')
  t.equal(stats[1].cluster!.listen, `0.0.0.0:${cluster.peers.split(',')[1].split(':')[1]}`, '--listen: node 1 listens where it was told, and its peers reached it')
  t.equal(stats[1].cluster!.dataPort, dataPort, '--data-port: node 1\'s data channel is where it was told')
  t.ok(stats[0].cluster!.dataPort > 0 && stats[0].cluster!.dataPort !== dataPort, 'without it, a node\'s data channel takes a free port')
  t.ok(stats[2].cluster!.remoteRequests > 0, 'node 2 asked for remote samples')
  t.equal(stats[2].cluster!.remoteMemoryBytes, 8192, '--remote-memory')
  t.ok(stats[2].cluster!.peakMirrorBytes <= 8192, `node 2's mirrors stayed within --remote-memory (peak ${stats[2].cluster!.peakMirrorBytes})`)
  t.ok(stats[0].cluster!.peakMirrorBytes > 8192, 'a default-sized mirror holds more')
})

t.test('remote requests per remote sample, with and without prefetch', async t => {
  const rates: Record<string, number> = {}
  for (const prefetch of [true, false]) {
    const cluster = await mountCluster(t, [dataset.root, dataset.root, dataset.root], [...NODE_OPTIONS, ...(prefetch ? [] : ['--no-prefetch'])])
    t.same(cluster.results.map(r => r.code), [0, 0, 0])
    for (let epoch = 0; epoch < 2; epoch++) {
      const { reads, errors } = await readClusterEpoch(cluster.mountpoints, dataset.samples, 60 + epoch)
      t.same(errors, [])
      checkEpoch(t, reads, dataset.samples, `prefetch ${prefetch}, epoch ${epoch}`)
    }
    const stats = await Promise.all(cluster.mountpoints.map(readStats))
    rates[String(prefetch)] = sum(stats, s => s.cluster!.remoteRequests) / sum(stats, s => s.cluster!.remoteOpens)
    for (const mountpoint of cluster.mountpoints) await forceUnmount(mountpoint)
  }
  t.comment(`remote requests per remote sample: ${rates.true.toFixed(2)} with prefetch, ${rates.false.toFixed(2)} without`)
  t.equal(rates.false, 1, 'without prefetch every remote sample costs one request')
  t.ok(rates.true < rates.false, 'prefetch saves requests')
})

t.test('a wrong token is refused and logged; a call without one too', async t => {
  const cluster = await mountCluster(t, [dataset.root, dataset.root], NODE_OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0])
  const credentials = await loadCredentials({})
  const address = parseAddress(cluster.peers.split(',')[0], 'peer')
  for (const token of ['not-the-cluster-token', '']) {
    const client = new PeerClient(address, credentials, token, 3000, new SampleBuffers())
    const err = await client.stats().catch((e: unknown) => e)
    client.close()
    t.ok(err instanceof PeerCallError && err.status === grpc.status.UNAUTHENTICATED, `token '${token}': UNAUTHENTICATED`)
  }
  const right = new PeerClient(address, credentials, readFileSync(cluster.token, 'utf8').trim(), 3000, new SampleBuffers())
  t.equal(JSON.parse((await right.stats()).json).cluster.node, 0, 'the right token gets the node\'s stats')
  right.close()
  const log = readFileSync(await defaultLogFile(cluster.mountpoints[0]), 'utf8')
  t.match(log, /refused a peer call: wrong or missing cluster token/)
})

t.test('a node with another token, or another layout, cannot join: the mount fails and says why', async t => {
  const other = (node: number): string[] => node === 1 ? ['--token-file', tokenFile()] : []
  const badToken = await mountCluster(t, [dataset.root, dataset.root], [...NODE_OPTIONS, '--peer-wait', '5'], other)
  t.ok(badToken.results.every(r => r.code !== 0), 'neither node mounts')
  t.match(badToken.results.map(r => r.stderr).join(''), /refused our cluster token: every node needs the same --token-file/)
  t.notOk(badToken.mountpoints.some(isMounted))

  const badLayout = await mountCluster(t, [dataset.root, dataset.root], [...NODE_OPTIONS, '--peer-wait', '5'], node => node === 1 ? ['--seed', '9'] : [])
  t.ok(badLayout.results.every(r => r.code !== 0))
  t.match(badLayout.results.map(r => r.stderr).join(''), /every node must mount the same dataset with the same --chunk-size, --seed, --memory and --peers/)
})

t.test('a node that cannot join: every node\'s mount fails at once, each saying what differs, none waiting --peer-wait for it', async t => {
  const grown = emptyDir('redirfs-grown-')
  await fs.cp(dataset.root, grown, { recursive: true })
  await fs.writeFile(path.join(grown, 'ant', 'one more.jpg'), 'a sample only node 2 has')
  const [unused] = await freePorts(1)
  const cases: Array<[string, string[], (node: number, ports: number[]) => string[], RegExp]> = [
    ['node 2\'s source has one file more', [dataset.root, dataset.root, grown], () => [], /samples/],
    ['node 2 lists one more peer', [dataset.root, dataset.root, dataset.root], (node, ports) => node === 2 ? ['--peers', [...ports, unused].map(port => `127.0.0.1:${port}`).join(',')] : [], /nodes in --peers/],
    ['node 2 was given --node 1', [dataset.root, dataset.root, dataset.root], (node, ports) => node === 2 ? ['--node', '1', '--listen', `127.0.0.1:${ports[2]}`] : [], /--node 1/]
  ]
  for (const [what, sources, perNode, says] of cases) {
    const cluster = await mountCluster(t, sources, NODE_OPTIONS, perNode)
    t.same(cluster.results.map(r => r.code !== 0), [true, true, true], `${what}: no node mounts`)
    cluster.results.forEach((result, node) => {
      t.notMatch(result.stderr, /did not answer/, `${what}: node ${node} did not wait for a peer that was there`)
      t.match(result.stderr, says, `${what}: node ${node} says what differs`)
    })
    t.notOk(cluster.mountpoints.some(isMounted))
  }
})

t.test('cluster flags: bad input gets one line and a non-zero exit', async t => {
  const mountpoint = emptyDir()
  const cases: [string, string[], RegExp][] = [
    ['--peers without --node', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--token-file', '/etc/hostname'], /--peers needs --node/],
    ['--peers without a token', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '0'], /--peers needs --token-file/],
    ['--node out of range', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '2', '--token-file', '/etc/hostname'], /--node 2 is not in --peers/],
    ['a wildcard peer', ['--peers', '0.0.0.0:7000,127.0.0.1:2', '--node', '0', '--token-file', '/etc/hostname'], /wildcard address/],
    ['one peer', ['--peers', '127.0.0.1:7000', '--node', '0', '--token-file', '/etc/hostname'], /at least two/],
    ['a bad address', ['--peers', 'nohost,127.0.0.1:2', '--node', '0', '--token-file', '/etc/hostname'], /not an address like host:port/],
    ['a short token', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '0', '--token-file', tokenFile('short')], /token of at least 16 characters/],
    ['a token others can read', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '0', '--token-file', '/etc/hostname'], /can be read by other users .*chmod 600/],
    ['half the TLS files', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '0', '--token-file', tokenFile(), '--tls-cert', '/etc/hostname'], /needs all three of --tls-cert, --tls-key and --tls-ca/],
    ['a cluster flag without --peers', ['--node', '1'], /--node applies only to a cluster/],
    ['--data-port without --peers', ['--data-port', '7071'], /--data-port applies only to a cluster/],
    ['--data-port 0', ['--peers', '127.0.0.1:1,127.0.0.1:2', '--node', '0', '--token-file', tokenFile(), '--data-port', '0'], /--data-port/]
  ]
  for (const [what, args, message] of cases) {
    const result = await redirfs('mount', dataset.root, mountpoint, ...args)
    t.not(result.code, 0, `${what}: non-zero exit`)
    t.match(result.stderr, message, `${what}: says why`)
    t.notMatch(result.stderr, /\n\s+at /, `${what}: no stack trace`)
  }
  t.notOk(isMounted(mountpoint))
})

/** Reads one epoch and kills node 2's daemon after a third of it. */
t.test('shared storage: a node killed mid-epoch; the others finish the epoch with no error, no wrong label, no sample twice and none the dead node got', async t => {
  const cluster = await mountCluster(t, [dataset.root, dataset.root, dataset.root], NODE_OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0])
  const first = await readClusterEpoch(cluster.mountpoints, dataset.samples, 80)
  checkEpoch(t, first.reads, dataset.samples, 'before the kill')
  const { reads, errors } = await epochWithKill(t, cluster.mountpoints, dataset.samples, await cluster.pids(), 81)
  const survivors = reads.filter(r => r.node !== 2)
  t.same(errors.filter(e => e.node !== 2), [], 'no open failed on the survivors')
  const served = survivors.map(r => dataset.byContent.get(r.content))
  t.equal(served.filter((s, i) => s === undefined || classOf(s) !== classOf(survivors[i].opened)).length, 0, 'no wrong label')
  t.equal(new Set(served).size, served.length, 'no sample twice among the survivors')
  const gotByVictim = new Set(reads.filter(r => r.node === 2).map(r => dataset.byContent.get(r.content)))
  t.ok(gotByVictim.size > 0, `the dead node's trainer got ${gotByVictim.size} samples first`)
  t.same(served.filter(s => gotByVictim.has(s)), [], 'the survivors get none of the samples the dead node\'s trainer got (its sync had caught up)')
  // Node i reads positions i, i+3, ... of the epoch's order: nodes 0 and 1 together read these many.
  const expected = dataset.samples.filter((_, i) => i % 3 !== 2).length
  t.ok(survivors.length >= expected, `the survivors read their whole shares (${survivors.length} opens)`)
  const stats = await Promise.all(cluster.mountpoints.slice(0, 2).map(readStats))
  t.ok(sum(stats, s => s.cluster!.takeovers) > 0, 'the survivors took over the dead node\'s chunks')
  t.same(stats.map(s => s.cluster!.peers[2].state), ['dead', 'dead'])
  // The next epoch, read by the survivors alone, is still served without error.
  const after = await readClusterEpoch(cluster.mountpoints.slice(0, 2), dataset.samples, 82)
  t.same(after.errors, [], 'a whole epoch more on two nodes: no error')
  t.equal(after.reads.filter(r => classOf(dataset.byContent.get(r.content)!) !== classOf(r.opened)).length, 0, 'and no wrong label')
})

t.test('sharded packs: a node killed mid-epoch; only its samples fail, with EIO, nothing else', async t => {
  const work = emptyDir('redirfs-shards-')
  t.teardown(async () => { await fs.rm(work, { recursive: true, force: true }) })
  const out = path.join(work, 'pack')
  const packed = await redirfs('pack', dataset.root, out, '--chunk-size', '4', '--group-depth', '1', '--nodes', '3')
  t.equal(packed.code, 0, packed.stderr)
  t.match(packed.stdout, /3 packs, .*node-0 to node-2/)
  const verified = await redirfs('verify', path.join(out, 'node-1'))
  t.equal(verified.code, 0, verified.stderr)
  const wrongShard = await redirfs('mount', path.join(out, 'node-1'), emptyDir(), '--node', '0', '--peers', '127.0.0.1:1,127.0.0.1:2,127.0.0.1:3', '--token-file', tokenFile())
  t.match(wrongShard.stderr, /is the shard of node 1; this is --node 0/)

  const cluster = await mountCluster(t, [0, 1, 2].map(node => path.join(out, `node-${node}`)), NODE_OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0], cluster.results.map(r => r.stderr).join(''))
  const first = await readClusterEpoch(cluster.mountpoints, dataset.samples, 90)
  checkEpoch(t, first.reads, dataset.samples, 'before the kill')

  const { reads, errors } = await epochWithKill(t, cluster.mountpoints, dataset.samples, await cluster.pids(), 91)
  const chunking = cutPhysicalChunks(dataset.samples.map(p => ({ path: p, size: 1, group: classOf(p) })), 4, 0)
  const homeOf = new Map<string, number>()
  chunking.chunksOfGroup.forEach((chunks, group) => chunks.forEach((files, i) => { for (const f of files) homeOf.set(dataset.samples[f], homeOfChunk(group, i, 3)) }))
  const survivorErrors = errors.filter(e => e.node !== 2)
  t.ok(survivorErrors.length > 0, 'some opens of the dead node\'s samples failed')
  t.same([...new Set(survivorErrors.map(e => e.code))], ['EIO'], 'they failed with EIO')
  t.equal(survivorErrors.filter(e => homeOf.get(e.opened) !== 2).length, 0, 'only samples whose home is the dead node failed')
  const survivors = reads.filter(r => r.node !== 2)
  const served = survivors.map(r => dataset.byContent.get(r.content))
  t.equal(served.filter((s, i) => s === undefined || classOf(s) !== classOf(survivors[i].opened)).length, 0, 'every other open got a sample of its class')
  t.equal(new Set(served).size, served.length, 'and none twice')
  const log = readFileSync(await defaultLogFile(cluster.mountpoints[0]), 'utf8')
  t.match(log, /peer 2 \(127\.0\.0\.1:\d+\) is dead \(.*\): its samples are only in its pack shard/)
})
