/**
 * Liveness: whether this node may serve, and who is dead, from the leases
 * its peers grant it and the suspicions and deaths they tell
 * (docs/design.md, "Deaths and fencing"). The caller gives the time
 * (milliseconds of a monotonic clock): this class keeps no clock and no
 * timer, so that its rules can be tested alone.
 *
 * - Grants. A peer's renewal is a promise: this node will not suspect that
 *   incarnation for `grantMs` from the renewal's arrival.
 * - Leases. A peer's grant, counted from when this node asked (before the
 *   peer answered, so the lease ends before the grant does), and shortened
 *   by a tenth for clocks that run at slightly different rates.
 * - Quorum. A node serves only while it holds leases from a majority of
 *   the cluster, itself counted. A peer whose process went away (its port
 *   refused a connection) while its lease was held counts as held for
 *   good: it never suspected this node, and never will.
 * - Suspicion. A peer not heard from for longer than this node's grant is
 *   suspected, for good (that incarnation): its renewals are refused from
 *   then on. Only a node that holds a quorum suspects: one cut off from
 *   the majority, or stalled, is the one at fault, and its silence says
 *   nothing of the others. While this node's own loop was stalled (a
 *   pause, an overload) it could hear no one, so its grants run on for as
 *   long.
 * - Deaths. An incarnation is dead once a majority of the cluster suspects
 *   it, once its port refuses a connection (gone), or once it says so
 *   itself: a node refused by a peer that suspects it stops serving (it is
 *   fenced) and comes back as a new incarnation. A dead incarnation never
 *   answers for anything again. Suspicions a node only hears of do not
 *   fence it: a peer that stopped hearing from it across a partial cut
 *   may be the one cut off.
 *
 * Why one owner follows: an incarnation certified dead by a majority's
 * suspicions holds no lease from any of them (each suspected it only once
 * its grant had run out, and never grants it again), so it holds leases
 * from a minority at most and serves nothing; one gone or fenced serves
 * nothing by itself. Whoever takes its chunks over acts only on such a
 * death. The same majority keeps a node cut off from the rest from taking
 * them for dead.
 */
import type { NodeId } from '../redirect/layout'

export interface Incarnation { readonly node: NodeId, readonly incarnation: number }
/** `gone`: its process is gone; otherwise a majority stopped hearing from it, or it stopped itself. */
export interface Death extends Incarnation { readonly gone: boolean }
/** `by` stopped hearing from that incarnation and will never renew its lease. */
export interface Suspicion extends Incarnation { readonly by: NodeId }

/** What a renewal gets: a grant, or a refusal (and whether it means the asker is dead to this node). */
export type Renewal = { readonly grantedMs: number } | { readonly refusal: string, readonly takenForDead: boolean }

export type PeerLiveness = 'alive' | 'suspected' | 'dead'

/** A lease is the grant shortened by this share: clocks of two machines may run at slightly different rates. */
const LEASE_SHARE = 0.9

/** A fresh incarnation: ordered by time (a node mounted again, or fenced, has a later one), random below the millisecond. */
export function newIncarnation (after = 0): number {
  return Math.max(after + 1, Date.now() * 1024 + Math.floor(Math.random() * 1024))
}

interface Peer {
  /** Its incarnation as this node knows it (the latest heard of). */
  incarnation?: number
  /** When it last renewed (or was admitted): this node's grant runs to then plus `grantMs`. */
  heardAt?: number
  /** This node's lease from it. */
  leaseUntil: number
  /** This node stopped hearing from it: never again a grant, for this incarnation. */
  suspected: boolean
  /** Its process went away while this node held its lease (see above). */
  heldToEnd: boolean
}

const key = (node: NodeId, incarnation: number): string => `${node}:${incarnation}`

export class Liveness {
  private readonly peers: Peer[]
  private readonly deaths = new Map<string, Death>()
  /** Who suspects each incarnation. */
  private readonly suspecters = new Map<string, { readonly of: Incarnation, readonly by: Set<NodeId> }>()
  private lastTick?: number

