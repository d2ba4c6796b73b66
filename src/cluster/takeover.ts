/**
 * Takeovers, the node's side (the decisions are redirect/takeover.ts).
 *
 * When a peer dies, what this node shipped to it is made loadable again
 * (it never reached a trainer). Then:
 * - shared storage: each VC whose owners are all dead goes to the next
 *   live node of its owner order, which merges the survivors' reports with
 *   its standby copy and takes the VC over; training goes on with no error.
 * - sharded packs: nobody else has those chunks; opens of them fail with
 *   EIO at once, with one clear log line.
 *
 * This node also keeps the standby copies its peers send it (sync.ts): the
 * state it starts from when it becomes a VC's owner.
 */
import type { Logger } from 'pino'
import type { Engine } from '../engine/engine'
import type { RemoteReader } from '../engine/remote-reader'
import { allVcs, vcOfFile, type FileId, type Layout, type NodeId, type VcId } from '../redirect/layout'
import { planAdoption, type StandbyCopy, type SurvivorReport } from '../redirect/takeover'
import { compareGenerations } from './generations'
import { askAgain, PeerCallError } from './call-error'
import type { Membership } from './membership'
import type { TakeoverStateReply } from './wire'
import { appendTo } from '../util/lists'
import { pausePoint } from '../util/pause-points'

export class Takeover {
  /** VCs being taken over, so that each is adopted once. */
  private readonly adopting = new Map<VcId, Promise<void>>()
  /** Standby copies of the VCs this node would take over. */
  private readonly standby = new Map<VcId, StandbyCopy>()

  constructor (
    private readonly layout: Layout,
    private readonly membership: Membership,
    private readonly engine: Engine,
    private readonly remote: RemoteReader,
    private readonly log: Logger
  ) {
    membership.onDeath((node, why) => this.peerDied(node, why))
    membership.onOwnersChanged(() => { void this.adoptOrphans().catch(err => this.failed(err)) })
  }

  private get node (): NodeId { return this.membership.node }

  private peerDied (node: NodeId, why: string): void {
    const lost = this.engine.forgetNode(node)
    const address = this.membership.addressOf(node)
    if (this.membership.storage === 'sharded') {
      this.log.error({ peer: node, address, why }, `peer ${node} (${address}) is dead (${why}): its samples are only in its pack shard, so opens of them now fail with EIO`)
    } else {
      this.log.error({ peer: node, address, why, vcsWithLostFiles: lost.length }, `peer ${node} (${address}) is dead (${why}): the other nodes take over its chunks`)
      // Before start-up is done this node answers for nothing anyone else counts on: it takes over once it has started (ClusterNode.start).
      if (this.membership.ready) void this.adoptOrphans().catch(err => this.failed(err, node))
    }
  }

  /**
   * A takeover that failed is tried again (`adoptOrphans`); one of a node
   * fenced meanwhile is no fault: it answers for nothing until it rejoins.
   */
  failed (err: unknown, dead?: NodeId): void {
    const message = (err as Error).message
    if (this.membership.closed) this.log.debug({ dead, err: message }, 'a takeover stopped: the mount is going away')
    else if (this.membership.fenced !== undefined) this.log.info({ dead, err: message }, 'a takeover stopped: this node was taken for dead meanwhile, and takes nothing over until it rejoins')
    else this.log.error({ dead, err: message }, 'takeover failed; trying again')
  }

  /** A new generation: every VC starts afresh with its owner, so nothing of a takeover carries over. */
  newGeneration (): void {
    this.adopting.clear()
    this.standby.clear()
  }

  /** Keeps the newest standby copy of `vc` a peer sent. */
  keepStandby (vc: VcId, copy: StandbyCopy): void {
    const known = this.standby.get(vc)
    if (known === undefined || copy.epoch >= known.epoch) this.standby.set(vc, copy)
  }

