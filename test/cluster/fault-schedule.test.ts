// A seeded schedule of faults, in the habit of Jepsen: three real nodes run
// one training job after another (a trainer process per node, named by
// REDIRFS_RUN_ID), and between jobs or in the middle of one a daemon is
// paused (SIGSTOP) for less or more than --peer-timeout, killed and mounted
// again, or cut off from the others (its peer service's traffic dropped
// both ways by proxies, test/helpers/tcp-proxy.ts) until they take it for
// dead. Every epoch is checked cluster-wide: one in which nobody was taken
// for dead is exact; in one with a death, the nodes not taken for dead get
// no error, no wrong label and no sample twice, and the node taken for dead
// serves its trainer nothing new once it is back (EIO, the refusal, and
// nothing else). After every fault the cluster settles with every virtual
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

type Fault = 'none' | 'short pause' | 'long pause' | 'kill' | 'cut'
interface Step { readonly when: 'between jobs' | 'during a job', readonly fault: Fault, readonly node: number }
type Cluster = PartitionableCluster

/** Every kind of fault between jobs and during one, on a seeded node each, in a seeded order, with a calm job among them. */
function schedule (random: SeededRandom): Step[] {
  const steps: Step[] = [{ when: 'between jobs', fault: 'none', node: 0 }]
  for (const when of ['between jobs', 'during a job'] as const) {
    for (const fault of ['short pause', 'long pause', 'kill', 'cut'] as const) steps.push({ when, fault, node: random.below(3) })
  }
  return random.shuffle(steps)
}

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
    const others = [0, 1, 2].filter(n => n !== node)
    await untilStats(cluster.mountpoints, `nodes ${others.join(' and ')} to take node ${node} for dead`, stats => others.every(n => stats[n]!.cluster!.peers[node].state === 'dead'), { skip: [node] })
  }
  onBack()
  cluster.resume(node)
}

/** Cuts `node` off from the others until both take it for dead, then heals the cut (`onBack` runs right before). */
async function cut (cluster: Cluster, node: number, onBack: () => void): Promise<void> {
  cluster.cut(node)
  const others = [0, 1, 2].filter(n => n !== node)
  await untilStats(cluster.mountpoints, `nodes ${others.join(' and ')} to take node ${node} for dead`, stats => others.every(n => stats[n]!.cluster!.peers[node].state === 'dead'))
  onBack()
  cluster.heal(node)
}

/** The fault of `step`, whatever it is; `onBack` runs when a paused or cut-off node is about to be back. */
async function strike (cluster: Cluster, step: Step, onBack: () => void = () => {}): Promise<void> {
  if (step.fault === 'kill') process.kill((await cluster.pids())[step.node], 'SIGKILL')
  else if (step.fault === 'cut') await cut(cluster, step.node, onBack)
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
  const ownedOnce = (stats: Array<MountStats | undefined>): boolean => stats.reduce((sum, s) => sum + s!.cluster!.ownedVirtualChunks, 0) === stats[0]!.layout.virtualChunks
  const settled = await untilStats(cluster.mountpoints, 'the cluster to settle, with every virtual chunk owned once', stats => settledState(stats) && ownedOnce(stats), { limitMs: 120_000 })
  const owned = settled.map(s => s!.cluster!.ownedVirtualChunks)
  t.equal(owned.reduce((sum, n) => sum + n, 0), settled[0]!.layout.virtualChunks, `the nodes own every virtual chunk once between them (they own ${owned.join(', ')}; they see ${JSON.stringify(settled.map(s => s!.cluster!.peers.map(p => p.state)))})`)
}

