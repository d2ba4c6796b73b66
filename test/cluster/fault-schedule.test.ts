// A seeded schedule of faults, in the habit of Jepsen: real nodes (three,
// then five) run one training job after another (a trainer process per
// node, named by REDIRFS_RUN_ID), and between jobs or in the middle of one a
// daemon is paused (SIGSTOP) for less or more than --peer-timeout, killed
// and mounted again, cut off from the others until they take it for dead,
// cut off from one other node only until the two suspect each other (a
// partial cut), or its data channel alone cut from one other node for two
// peer timeouts (traffic dropped both ways by proxies,
// test/helpers/tcp-proxy.ts). Every epoch is checked cluster-wide: one in
// which nobody was taken for dead or fenced is exact (a data cut's too: an
// answer lost with its connection is served again); in one with a death,
// the nodes the fault did not touch get no error, no wrong label and no
// sample twice, the ones it did get no error but EIO, and a node taken for
// dead serves its trainer nothing new once it is back. After every fault the cluster settles with every virtual
// chunk owned once. Waits follow the nodes' stats, not the clock: a short
// pause that a loaded machine stretches into a death is checked as a death.
// REDIRFS_FAULT_SEED replays another schedule; the test prints the one it ran.
import { promises as fs } from 'node:fs'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { SeededRandom } from '../../src/redirect/random'
import type { MountStats } from '../../src/stats'
import { Job, mountPartitionableCluster, untilStats, type PartitionableCluster, type TrainerRead } from '../helpers/cluster'
import { classOf, generateDataset } from '../helpers/dataset'
import { forceUnmount } from '../helpers/mount'

const SEED = Number(process.env.REDIRFS_FAULT_SEED ?? 44)
const dataset = generateDataset(SEED)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })
const OPTIONS = ['--memory', '120K', '--chunk-size', '4', '--group-depth', '1', '--peer-timeout', '3']

type Fault = 'none' | 'short pause' | 'long pause' | 'kill' | 'cut' | 'partial cut' | 'data cut'
/** `partner`: the other end of a partial cut or a data cut. */
interface Step { readonly when: 'between jobs' | 'during a job', readonly fault: Fault, readonly node: number, readonly partner: number }
type When = Step['when']
type Cluster = PartitionableCluster

/** Each fault of `faults` at its time, on a seeded node (and partner) each, in a seeded order, with a calm job among them. */
function schedule (random: SeededRandom, nodes: number, faults: Array<[When, Fault]>): Step[] {
  const steps: Step[] = [{ when: 'between jobs', fault: 'none', node: 0, partner: 1 }]
  for (const [when, fault] of faults) {
    const node = random.below(nodes)
    steps.push({ when, fault, node, partner: (node + 1 + random.below(nodes - 1)) % nodes })
  }
  return random.shuffle(steps)
}
const both = (faults: Fault[]): Array<[When, Fault]> => faults.flatMap(fault => [['between jobs', fault], ['during a job', fault]] as Array<[When, Fault]>)
/** On three nodes, every fault at both times (a cut of the data channel matters only during a job). */
const THREE: Array<[When, Fault]> = [...both(['short pause', 'long pause', 'kill', 'cut', 'partial cut']), ['during a job', 'data cut']]
/** On five, fewer: each fault once, those that touch one node during a job. */
const FIVE: Array<[When, Fault]> = [['between jobs', 'kill'], ['between jobs', 'partial cut'], ['during a job', 'long pause'], ['during a job', 'kill'], ['during a job', 'cut'], ['during a job', 'partial cut'], ['during a job', 'data cut']]
const describe = (step: Step): string => step.fault === 'partial cut' || step.fault === 'data cut' ? `${step.fault} between nodes ${step.node} and ${step.partner}` : `${step.fault} of node ${step.node}`

const READERS = 4
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))
/**
 * Settled: no node takes another for dead or suspected, and every node
 * agrees with the others on whether it is rejoining. (A node taken for dead
 * is fenced before it handshakes as its new incarnation, which is when its
 * peers take it for rejoining; before it knows, its own stats still show
 * the chunks it owned, though it serves nothing without a quorum.)
 */