  /**
   * Takes over every VC this node should now answer for and does not yet:
   * its owners before this node in the rotation are all dead. Each VC is
   * adopted once; VCs of one dead home are adopted together.
   */
  async adoptOrphans (): Promise<void> {
    // A node going away takes nothing over: it would only be taken over again.
    if (this.membership.closed) return
    const ours = allVcs(this.layout).filter(vc => this.membership.ownerOf(vc) === this.node)
    const byHome = new Map<NodeId, VcId[]>()
    for (const vc of ours.filter(vc => !this.engine.owns(vc) && !this.adopting.has(vc))) {
      const home = this.layout.vcs[vc].home
      appendTo(byHome, home, vc)
    }
    for (const [home, vcs] of byHome) {
      const work = this.adopt(home, vcs)
      for (const vc of vcs) this.adopting.set(vc, work)
      // A takeover that failed (a survivor refused this node as dead, or sent a report that cannot be read) adopted
      // nothing. It starts again a second from now, else its VCs stay owned by nobody for good; until then the
      // failure stands, so that the opens asking meanwhile do not each start a takeover that asks every peer.
      work.catch(() => {
        this.adoptAgainSoon(() => { for (const vc of vcs) if (this.adopting.get(vc) === work) this.adopting.delete(vc) })
      })
    }
    await Promise.all(ours.map(async vc => await this.adopting.get(vc)))
  }

  private retry?: NodeJS.Timeout
  /** What each failed takeover forgets of itself when the retry comes. */
  private readonly forgetFailed: Array<() => void> = []

  private adoptAgainSoon (forget: () => void): void {
    this.forgetFailed.push(forget)
    if (this.retry !== undefined) return
    this.retry = setTimeout(() => {
      this.retry = undefined
      for (const forget of this.forgetFailed.splice(0)) forget()
      if (this.membership.closed || !this.membership.ready) return
      void this.adoptOrphans().catch(err => this.failed(err))
    }, 1000)
    this.retry.unref()
  }

  /**
   * Adopts `vcs` of the dead (or rejoining) `home` from the survivors'
   * reports and the standby copies. Every live peer reports: until it has,
   * it may still take an answer from the dead node that this node would
   * not count, so a peer that does not answer is asked again until it does
   * or is dead itself (its trainer's files then count as served).
   */
  private async adopt (home: NodeId, vcs: VcId[]): Promise<void> {
    const states = new Map<VcId, SurvivorReport[]>(vcs.map(vc => [vc, []]))
    // Each survivor's incarnation when it was asked: one that is not the same at adoption reported from a memory now gone.
    const askedIncarnation = new Map<NodeId, number | undefined>()
    // Ids from a survivor's report (checked by reportProblem): the layout all nodes share numbers them.
    const collect = (node: NodeId, reply: TakeoverStateReply): void => {
      for (const state of reply.vcs) states.get(state.vc as VcId)?.push({ node, epoch: state.epoch, received: state.received as FileId[], held: state.held as FileId[], heldBatches: state.heldBatches, lastBatch: state.lastBatch, servedFromMirror: state.servedFromMirror.map((file, i) => ({ file: file as FileId, batch: state.servedFromMirrorBatches[i] })) })
    }
    collect(this.node, this.reportFor(vcs))
    const generation = this.membership.generation
    pausePoint('takeover-asks')
    // Once one survivor's answer fails the takeover, the others are not asked on.
    const round = { failed: false }
    const failing = (err: Error): Error => { round.failed = true; return err }
    await Promise.all(this.membership.livePeers().filter(node => node !== home).map(async node => {
      for (let tries = 0; !round.failed && !this.membership.isDead(node) && !this.membership.closed; tries++) {
        let reply: TakeoverStateReply
        try {
          askedIncarnation.set(node, this.membership.incarnationOf(node))
          reply = await this.membership.client(node).takeoverState({ generation, node: this.node, dead: home, vcs, deaths: this.membership.deaths() })
        } catch (err) {
          if (err instanceof PeerCallError && err.takenForDead !== undefined) { this.membership.refusedAsDead(node, err); throw failing(err) }
          if (err instanceof PeerCallError && err.unreachable) this.membership.checkGone(node)
          if (tries === 0) this.log.warn({ peer: node, err: (err as Error).message }, 'a survivor did not report its state for a takeover yet; asking again until it does or is dead')
          await new Promise(resolve => setTimeout(resolve, 200))
          continue
        }
        // A report that does not say what the survivor's trainers got cannot be counted: nothing is adopted on it.
        const problem = reportProblem(reply, vcs, this.layout)
        if (problem !== undefined) throw failing(new Error(`node ${node}'s report for taking over node ${home}'s virtual chunks is malformed (${problem}); nothing taken over`))
        collect(node, reply)
        return
      }
    }))
    // A new generation (or this node's fencing) overtook the takeover: its state is gone. Or the mount is going away.
    if (compareGenerations(generation, this.membership.generation) !== 0 || this.membership.fenced !== undefined || this.membership.closed) return
    pausePoint('takeover-adopts')
    const gone = (node: NodeId): boolean => node !== this.node && (this.membership.isDead(node) || this.membership.incarnationOf(node) !== askedIncarnation.get(node))
    for (const vc of vcs) {
      const reports = states.get(vc)!.map(report => gone(report.node) ? { ...report, gone: true } : report)
      // A node that came back is another incarnation: what its trainer got before it died counts as served.
      this.engine.adopt(vc, planAdoption(reports, this.standby.get(vc), this.node, node => this.membership.isDead(node) || this.membership.isRejoining(node)), this.remote.surrender(vc))
    }
    pausePoint('takeover-wakes')
    this.remote.wakeAll(vcs)
    this.log.info({ home, vcs: vcs.length }, `took over ${vcs.length} virtual chunk(s) of node ${home}`)
  }

