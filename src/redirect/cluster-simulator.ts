/**
 * Drives N nodes' protocols and mirrors together, with no network: each
 * node's trainer opens its DistributedSampler share of a fresh global
 * permutation every epoch. Every step that is asynchronous in the real
 * system is a task here (an open, a request reaching its owner, the answer
 * coming back, a load finishing, each holder answering a reclaim), and the
 * next task is picked at random, so requests, batches and reclaims race as
 * they do over gRPC. Epochs do not overlap (DDP keeps ranks in step).
 * Answers may be lost on their way (`loseOneAnswerIn`), and an epoch's
 * order may be padded with a second open of some files (`padding`).
 */
import { allVcs, vcOfFile, type FileId, type Layout, type NodeId, type VcId } from './layout'
import { MirrorTable, type RemoteRequest } from './mirror'
import { Protocol, type LoadPlan, type MirrorReport, type ReclaimPlan, type ReclaimReport, type RedirectMode } from './protocol'
import { SeededRandom } from './random'
import { ownerOrder, planAdoption, type StandbyCopy } from './takeover'
import { appendTo } from '../util/lists'

export interface ClusterSimulationOptions {
  mode: RedirectMode
  /** Per node. */
  memoryBytes: number
  remoteMemoryBytes: number
  epochs: number
  seed: number
  /** Concurrent opens per node. */
  readers?: number
  prefetch?: boolean
  /**
   * A node that dies once this many opens of the given epoch were answered
   * cluster-wide (its trainer stops too). Its VCs are taken over by the
   * survivors (shared storage), as ClusterNode does (see takeover.ts).
   */
  kill?: Kill | Kill[]
  /** Tasks between syncs: standby copies and served notices (the sync period; default 25). */
  standbyEvery?: number
  /** mix: files per block (`ProtocolOptions.mixBlock`). */
  mixBlock?: number
  /**
   * One answer to a request in this many is lost on its way (its
   * connection broke): the requester never gets it and asks again with the
   * same request, as ClusterNode.askOwner does; so is one holder's answer
   * to a reclaim in this many (the owner asks that holder again, as
   * reclaimFromHolders does). 0 or undefined: none.
   */
  loseOneAnswerIn?: number
  /**
   * Files opened a second time at the end of every epoch's order, the
   * first ones of it, as DistributedSampler pads an epoch to give every
   * rank as many (any number here, as a stray reader adds any): some
   * offsets get more opens than they have files, so a VC's epoch ends
   * while mirrors still hold files, which are carried into the next
   * (docs/design.md, "Files carried into an epoch across a takeover").
   */
  padding?: number
}

export interface Kill { node: NodeId, epoch: number, afterOpens: number }

export interface ClusterOpen {
  readonly node: NodeId
  readonly opened: FileId
  readonly served: FileId | undefined
  /** The epoch of the served file's VC it was served in: its owner's at the serve (for a mirror's, as the owner's ledger counts it). */
  readonly vcEpoch: number | undefined
}

export interface ClusterSimulationResult {
  /** Per epoch, every answered open of every node. */
  readonly epochs: ClusterOpen[][]
  readonly protocols: Protocol[]
  readonly mirrors: MirrorTable[]
  /**
   * Per killed node, the opens its trainer was answered after the last
   * standby update before it died: what a successor cannot know was served.
   */
  readonly unsyncedAtDeath: Map<NodeId, number>
  /** Per killed node, the opens answered on every node since the last sync before it died: all a takeover can miss. */
  readonly unsyncedClusterWide: Map<NodeId, number>
  /** Answers lost on their way (`loseOneAnswerIn`). */
  readonly answersLost: number
  /** Files still in mirrors when their VC's epoch ended, carried into the next. */
  readonly carried: number
}

type Task = () => void
/** An open's answer, with the epoch of the served file's VC that its owner counted it in. */
type Answer = (served: FileId | undefined, vcEpoch?: number) => void

