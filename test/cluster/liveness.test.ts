// The rules of leases, suspicions and deaths (src/cluster/liveness.ts), with
// the time given by the test: each behaviour on its own, then a seeded
// model of nodes that pause, are cut off and come back, checked against
// the one property that matters: an incarnation the cluster takes for dead
// never holds a quorum of leases again.
import t from 'tap'
import { Liveness, newIncarnation } from '../../src/cluster/liveness'
import type { NodeId } from '../../src/redirect/layout'
import { SeededRandom } from '../../src/redirect/random'

const GRANT = 1000
const id = (n: number): NodeId => n as NodeId

/** Node `n` of a cluster of `nodes`, with incarnation 100 + n, which has had a handshake from every peer at time 0. */
function node (n: number, nodes = 3): Liveness {
  const liveness = new Liveness(id(n), nodes, 100 + n, GRANT)
  for (let peer = 0; peer < nodes; peer++) if (peer !== n) liveness.admit(id(peer), 100 + peer, 0)
  liveness.tick(0)
  return liveness
}

/**
 * Ticks `liveness` every tenth of a grant from `from` to `to` (its loop
 * running), renewing both ways with `peers` at each tick; gives the
 * suspicions and deaths of those ticks.
 */
function runUntil (liveness: Liveness, from: number, to: number, peers: Liveness[] = [], peersTick = false): ReturnType<Liveness['tick']> {
  let all: ReturnType<Liveness['tick']> = { suspected: [], deaths: [] }
  for (let now = from; ; now = Math.min(to, now + GRANT / 10)) {
    for (const peer of peers) { renew(liveness, peer, now); renew(peer, liveness, now) }
    all = mergeTicks(all, liveness.tick(now))
    if (peersTick) for (const peer of peers) peer.tick(now)
    if (now === to) return all
  }
}

const mergeTicks = (a: ReturnType<Liveness['tick']>, b: ReturnType<Liveness['tick']>): ReturnType<Liveness['tick']> => ({ suspected: [...a.suspected, ...b.suspected], deaths: [...a.deaths, ...b.deaths] })

/** `from` renews its lease with `to` at `now`, answered at once. */
function renew (from: Liveness, to: Liveness, now: number): boolean {
  const renewal = to.renewalFrom(from.self, from.incarnation, now)
  if ('grantedMs' in renewal) from.granted(to.self, to.incarnation, now, renewal.grantedMs)
  return 'grantedMs' in renewal
}

t.test('a node serves only while a majority of the cluster, itself counted, holds it a lease', async t => {
  const [a, b, c] = [node(0), node(1), node(2)]
  t.notOk(a.hasQuorum(0), 'no lease yet: no quorum')
  t.ok(renew(a, b, 0))
  t.ok(a.hasQuorum(500), 'one peer of two granted: 2 of 3')
  t.notOk(a.hasQuorum(GRANT * 0.9 + 1), 'the lease ends before the grant does (a tenth early)')
  t.ok(renew(a, c, 800))
  t.ok(a.hasQuorum(1500), 'the other peer\'s lease holds it')
})

t.test('a peer not heard from for longer than the grant is suspected, for good: its renewals are refused as taken for dead', async t => {
  const [a, b, c] = [node(0), node(1), node(2)]
  renew(b, a, 200)
  t.same(runUntil(a, 0, 1100, [c]).suspected, [], 'node 1, heard at 200, is not suspected yet')
  t.equal(a.stateOf(id(1)), 'alive')
  t.same(runUntil(a, 1100, 1300, [c]).suspected, [{ node: 1, incarnation: 101 }], 'past its grant: suspected')
  t.equal(a.stateOf(id(1)), 'suspected')
  const renewal = a.renewalFrom(b.self, b.incarnation, 1301)
  t.same(renewal, { refusal: 'node 0 did not hear from node 1 for longer than 1s', takenForDead: true }, 'and never renewed again')
})

t.test('a node without a quorum suspects no one: cut off from the majority, it is the one at fault', async t => {
  const a = node(0)
  t.same(runUntil(a, 0, 5000).suspected, [], 'alone for 5 grants, it suspects neither peer')
})