const settledState = (stats: Array<MountStats | undefined>): boolean => stats.every((s, node) => {
  const self = s!.cluster!.peers[node].state === 'rejoining'
  return s!.cluster!.peers.every(p => p.state !== 'dead' && p.state !== 'suspected') &&
    stats.every((other, by) => by === node || (other!.cluster!.peers[node].state === 'rejoining') === self)
})
/** Deaths seen and fencings undergone, all nodes together: the same before and after an epoch in which nobody was taken for dead. */
const deathsSeen = async (cluster: Cluster): Promise<number> => (await Promise.all(cluster.mountpoints.map(readStats))).reduce((sum, s) => sum + s.cluster!.peersLost + s.cluster!.fenced, 0)

/**
 * Pauses `node` for less than --peer-timeout (a long GC), or until both
 * peers take it for dead (a frozen VM). `onBack` runs right before it is
 * resumed.
 */
async function pause (cluster: Cluster, node: number, fault: 'short pause' | 'long pause', onBack: () => void): Promise<void> {
  await cluster.pause(node)
  if (fault === 'short pause') {
    await sleep(500)
  } else {
    const others = othersThan(cluster, node)
    await untilStats(cluster.mountpoints, `nodes ${others.join(', ')} to take node ${node} for dead`, stats => others.every(n => stats[n]!.cluster!.peers[node].state === 'dead'), { skip: [node] })
  }
  onBack()
  cluster.resume(node)
}

/** Cuts `node` off from the others until both take it for dead, then heals the cut (`onBack` runs right before). */
async function cut (cluster: Cluster, node: number, onBack: () => void): Promise<void> {
  cluster.cut(node)
  const others = othersThan(cluster, node)
  try {
    await untilStats(cluster.mountpoints, `nodes ${others.join(', ')} to take node ${node} for dead`, stats => others.every(n => stats[n]!.cluster!.peers[node].state === 'dead'))
    onBack()
  } finally {
    cluster.heal(node)
  }
}

/**
 * Cuts the link between `node` and `partner` only, until each suspects the
 * other (both still reach a majority, so neither is taken for dead by it),
 * then heals it.
 */
async function partialCut (cluster: Cluster, node: number, partner: number, onBack: () => void): Promise<void> {
  const fencedBefore = (await Promise.all([node, partner].map(async n => await readStats(cluster.mountpoints[n])))).map(s => s.cluster!.fenced)
  cluster.cutBetween(node, partner)
  try {
    await untilStats(cluster.mountpoints, `nodes ${node} and ${partner} to suspect each other`, stats =>
      [[node, partner], [partner, node]].every(([a, b]) => ['suspected', 'dead'].includes(stats[a]!.cluster!.peers[b].state)))
    onBack()
  } finally {
    cluster.healBetween(node, partner)
  }
  // A suspicion is for good: once they hear each other again, each refuses the other, and both are fenced.
  await untilStats(cluster.mountpoints, `nodes ${node} and ${partner}, each refused by the other, to be fenced`, stats =>
    [node, partner].every((n, i) => stats[n]!.cluster!.fenced > fencedBefore[i]))
}

/** Cuts the data channel between `node` and `partner` for two peer timeouts, while their peer service goes on. */
async function dataCut (cluster: Cluster, node: number, partner: number): Promise<void> {
  cluster.cutBetween(node, partner, 'data')
  try {
    await sleep(6000)
  } finally {
    cluster.healBetween(node, partner)
  }
}

const othersThan = (cluster: Cluster, node: number): number[] => cluster.mountpoints.map((_, n) => n).filter(n => n !== node)

/** The fault of `step`, whatever it is; `onBack` runs when a paused or cut-off node is about to be back. */
async function strike (cluster: Cluster, step: Step, onBack: () => void = () => {}): Promise<void> {
  if (step.fault === 'kill') process.kill((await cluster.pids())[step.node], 'SIGKILL')
  else if (step.fault === 'cut') await cut(cluster, step.node, onBack)
  else if (step.fault === 'partial cut') await partialCut(cluster, step.node, step.partner, onBack)
  else if (step.fault === 'data cut') await dataCut(cluster, step.node, step.partner)
  else if (step.fault !== 'none') await pause(cluster, step.node, step.fault, onBack)
}

/**
 * After a kill, the node is mounted again at once; after any fault, the
 * cluster settles (no node takes another for dead or suspected: one taken
 * for dead is back, rejoining), and then the nodes own each virtual chunk
 * once between them.
 */