function checkReads (t: Test, reads: TrainerRead[], what: string, exact: boolean): void {
  const served = reads.filter(r => r.error === undefined)
  const samples = served.map(r => dataset.byContent.get(r.content!))
  t.same(reads.filter(r => r.error !== undefined).map(r => `${r.opened}: ${r.error!}`), [], `${what}: no open failed`)
  t.equal(samples.filter((s, i) => s === undefined || classOf(s) !== classOf(served[i].opened)).length, 0, `${what}: every read a whole sample of the opened class`)
  t.equal(new Set(samples).size, samples.length, `${what}: no sample twice`)
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
 * node's share. If nobody was taken for dead (a short pause, as it should
 * be), both epochs are exact. Otherwise the epoch is checked as a death's,
 * the job ends there (a rank is gone, or refused until the next run) and
 * the cluster recovers.
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
  const reads = await job.epoch(dataset.samples, seed, read => {
    if (read.node !== step.node) return
    if (back) victimAfterBack.push(read)
    // A third of the way through the node's own share, so that its trainer has opens left however slowly the others start.
    if (++victimAnswered === Math.floor(dataset.samples.length / 9)) faulting = strike(cluster, step, () => { back = true })
  })
  await faulting
  t.ok(faulting !== undefined, `${what}: the fault struck mid-epoch`)
  const died = step.fault === 'kill' || await deathsSeen(cluster) !== before
  if (!died) {
    t.not(step.fault, 'long pause', `${what}: a node paused past --peer-timeout was taken for dead`)
    t.not(step.fault, 'cut', `${what}: a node cut off was taken for dead`)
    checkReads(t, reads, `${what}, epoch 0`, true)
    checkReads(t, await job.epoch(dataset.samples, seed + 1), `${what}, epoch 1`, true)
    await job.end()
    return
  }
  if (step.fault === 'short pause') t.comment(`${what}: the machine stretched the short pause into a death; the epoch is checked as a death's`)
  checkReads(t, reads.filter(r => r.node !== step.node), `${what}, the nodes not taken for dead`, false)
  if (step.fault !== 'kill') {
    const victim = reads.filter(r => r.node === step.node)
    t.same(victim.filter(r => r.error !== undefined && r.error !== 'EIO'), [], `${what}: node ${step.node}'s trainer got no error but EIO, the refusal of a node taken for dead`)
    // Each of its trainer's readers may have had one open answered before the fault whose reads it held up.
    const servedAfterBack = victimAfterBack.filter(r => r.error === undefined).length
    t.ok(servedAfterBack <= READERS, `${what}: once back, node ${step.node} served its trainer nothing new (${servedAfterBack} opens answered before the fault finished their reads)`)
  }
  await job.end()
  await recover(t, cluster, step)
}

t.test(`seeded fault schedule ${SEED}: pauses shorter and longer than --peer-timeout, kills and partitions, between jobs and during them, on 3 nodes`, async t => {
  const random = new SeededRandom(SEED)
  const steps = schedule(random)
  t.comment(`schedule (REDIRFS_FAULT_SEED=${SEED}): ${steps.map(s => s.fault === 'none' ? 'a calm job' : `${s.fault} of node ${s.node} ${s.when}`).join('; ')}`)
  const cluster = await mountPartitionableCluster(t, [dataset.root, dataset.root, dataset.root], OPTIONS)
  t.same(cluster.results.map(r => r.code), [0, 0, 0], `every node mounted: ${cluster.results.map(r => r.stderr).join('')}`)
  for (const [i, step] of steps.entries()) {
    const runId = `schedule-${SEED}-${i}`
    const seed = SEED * 100 + i * 10
    if (step.fault === 'none') {
      await exactJob(t, cluster, runId, `job ${i} (calm)`, seed)
    } else if (step.when === 'between jobs') {
      await strike(cluster, step)
      await recover(t, cluster, step)
      await exactJob(t, cluster, runId, `job ${i} (after a ${step.fault} of node ${step.node})`, seed)
    } else {
      await jobWithFault(t, cluster, step, runId, `job ${i} (${step.fault} of node ${step.node} during it)`, seed)
    }
  }
  await exactJob(t, cluster, `schedule-${SEED}-last`, 'the last job', SEED * 100 + 99)
  const stats = await Promise.all(cluster.mountpoints.map(readStats))
  t.same(stats.map(s => s.cluster!.peers.map(p => p.state)), [['self', 'alive', 'alive'], ['alive', 'self', 'alive'], ['alive', 'alive', 'self']], 'after the last job every node takes the others for alive')
  t.equal(stats.reduce((sum, s) => sum + s.cluster!.ownedVirtualChunks, 0), stats[0].layout.virtualChunks, 'and the nodes own every virtual chunk once between them')
})