  /**
   * `grantMs`: how long a renewal keeps this node from suspecting its
   * asker (the peer timeout). `stallMs`: a gap between two ticks longer
   * than this was a stall of this node's own loop.
   */
  constructor (readonly self: NodeId, readonly nodes: number, public incarnation: number, readonly grantMs: number, private readonly stallMs = grantMs / 4) {
    this.peers = Array.from({ length: nodes }, () => ({ leaseUntil: 0, suspected: false, heldToEnd: false }))
  }

  get majority (): number { return Math.floor(this.nodes / 2) + 1 }

  incarnationOf (node: NodeId): number | undefined { return node === this.self ? this.incarnation : this.peers[node].incarnation }

  /** Whether the incarnation known of `node` is dead (one not yet known is not). */
  isDead (node: NodeId): boolean {
    const incarnation = this.incarnationOf(node)
    return incarnation !== undefined && this.deaths.has(key(node, incarnation))
  }

  /** Whether `incarnation` of `node` is dead, or older than one heard of. */
  isPast (node: NodeId, incarnation: number): boolean {
    const known = this.incarnationOf(node)
    return this.deaths.has(key(node, incarnation)) || (known !== undefined && incarnation < known)
  }

  stateOf (node: NodeId): PeerLiveness {
    return this.isDead(node) ? 'dead' : this.peers[node].suspected ? 'suspected' : 'alive'
  }

  /**
   * A handshake with `incarnation` of `node` (its request, or its reply):
   * whether it is one this node knew ('known'), the first heard of ('new'),
   * a later one than known ('back': the earlier one is dead, and `death`
   * says so if that is news), or an earlier one or a dead one ('past':
   * refuse it).
   */
  admit (node: NodeId, incarnation: number, now: number): { kind: 'new' | 'known' | 'back' | 'past', death?: Death } {
    const peer = this.peers[node]
    if (this.isPast(node, incarnation)) return { kind: 'past' }
    if (peer.incarnation === incarnation) {
      peer.heardAt = Math.max(peer.heardAt ?? now, now)
      return { kind: 'known' }
    }
    const earlier = peer.incarnation
    // An earlier incarnation known only from news of its death (this node, mounted since, never heard from it)
    // may have come back long ago: this one is the first heard of, not one back. If it rejoins in this
    // generation, it says so itself in its renewals.
    const back = earlier !== undefined && peer.heardAt !== undefined
    const death = back ? this.record({ node, incarnation: earlier, gone: false }, now) : undefined
    this.peers[node] = { incarnation, heardAt: now, leaseUntil: 0, suspected: this.suspectedBySelf(node, incarnation), heldToEnd: false }
    return { kind: back ? 'back' : 'new', death }
  }

  /** A peer asks to renew its lease; `grant`: false while this node may grant none (it is starting), though it hears the peer. */
  renewalFrom (node: NodeId, incarnation: number, now: number, grant = true): Renewal {
    const peer = this.peers[node]
    if (this.isPast(node, incarnation)) return { refusal: `node ${this.self} takes that incarnation of node ${node} for dead`, takenForDead: true }
    if (peer.incarnation !== incarnation) return { refusal: `node ${this.self} has not had a handshake from this incarnation of node ${node}`, takenForDead: false }
    if (peer.suspected) return { refusal: `node ${this.self} did not hear from node ${node} for longer than ${this.grantMs / 1000}s`, takenForDead: true }
    peer.heardAt = now
    return grant ? { grantedMs: this.grantMs } : { refusal: `node ${this.self} is starting`, takenForDead: false }
  }

  /** A renewal this node sent at `sentAt` was granted for `grantedMs`. */
  granted (node: NodeId, incarnation: number, sentAt: number, grantedMs: number): void {
    const peer = this.peers[node]
    if (peer.incarnation !== incarnation || this.isDead(node)) return
    peer.leaseUntil = Math.max(peer.leaseUntil, sentAt + grantedMs * LEASE_SHARE)
  }