t.test('a stall of the node\'s own loop is not a silence of its peers: its grants run on for as long', async t => {
  const [a, c] = [node(0), node(2)]
  runUntil(a, 0, 800, [c])
  t.same(a.tick(5000).suspected, [], 'after a 4.2 s pause of its own, it suspects no one')
  t.same(runUntil(a, 5000, 5150, [c]).suspected, [], 'nor, its leases renewed, within what was left of node 1\'s grant when it stopped')
  t.same(runUntil(a, 5150, 5300, [c]).suspected.map(s => s.node), [1], 'but once that ran out too, it does')
})

t.test('a majority\'s suspicions make a death; one suspicion does not', async t => {
  const [a, c] = [node(0), node(2)]
  runUntil(a, 0, 1100, [c], true)
  t.equal(a.stateOf(id(1)), 'suspected', 'one of three suspects node 1')
  t.notOk(a.isDead(id(1)), 'and it is not dead')
  t.equal(c.stateOf(id(1)), 'suspected', 'another does')
  const { deaths } = a.learn(c.news(), 1101)
  t.same(deaths, [{ node: 1, incarnation: 101, gone: false }], 'two of three: node 1 is dead')
  t.ok(a.isDead(id(1)))
  t.same(a.learn(c.news(), 1102).deaths, [], 'told once')
})

t.test('a node refused by a peer that suspects it must stop (hearing of the suspicion is not enough); it comes back as a later incarnation', async t => {
  const [a, b, c] = [node(0), node(1), node(2)]
  runUntil(a, 0, 1100, [c])
  t.equal(b.learn(a.news(), 1101).fenced, undefined, 'told of the suspicion: node 0 may be the one cut off')
  t.match(a.renewalFrom(b.self, b.incarnation, 1101), { takenForDead: true }, 'refused by node 0 itself: it stops')
  t.match(b.learn({ dead: [{ node: id(1), incarnation: 101, gone: false }] }, 1101).fenced, /take it for dead/, 'told of its death: it stops')
  const next = newIncarnation(b.incarnation)
  b.reincarnate(next, 1002)
  t.ok(next > 101)
  t.same(a.admit(id(1), next, 1003), { kind: 'back', death: { node: 1, incarnation: 101, gone: false } }, 'a later incarnation: the earlier one is dead')
  t.equal(a.stateOf(id(1)), 'alive', 'and the new one is not suspected')
  t.equal(a.admit(id(1), 101, 1004).kind, 'past', 'the earlier one is refused')
})

t.test('a node mounted after a peer came back learns of that peer\'s earlier death first: the peer\'s incarnation is new to it, not one back', async t => {
  const a = node(0)
  a.learn({ dead: [{ node: id(1), incarnation: 101, gone: false }] }, 0)
  const later = newIncarnation(101)
  a.admit(id(1), later, 1)
  const remounted = new Liveness(id(2), 3, 300, GRANT)
  remounted.learn(a.news(), 2)
  t.equal(remounted.stateOf(id(1)), 'dead', 'told only of the death, the incarnation it heard of is dead')
  t.same(remounted.admit(id(1), later, 3), { kind: 'new' }, 'its handshake: a node first heard of, not one back (which would take it to rejoin)')
  t.equal(remounted.stateOf(id(1)), 'alive')
  t.equal(remounted.admit(id(1), 101, 4).kind, 'past', 'the dead incarnation is still refused')
})