  /** This node's part of a takeover: what its mirrors received, hold and last got of each VC. */
  reportFor (vcs: readonly VcId[]): TakeoverStateReply {
    return {
      vcs: vcs.map(vc => {
        const { servedFromMirror, ...report } = this.remote.takeoverReport(vc)
        return { vc, ...report, servedFromMirror: servedFromMirror.map(s => s.file), servedFromMirrorBatches: servedFromMirror.map(s => s.batch) }
      })
    }
  }

  /**
   * A peer asked this node for a VC it does not own. It answers once the VC
   * is its own by its own view of deaths: the caller's may be ahead, and
   * then it is told to ask again (by then this node knows too; deaths reach
   * every node with the leases' renewals). Gives why it never will (a
   * sharded pack), or undefined once it owns `vc`.
   */
  async claim (vc: VcId): Promise<string | undefined> {
    const home = this.layout.vcs[vc].home
    if (this.membership.storage === 'sharded') return `its home, node ${home}, is the only node with its chunks`
    const owner = this.membership.ownerOf(vc)
    if (owner !== this.node) throw askAgain(`node ${this.node} takes node ${owner ?? 'none'} to answer for virtual chunk ${vc}`)
    // A takeover that failed (this node refused as dead, fenced) is no answer: the caller asks the owner it then sees.
    await this.adoptOrphans().catch((err: Error) => { throw askAgain(`node ${this.node} could not take virtual chunk ${vc} over: ${err.message}`) })
    if (!this.engine.owns(vc)) throw askAgain(`node ${this.node} has not taken virtual chunk ${vc} over yet`)
    return undefined
  }
}

/**
 * Why a survivor's takeover report cannot be read, or undefined: every VC
 * asked for is reported once, every file it names is one of that VC's,
 * and each list has its batches one for one.
 */
export function reportProblem (reply: TakeoverStateReply, asked: readonly VcId[], layout: Layout): string | undefined {
  const reported = reply.vcs.map(state => state.vc)
  if (reported.length !== asked.length || !asked.every(vc => reported.includes(vc))) return `it reports virtual chunks [${reported.join(', ')}], not the ones asked for, [${asked.join(', ')}]`
  for (const state of reply.vcs) {
    const ofVc = (files: readonly number[]): boolean => files.every(file => Number.isInteger(file) && file >= 0 && file < layout.files.length && vcOfFile(layout, file as FileId) === state.vc)
    if (!ofVc(state.received) || !ofVc(state.held) || !ofVc(state.servedFromMirror)) return `virtual chunk ${state.vc} names a file that is not one of its own`
    if (state.held.length !== state.heldBatches.length) return `virtual chunk ${state.vc} holds ${state.held.length} files with ${state.heldBatches.length} batches`
    if (state.servedFromMirror.length !== state.servedFromMirrorBatches.length) return `virtual chunk ${state.vc} served ${state.servedFromMirror.length} files from its mirror with ${state.servedFromMirrorBatches.length} batches`
  }
  return undefined
}