  /** Whether a majority of the cluster, this node counted, lets it serve now. */
  hasQuorum (now: number): boolean {
    let held = 1
    for (const [node, peer] of this.peers.entries()) if (node !== this.self && (peer.heldToEnd || peer.leaseUntil > now)) held++
    return held >= this.majority
  }

  /** When this node's quorum ends, if nothing is renewed (0: it has none). */
  quorumUntil (now: number): number {
    if (!this.hasQuorum(now)) return 0
    const ends = this.peers.flatMap((peer, node) => node !== this.self && !peer.heldToEnd && peer.leaseUntil > now ? [peer.leaseUntil] : []).sort((a, b) => b - a)
    const needed = this.majority - 1 - this.peers.filter((peer, node) => node !== this.self && peer.heldToEnd).length
    return needed <= 0 ? Infinity : ends[needed - 1]
  }

  /**
   * Time passes: a stall of this node's own loop extends its grants by its
   * length; then every peer not heard from for longer than its grant is
   * suspected. Gives the new suspicions and the deaths they complete.
   */
  tick (now: number): { suspected: Incarnation[], deaths: Death[] } {
    if (this.lastTick !== undefined && now - this.lastTick > this.stallMs) {
      for (const peer of this.peers) if (peer.heardAt !== undefined) peer.heardAt += now - this.lastTick
    }
    this.lastTick = now
    const suspected: Incarnation[] = []
    for (const [index, peer] of this.peers.entries()) {
      const node = index as NodeId
      if (node === this.self || peer.incarnation === undefined || peer.suspected || this.isDead(node)) continue
      if (peer.heardAt !== undefined && now > peer.heardAt + this.grantMs && this.hasQuorum(now)) {
        peer.suspected = true
        suspected.push({ node, incarnation: peer.incarnation })
        this.suspectersOf({ node, incarnation: peer.incarnation }).add(this.self)
      }
    }
    return { suspected, deaths: this.certify(now) }
  }

  /** The port of `node`'s incarnation refused a connection: its process is gone. Gives the death, if it is news. */
  gone (node: NodeId, incarnation: number, now: number): Death | undefined {
    return this.record({ node, incarnation, gone: true }, now)
  }

  /**
   * What a peer knows (a renewal, a handshake reply, a takeover): gives the
   * deaths that are news, why this node must stop, if it learned that it
   * is dead, and the later incarnations, alive by the news, of nodes it
   * heard from and takes for dead (`isBackUnheard`).
   */
  learn (news: { dead?: readonly Death[], suspicions?: readonly Suspicion[], alive?: readonly Incarnation[] }, now: number): { deaths: Death[], fenced?: string, backUnheard: Incarnation[] } {
    const deaths: Death[] = []
    let fenced: string | undefined
    for (const { node, incarnation } of news.alive ?? []) this.learnAlive(node, incarnation)
    for (const death of news.dead ?? []) {
      if (death.node === this.self && death.incarnation === this.incarnation) fenced ??= 'its peers take it for dead'
      const known = this.record(death, now)
      if (known !== undefined) deaths.push(known)
    }
    for (const { node, incarnation, by } of news.suspicions ?? []) {
      this.suspectersOf({ node, incarnation }).add(by)
      // Suspected by an earlier incarnation of this node (remounted since): binding on this one too.
      if (by === this.self && node !== this.self && this.peers[node].incarnation === incarnation) this.peers[node].suspected = true
    }
    deaths.push(...this.certify(now))
    const backUnheard = (news.alive ?? []).filter(({ node, incarnation }) => this.isBackUnheard(node, incarnation))
    return { deaths, fenced, backUnheard }
  }