async function recover (t: Test, cluster: Cluster, step: Step): Promise<void> {
  if (step.fault === 'kill') {
    await forceUnmount(cluster.mountpoints[step.node])
    const again = await cluster.mount(step.node)
    t.equal(again.code, 0, `node ${step.node} mounted again: ${again.stderr}`)
  }
  // A takeover may still be under way when the nodes agree (a node killed and mounted again before its peers noticed
  // the death): its VCs have no owner until it is done. Wait for it, so that two owners, or none for good, fail here.
  // Every node rejoining (the two ends of a partial cut fenced, then the last owner killed and mounted again): none may
  // own anything until the next job starts a generation, so no VC has an owner until then.
  const owners = (stats: Array<MountStats | undefined>): number => stats.some((s, node) => s!.cluster!.peers[node].state !== 'rejoining') ? stats[0]!.layout.virtualChunks : 0
  const ownedOnce = (stats: Array<MountStats | undefined>): boolean => stats.reduce((sum, s) => sum + s!.cluster!.ownedVirtualChunks, 0) === owners(stats)
  const settled = await untilStats(cluster.mountpoints, 'the cluster to settle, with every virtual chunk owned once', stats => settledState(stats) && ownedOnce(stats), { limitMs: 120_000 })
  const owned = settled.map(s => s!.cluster!.ownedVirtualChunks)
  t.equal(owned.reduce((sum, n) => sum + n, 0), owners(settled), `the nodes own every virtual chunk once between them, or none when all are rejoining (they own ${owned.join(', ')}; they see ${JSON.stringify(settled.map(s => s!.cluster!.peers.map(p => p.state)))})`)
}

/** `exact`: every sample once; else no error, right labels and no sample twice. */
function checkReads (t: Test, reads: TrainerRead[], what: string, exact: boolean): void {
  const served = reads.filter(r => r.error === undefined)
  const samples = served.map(r => dataset.byContent.get(r.content!))
  t.same(reads.filter(r => r.error !== undefined).map(r => `${r.opened}: ${r.error!}`), [], `${what}: no open failed`)
  t.equal(samples.filter((s, i) => s === undefined || classOf(s) !== classOf(served[i].opened)).length, 0, `${what}: every read a whole sample of the opened class`)
  const twice = served.filter((_, i) => samples.indexOf(samples[i]) !== i || samples.lastIndexOf(samples[i]) !== i)
  t.equal(new Set(samples).size, samples.length, `${what}: no sample twice${twice.length === 0 ? '' : ` (served twice: ${twice.map(r => `node ${r.node} opened ${r.opened}, got ${dataset.byContent.get(r.content!) ?? '?'}`).join('; ')})`}`)
  if (exact) t.same([...samples].sort(), dataset.samples, `${what}: every sample exactly once across the nodes`)
}

/** A job with no fault in it: both epochs exact. */
async function exactJob (t: Test, cluster: Cluster, runId: string, what: string, seed: number): Promise<void> {
  const job = new Job(t, cluster.mountpoints, runId, undefined, READERS)
  for (let epoch = 0; epoch < 2; epoch++) checkReads(t, await job.epoch(dataset.samples, seed + epoch), `${what}, epoch ${epoch}`, true)
  await job.end()
}

/**
 * A job whose first epoch a fault strikes a third of the way through the
 * node's share. If nobody was taken for dead or fenced (a short pause or a
 * cut of the data channel, as it should be), both epochs are exact.
 * Otherwise the
 * epoch is checked as a death's, the job ends there (a rank is gone, or
 * refused until the next run) and the cluster recovers.
 */