export function simulateCluster (layout: Layout, options: ClusterSimulationOptions): ClusterSimulationResult {
  const nodes = layout.nodes
  let answersLost = 0
  let carried = 0
  /** Whether the answer now on its way is lost (`loseOneAnswerIn`). */
  const lose = (): boolean => {
    const lost = (options.loseOneAnswerIn ?? 0) > 0 && random.below(options.loseOneAnswerIn!) === 0
    if (lost) answersLost++
    return lost
  }
  const random = new SeededRandom(options.seed + 17)
  const protocols = Array.from({ length: nodes }, (_, node) => new Protocol(layout, { mode: options.mode, memoryBytes: options.memoryBytes, seed: options.seed, node: node as NodeId, prefetch: options.prefetch, mixBlock: options.mixBlock }))
  const mirrors = Array.from({ length: nodes }, (_, node) => new MirrorTable(layout, options.remoteMemoryBytes, options.mode, options.seed + node))
  /** Nodes killed so far (a set of numbers: the simulator's loops count nodes by index). */
  const dead = new Set<number>()
  const tasks: Task[] = []
  const homeWaiters = new Map<string, Task[]>()
  const mirrorWaiters = new Map<string, Task[]>()
  const park = (waiters: Map<string, Task[]>, key: string, task: Task): void => { appendTo(waiters, key, task) }
  const wake = (waiters: Map<string, Task[]>, key: string): void => { const woken = waiters.get(key) ?? []; waiters.delete(key); tasks.push(...woken) }
  const vcOf = (file: FileId): VcId => vcOfFile(layout, file)
  const ownerOf = (vc: VcId): NodeId => protocols.findIndex((p, node) => !dead.has(node) && p.owns(vc)) as NodeId

  /** The owner answers an open of `file` (its own trainer's, or a requester's). */
  const serveAtHome = (owner: NodeId, file: FileId, retry: boolean, report: MirrorReport | undefined, answer: Answer, holdersConfirmed = false): void => {
    // A dead node decides nothing more: its opens are lost, and a remote one fails over (see `request`).
    if (dead.has(owner)) return answer(undefined)
    const protocol = protocols[owner]
    const vc = vcOf(file)
    const epoch = protocol.epochOf(vc)
    const decision = protocol.open(file, { retry, requester: report, holdersConfirmed })
    protocol.takeDropped() // files let go: the simulator holds no bytes to free
    // An epoch ends only in an open: what the ledger then holds stays in mirrors as the next one's.
    if (protocol.epochOf(vc) !== epoch) carried += protocol.home.filesHeld(vc).length
    const again = (confirmed = false): void => serveAtHome(owner, file, true, report, answer, confirmed)
    if (decision.kind === 'serve') {
      answer(decision.file, protocol.epochOf(vc))
      readahead(owner, vc)
    } else if (decision.kind === 'wait') {
      park(homeWaiters, `${owner}:${vc}`, again)
    } else if (decision.kind === 'load') {
      tasks.push(() => finishLoad(owner, decision.plan, answer))
    } else {
      reclaim(owner, decision.plan, answer, again)
    }
  }

  const finishLoad = (owner: NodeId, plan: LoadPlan, answer?: Answer): void => {
    const outcome = protocols[owner].finishLoad(plan, new Set(plan.files))
    if (answer !== undefined) answer(outcome.served, protocols[owner].epochOf(plan.vc))
    wake(homeWaiters, `${owner}:${plan.vc}`)
    readahead(owner, plan.vc)
  }

  const readahead = (owner: NodeId, vc: VcId): void => {
    const plan = protocols[owner].readahead(vc)
    if (plan !== undefined) tasks.push(() => finishLoad(owner, plan))
  }

  /** Each holder answers at its own moment (it may serve from its mirror meanwhile). */
  const reclaim = (owner: NodeId, plan: ReclaimPlan, answer: Answer, again: (holdersConfirmed: boolean) => void): void => {
    const reports: ReclaimReport[] = []
    const finish = (): void => {
      const returned = protocols[owner].home.finishReclaim(plan, reports)
      protocols[owner].takeDropped()
      wake(homeWaiters, `${owner}:${plan.vc}`)
      if (returned !== undefined) answer(returned, protocols[owner].epochOf(plan.vc))
      else again(true) // in the same step: the holders' answers are fresh for this decision only
    }
    const ask = (holder: NodeId): void => {
      tasks.push(() => {
        if (dead.has(holder)) {
          reports.push({ node: holder, dead: true })
        } else {
          // A holder gives nothing back to an owner it knows is dead (the file would be lost);
          // the dead owner's opens then fail over, as their calls would.
          const giveBack = plan.giveBack?.node === holder && !dead.has(owner)
          const report = { node: holder, ...mirrors[holder].answerReclaim(plan.vc, giveBack, plan.giveBack?.offsets ?? []) }
          if (lose()) return ask(holder)
          reports.push(report)
        }
        if (reports.length === plan.holders.length) finish()
      })
    }
    for (const holder of plan.holders) ask(holder)
    if (plan.holders.length === 0) tasks.push(finish)
  }

  /** A trainer's open on `node`. */
  const open = (node: NodeId, file: FileId, retry: boolean, answer: Answer): void => {
    const vc = vcOf(file)
    if (protocols[node].owns(vc)) return serveAtHome(node, file, retry, undefined, answer)
    const decision = mirrors[node].open(file, retry)
    // A mirror's file is its owner's to count: of the epoch it went out in, or, carried, of the one after.
    if (decision.kind === 'serve') return answer(decision.file, protocols[ownerOf(vc)]?.epochOf(vc))
    if (decision.kind === 'wait') return park(mirrorWaiters, `${node}:${vc}`, () => open(node, file, true, answer))
    tasks.push(() => request(node, decision.request, answer))
  }

  const request = (node: NodeId, req: RemoteRequest, answer: Answer): void => {
    const owner = ownerOf(req.vc)
    if (owner === node) {
      // This node took the VC over while its request was out: answer at home now.
      mirrors[node].abandonRequest(req)
      wake(mirrorWaiters, `${node}:${req.vc}`)
      return serveAtHome(node, req.file, false, undefined, answer)
    }
    // As ClusterNode.askOwner sends each try: the mirror's last batch and files given back as they are now.
    const now = mirrors[node].current(req)
    const report: MirrorReport = { node, emptyOffsets: req.emptyOffsets, freeBytes: req.freeBytes, lastBatch: now.lastBatch, givenBackBefore: now.givenBackBefore }
    serveAtHome(owner, req.file, false, report, (served, servedIn) => {
      const { files: batch, batch: batchNumber } = served === undefined ? { files: [], batch: 0 } : protocols[owner].home.shipBatch(req.vc, report)
      const vcEpoch = protocols[owner].epochOf(req.vc)
      if (served !== undefined) protocols[owner].home.noteAnswerSent(req.vc, node, served, batchNumber)
      const lost = lose()
      tasks.push(() => {
        if (dead.has(node)) return
        if (dead.has(owner) || lost) return request(node, req, answer) // the answer died with its sender, or on its way
        mirrors[node].finishRequest(req, { served, batch, batchNumber, vcEpoch })
        answer(served, servedIn)
        wake(mirrorWaiters, `${node}:${req.vc}`)
      })
    })
  }

  // Standby copies: node -> VC -> the home's consumed bits as last sent.
  const standby = Array.from({ length: nodes }, () => new Map<VcId, StandbyCopy>())
  let tasksRun = 0
  /** The periodic sync: standby copies to successors, served notices to owners. */
  const answeredSinceSync = new Array<number>(nodes).fill(0)
  const unsyncedAtDeath = new Map<NodeId, number>()
  const unsyncedClusterWide = new Map<NodeId, number>()
  const sync = (): void => {
    answeredSinceSync.fill(0)
    for (const [home, protocol] of protocols.entries()) {
      if (dead.has(home)) continue
      for (const update of protocol.home.takeStandbyUpdates()) {
        const successor = ownerOrder(layout, update.vc).find(n => n !== home && !dead.has(n))
        if (successor !== undefined) standby[successor].set(update.vc, update)
      }
      for (const notice of mirrors[home].takeServedNotices()) {
        const owner = ownerOf(notice.vc)
        if (owner >= 0) protocols[owner].home.noteServedElsewhere(home as NodeId, [notice])
      }
    }
  }

  /** Every VC no live node owns goes to the first live node of its owner order, with the survivors' reports. */
  const adoptOrphans = (): void => {
    for (const v of allVcs(layout)) {
      if (protocols.some((p, n) => !dead.has(n) && p.owns(v))) continue
      const successor = ownerOrder(layout, v).find(n => !dead.has(n))!
      const reports = [...Array(nodes).keys()].filter(n => !dead.has(n)).map(n => ({ node: n as NodeId, ...mirrors[n].takeoverReport(v) }))
      protocols[successor].home.adopt(v, planAdoption(reports, standby[successor].get(v), successor, n => dead.has(n)), mirrors[successor].surrender(v))
      wake(mirrorWaiters, `${successor}:${v}`)
    }
  }

  /**
   * What memory holds stays one copy per file: a file staged (for this
   * epoch or the next) is neither in a slot nor loadable again, or its
   * bytes would be read twice and the second copy's slot left without them.
   */
  const checkMemory = (): void => {
    for (const [node, protocol] of protocols.entries()) {
      if (dead.has(node)) continue
      for (const vc of allVcs(layout)) {
        for (const file of protocol.slots.staged(vc) ?? []) {
          if (!protocol.slots.isConsumed(file)) throw new Error(`node ${node}: file ${file} is staged for VC ${vc} and loadable again`)
          if (protocol.slots.fileAt(vc, layout.fileOffset[file]) === file) throw new Error(`node ${node}: file ${file} is staged for VC ${vc} and in its slot`)
        }
      }
    }
  }

  const epochs: ClusterOpen[][] = []
  for (let epoch = 0; epoch < options.epochs; epoch++) {
    const shuffled = random.shuffle(layout.files.map((_, id) => id as FileId))
    const permutation = [...shuffled, ...shuffled.slice(0, options.padding ?? 0)]
    const answered: ClusterOpen[] = []
    const queues = Array.from({ length: nodes }, (_, node) => permutation.filter((_, i) => i % nodes === node))
    const outstanding = new Array<number>(nodes).fill(0)
    const startOpen = (node: NodeId): void => {
      const file = queues[node].shift()!
      outstanding[node]++
      open(node, file, false, (served, vcEpoch) => {
        outstanding[node]--
        if (!dead.has(node)) { answered.push({ node, opened: file, served, vcEpoch: served === undefined ? undefined : vcEpoch }); answeredSinceSync[node]++ }
        for (const kill of [options.kill ?? []].flat()) {
          if (kill.epoch !== epoch || answered.length !== kill.afterOpens || dead.has(kill.node)) continue
          dead.add(kill.node)
          unsyncedAtDeath.set(kill.node, answeredSinceSync[kill.node])
          unsyncedClusterWide.set(kill.node, answeredSinceSync.reduce((sum, n) => sum + n, 0))
          queues[kill.node].length = 0
          for (const [survivor, protocol] of protocols.entries()) {
            if (!dead.has(survivor)) protocol.home.forgetNode(kill.node)
            protocol.takeDropped()
          }
          adoptOrphans()
        }
      })
    }
    for (;;) {
      const ready = [...queues.keys()].filter(node => !dead.has(node) && queues[node].length > 0 && outstanding[node] < (options.readers ?? 4))
      if (ready.length > 0 && (tasks.length === 0 || random.below(2) === 0)) { startOpen(ready[random.below(ready.length)] as NodeId); continue }
      if (tasks.length === 0) break
      tasks.splice(random.below(tasks.length), 1)[0]()
      checkMemory()
      if (++tasksRun % (options.standbyEvery ?? 25) === 0) sync()
    }
    const stuck = outstanding.reduce((sum, n, node) => sum + (dead.has(node) ? 0 : n), 0)
    if (stuck > 0) throw new Error(`cluster simulation stalled in epoch ${epoch}: ${stuck} opens never answered`)
    epochs.push(answered)
  }
  return { epochs, protocols, mirrors, unsyncedAtDeath, unsyncedClusterWide, answersLost, carried }
}