  /**
   * A peer knows `incarnation` of `node` alive. Taken as that node's
   * current one only by a node that never heard from the one it knows (a
   * node just mounted, which may know an earlier incarnation only from
   * news of its death): else it would take a node that came back for dead
   * and answer for its chunks. One this node heard from it learns of from
   * that node's own handshake, which tells whether it is back.
   */
  private learnAlive (node: NodeId, incarnation: number): void {
    const peer = this.peers[node]
    if (node === this.self || this.isPast(node, incarnation) || peer.heardAt !== undefined || peer.incarnation === incarnation) return
    this.peers[node] = { incarnation, leaseUntil: 0, suspected: this.suspectedBySelf(node, incarnation), heldToEnd: false }
  }

  /**
   * A later incarnation of a node this node heard from and takes for dead:
   * only that node's handshake tells whether it is back, and it may never
   * send one (each of two nodes fenced at once takes the other for dead,
   * so neither rejoins with the other): this node must ask for it.
   */
  private isBackUnheard (node: NodeId, incarnation: number): boolean {
    return node !== this.self && this.isDead(node) && !this.isPast(node, incarnation) && this.peers[node].incarnation !== incarnation
  }

  /** The incarnation of every other node this node knows alive (dead or not yet heard of: not named). */
  alive (): Incarnation[] {
    return this.peers.flatMap((peer, node) => node !== this.self && peer.incarnation !== undefined && !this.isDead(node as NodeId) ? [{ node: node as NodeId, incarnation: peer.incarnation }] : [])
  }

  /**
   * What this node tells its peers: the latest death it knows of each node
   * (an earlier incarnation is dead if a later one is), and every suspicion
   * of the incarnations it knows alive. So the news stays as small as the
   * cluster, however many times its nodes came back.
   */
  news (): { dead: Death[], suspicions: Suspicion[] } {
    const latest = new Map<NodeId, Death>()
    for (const death of this.deaths.values()) if ((latest.get(death.node)?.incarnation ?? -1) < death.incarnation) latest.set(death.node, death)
    return {
      dead: [...latest.values()],
      suspicions: [...this.suspecters.values()]
        .filter(({ of }) => this.incarnationOf(of.node) === of.incarnation && !this.isDead(of.node))
        .flatMap(({ of, by }) => [...by].map(suspecter => ({ ...of, by: suspecter })))
    }
  }

  /**
   * This node stops: its incarnation is dead, and it goes on as `next`,
   * with no lease; what it suspects it still suspects (it promised).
   */
  reincarnate (next: number, now: number): void {
    this.record({ node: this.self, incarnation: this.incarnation, gone: false }, now)
    this.incarnation = next
    for (const peer of this.peers) peer.leaseUntil = 0
  }

  /** Records a death; gives it if it is news about the incarnation known (or a later one). */
  private record (death: Death, now: number): Death | undefined {
    const { node, incarnation } = death
    if (this.deaths.has(key(node, incarnation))) return undefined
    this.deaths.set(key(node, incarnation), death)
    if (node === this.self) return undefined
    const peer = this.peers[node]
    if (peer.incarnation !== undefined && incarnation < peer.incarnation) return undefined
    if (peer.incarnation !== incarnation) this.peers[node] = { incarnation, leaseUntil: 0, suspected: false, heldToEnd: false }
    else if (death.gone && peer.leaseUntil > now) peer.heldToEnd = true
    return death
  }

  /** Deaths a majority's suspicions now make. */
  private certify (now: number): Death[] {
    const deaths: Death[] = []
    for (const { of, by } of this.suspecters.values()) {
      if (by.size < this.majority) continue
      const death = this.record({ ...of, gone: false }, now)
      if (death !== undefined) deaths.push(death)
    }
    return deaths
  }

  private suspectersOf (of: Incarnation): Set<NodeId> {
    const known = this.suspecters.get(key(of.node, of.incarnation))
    if (known !== undefined) return known.by
    const by = new Set<NodeId>()
    this.suspecters.set(key(of.node, of.incarnation), { of, by })
    return by
  }

  private suspectedBySelf (node: NodeId, incarnation: number): boolean {
    return this.suspecters.get(key(node, incarnation))?.by.has(this.self) === true
  }
}