t.test('a node mounted after a peer came back, told by another peer who is alive, does not take that peer for dead before its handshake', async t => {
  const a = node(0)
  const later = newIncarnation(101)
  a.admit(id(1), later, 1)
  t.same(a.alive(), [{ node: 1, incarnation: later }, { node: 2, incarnation: 102 }], 'node 0 names the incarnations it knows alive')
  const remounted = new Liveness(id(2), 3, 300, GRANT)
  remounted.learn({ ...a.news(), alive: a.alive() }, 2)
  t.equal(remounted.stateOf(id(1)), 'alive', 'node 1 is alive as its later incarnation: start-up waits for its handshake')
  t.equal(remounted.incarnationOf(id(1)), later)
  t.same(remounted.admit(id(1), later, 3), { kind: 'known' }, 'its handshake: the incarnation it was told of, not one back')
  t.equal(remounted.admit(id(1), 101, 4).kind, 'past', 'the dead incarnation is still refused')
  remounted.learn({ alive: [{ node: id(1), incarnation: 101 }] }, 5)
  t.equal(remounted.incarnationOf(id(1)), later, 'news of an earlier incarnation alive changes nothing')
  const renewedFirst = new Liveness(id(2), 3, 301, GRANT)
  renewedFirst.learn({ ...a.news(), alive: [{ node: id(0), incarnation: a.incarnation }] }, 7)
  t.equal(renewedFirst.stateOf(id(0)), 'alive', 'a renewal before any handshake reply: the asker, named alive as the incarnation it renews, is not taken for dead')
  t.equal(renewedFirst.stateOf(id(1)), 'dead', 'told only of node 1\'s death (the asker named no one else alive), node 1 is dead')
  const heard = node(2)
  heard.learn({ dead: [{ node: id(1), incarnation: 101, gone: false }], alive: [{ node: id(1), incarnation: later }] }, 6)
  t.equal(heard.stateOf(id(1)), 'dead', 'a node that heard from the earlier incarnation learns of the later one from its own handshake (which says it is back), not from news')
})

t.test('a port that refuses a connection is a death: a peer gone while its lease was held counts for the quorum for good', async t => {
  const [a, b, c] = [node(0), node(1), node(2)]
  renew(a, b, 0)
  renew(a, c, 0)
  t.ok(a.gone(id(1), 101, 500), 'gone while its lease held')
  t.ok(a.gone(id(2), 102, 950), 'gone after its lease ended')
  t.ok(a.hasQuorum(10_000), 'node 1 never suspected it, and never will: with it, 2 of 3')
  const d = node(0)
  renew(d, node(1), 0)
  d.gone(id(1), 101, 950)
  d.gone(id(2), 102, 950)
  t.notOk(d.hasQuorum(1000), 'gone after the leases ended: no quorum')
})

t.test('a node that comes back as a new incarnation takes on what its earlier one suspected', async t => {
  const [a, c] = [node(0), node(2)]
  runUntil(a, 0, 1100, [c])
  const remounted = new Liveness(id(0), 3, 200, GRANT)
  remounted.learn(a.news(), 0)
  remounted.admit(id(1), 101, 0)
  t.match(remounted.renewalFrom(id(1), 101, 1), { takenForDead: true }, 'its renewals are refused')
})

t.test('a node that grants nothing yet (starting) still hears its peers', async t => {
  const [a, c] = [node(0), node(2)]
  runUntil(a, 0, 900, [c])
  t.match(a.renewalFrom(id(1), 101, 900, false), { refusal: 'node 0 is starting', takenForDead: false })
  t.same(runUntil(a, 900, 1850, [c]).suspected, [], 'node 1 was heard at 900')
  t.same(runUntil(a, 1850, 2000, [c]).suspected.map(s => s.node), [1], 'and suspected a grant later')
})

/**
 * A seeded model of 3 to 5 nodes that renew every tenth of a grant: a
 * node may pause (it does nothing, and its clock jumps when it resumes),
 * be cut off from some peers, be killed (its port then refuses: its peers
 * learn it is gone), or be mounted again (a new incarnation that grants
 * nothing before it has heard from every peer it does not take for dead).
 * A node that learns it was taken for dead comes back as a new
 * incarnation. At every step: a node holding a quorum of leases is never
 * one that some node takes for dead.
 */