async function jobWithFault (t: Test, cluster: Cluster, step: Step, runId: string, what: string, seed: number): Promise<void> {
  const before = await deathsSeen(cluster)
  // The pids now: finding one when the fault is due reads that node's stats, which on a loaded machine takes long enough for its trainer to read on.
  await cluster.pids()
  const job = new Job(t, cluster.mountpoints, runId, undefined, READERS)
  let faulting: Promise<void> | undefined
  let back = false
  const victimAfterBack: TrainerRead[] = []
  let victimAnswered = 0
  const strikeAt = Math.floor(dataset.samples.length / cluster.mountpoints.length / 3)
  const reads = await job.epoch(dataset.samples, seed, read => {
    if (read.node !== step.node) return
    if (back) victimAfterBack.push(read)
    // A third of the way through the node's own share, so that its trainer has opens left however slowly the others start.
    if (++victimAnswered === strikeAt) faulting = strike(cluster, step, () => { back = true })
  })
  await faulting
  t.ok(faulting !== undefined, `${what}: the fault struck mid-epoch`)
  const died = step.fault === 'kill' || await deathsSeen(cluster) !== before
  if (!died) {
    t.not(step.fault, 'long pause', `${what}: a node paused past --peer-timeout was taken for dead`)
    t.not(step.fault, 'cut', `${what}: a node cut off was taken for dead`)
    t.not(step.fault, 'partial cut', `${what}: the two ends of a partial cut were fenced once it healed`)
    checkReads(t, reads, `${what}, epoch 0`, true)
    checkReads(t, await job.epoch(dataset.samples, seed + 1), `${what}, epoch 1`, true)
    await job.end()
    return
  }
  if (step.fault === 'short pause') t.comment(`${what}: the machine stretched the short pause into a death; the epoch is checked as a death's`)
  t.not(step.fault, 'data cut', `${what}: a cut of the data channel alone made no death and fenced no one`)
  // A partial cut touches both its ends: either may be refused by the other once it heals.
  const touched = step.fault === 'partial cut' ? [step.node, step.partner] : [step.node]
  checkReads(t, reads.filter(r => !touched.includes(r.node)), `${what}, the nodes the fault did not touch`, false)
  if (step.fault !== 'kill') {
    const victims = reads.filter(r => touched.includes(r.node))
    t.same(victims.filter(r => r.error !== undefined && r.error !== 'EIO'), [], `${what}: node ${touched.join(' and ')}'s trainers got no error but EIO, the refusal of a node taken for dead or fenced`)
  }
  if (step.fault === 'short pause' || step.fault === 'long pause' || step.fault === 'cut') {
    // Each of its trainer's readers may have had one open answered before the fault whose reads it held up.
    const servedAfterBack = victimAfterBack.filter(r => r.error === undefined).length
    t.ok(servedAfterBack <= READERS, `${what}: once back, node ${step.node} served its trainer nothing new (${servedAfterBack} opens answered before the fault finished their reads)`)
  }
  await job.end()
  await recover(t, cluster, step)
}

/** Mounts `nodes` nodes and runs the seeded schedule of `faults` on them, a job per step, then a last job. */
async function runSchedule (t: Test, nodes: number, faults: Array<[When, Fault]>): Promise<void> {
  const random = new SeededRandom(SEED * 10 + nodes)
  const steps = schedule(random, nodes, faults)
  t.comment(`schedule (REDIRFS_FAULT_SEED=${SEED}, ${nodes} nodes): ${steps.map(s => s.fault === 'none' ? 'a calm job' : `${describe(s)} ${s.when}`).join('; ')}`)
  const cluster = await mountPartitionableCluster(t, Array.from({ length: nodes }, () => dataset.root), OPTIONS)
  t.same(cluster.results.map(r => r.code), cluster.results.map(() => 0), `every node mounted: ${cluster.results.map(r => r.stderr).join('')}`)
  for (const [i, step] of steps.entries()) {
    const runId = `schedule-${SEED}-${nodes}-${i}`
    const seed = SEED * 100 + i * 10
    if (step.fault === 'none') {
      await exactJob(t, cluster, runId, `job ${i} (calm)`, seed)
    } else if (step.when === 'between jobs') {
      await strike(cluster, step)
      await recover(t, cluster, step)
      await exactJob(t, cluster, runId, `job ${i} (after a ${describe(step)})`, seed)
    } else {
      await jobWithFault(t, cluster, step, runId, `job ${i} (${describe(step)} during it)`, seed)
    }
  }
  await exactJob(t, cluster, `schedule-${SEED}-${nodes}-last`, 'the last job', SEED * 100 + 99)
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.same(stats.map(s => s.cluster!.peers.map(p => p.state)), stats.map((_, node) => stats.map((_, peer) => peer === node ? 'self' : 'alive')), 'after the last job every node takes the others for alive')
  t.equal(stats.reduce((sum, s) => sum + s.cluster!.ownedVirtualChunks, 0), stats[0].layout.virtualChunks, 'and the nodes own every virtual chunk once between them')
}

t.test(`seeded fault schedule ${SEED} on 3 nodes: pauses shorter and longer than --peer-timeout, kills, partitions whole and partial, and a cut of the data channel, between jobs and during them`, async t => {
  await runSchedule(t, 3, THREE)
})

t.test(`seeded fault schedule ${SEED} on 5 nodes: a kill and a partial cut between jobs; a long pause, a kill, a partition, a partial cut and a cut of the data channel during jobs`, async t => {
  await runSchedule(t, 5, FIVE)
})