t.test('seeded schedules of pauses, partitions, kills and remounts: a node taken for dead never holds a quorum', async t => {
  let checks = 0
  let fencings = 0
  let kills = 0
  for (let seed = 1; seed <= 40; seed++) {
    const random = new SeededRandom(seed)
    const count = 3 + (seed % 3)
    const nodes = Array.from({ length: count }, (_, n) => node(n, count))
    const started = nodes.map(() => true)
    const heardFrom = nodes.map(() => new Set<number>())
    const running = nodes.map(() => true)
    // Until when each node is paused, cut off from each other node, or killed (then mounted again).
    const pausedUntil = nodes.map(() => 0)
    const cutUntil = nodes.map(() => nodes.map(() => 0))
    const deadUntil = nodes.map(() => 0)
    const paused = { has: (n: number): boolean => pausedUntil[n] > now }
    const linked = (a: number, b: number): boolean => !paused.has(a) && !paused.has(b) && cutUntil[a][b] <= now && cutUntil[b][a] <= now
    // Faults last from a few tenths of a grant to a few grants: around the lease's end is where it matters.
    const duration = (): number => 100 * (2 + random.below(40))
    let now = 0
    for (; now < 20_000; now += 100) {
      const event = random.below(100)
      const n = random.below(count)
      if (event < 3 && running[n]) pausedUntil[n] = now + duration()
      if (event >= 3 && event < 6) { const other = random.below(count); cutUntil[n][other] = now + duration() }
      if (event === 6 && running[n]) { running[n] = false; deadUntil[n] = now + duration(); kills++ }
      if (!running[n] && deadUntil[n] <= now && event < 20) {
        nodes[n] = new Liveness(id(n), count, newIncarnation(nodes[n].incarnation), GRANT)
        running[n] = true
        started[n] = false
        heardFrom[n] = new Set()
      }
      /** A node holding a quorum serves; none may take it for dead then. */
      const check = (i: number): void => {
        const a = nodes[i]
        if (paused.has(i) || !running[i] || !a.hasQuorum(now)) return
        for (const [j, other] of nodes.entries()) {
          if (!running[j]) continue
          checks++
          if (other.isPast(a.self, a.incarnation)) t.fail(`seed ${seed}, ${now} ms: node ${i} holds a quorum, but node ${j} takes incarnation ${a.incarnation} for dead`)
        }
      }
      for (const [i, a] of nodes.entries()) {
        if (paused.has(i) || !running[i]) continue
        a.tick(now)
        // Before it hears from anyone (just resumed, say), it may serve on what it holds.
        check(i)
        const fenceNode = (x: Liveness, why: string | undefined): void => { if (why !== undefined) { fencings++; x.reincarnate(newIncarnation(x.incarnation), now) } }
        const fence = (why: string | undefined): void => fenceNode(a, why)
        for (const [j, b] of nodes.entries()) {
          if (i === j || !linked(i, j)) continue
          if (!running[j]) {
            // Its port refuses: gone.
            const known = a.incarnationOf(id(j))
            if (known !== undefined) a.gone(id(j), known, now)
            continue
          }
          // A handshake when either does not know the other's incarnation; then the renewal, news both ways.
          if (b.incarnationOf(id(i)) !== a.incarnation || a.incarnationOf(id(j)) !== b.incarnation) {
            if (b.admit(a.self, a.incarnation, now).kind === 'past') { fence('refused'); continue }
            a.admit(b.self, b.incarnation, now)
          }
          fence(a.learn(b.news(), now).fenced)
          heardFrom[i].add(j)
          const renewal = b.renewalFrom(a.self, a.incarnation, now, started[j])
          fenceNode(b, b.learn(a.news(), now).fenced)
          if ('grantedMs' in renewal) a.granted(b.self, b.incarnation, now, renewal.grantedMs)
          else if (renewal.takenForDead) fence(renewal.refusal)
        }
        started[i] ||= nodes.every((_, j) => j === i || heardFrom[i].has(j) || a.isDead(id(j)))
      }
      for (let i = 0; i < count; i++) check(i)
    }
  }
  t.ok(checks > 10_000, `${checks} checks`)
  t.ok(fencings > 40, `${fencings} times a node learned that it was taken for dead, and came back`)
  t.ok(kills > 10, `${kills} kills`)
})
