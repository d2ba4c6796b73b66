// Clusters of real daemons on loopback: free ports, a shared token, every
// node mounted at once (each waits for the others' handshake), a node
// paused (SIGSTOP), resumed or mounted again, training jobs of one trainer
// process per node, and a teardown that leaves nothing mounted, paused or
// running.
import { spawn, type ChildProcess } from 'node:child_process'
import { chmodSync, writeFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import readline from 'node:readline'
import { readStats } from '../../src/cli/stats-command'
import { defaultLogFile } from '../../src/daemon/registry'
import type { MountStats } from '../../src/stats'
import { CLI_ENV, emptyDir, forceUnmount, isAlive, redirfsWith, type CliResult } from './mount'
import { SeededRandom } from '../../src/redirect/random'
import { epochBoundary, readFileAsTrainer, type ReadSample } from './readers'
import { startTcpProxy, type TcpProxy } from './tcp-proxy'

export async function freePorts (count: number): Promise<number[]> {
  const servers = await Promise.all(Array.from({ length: count }, async () => await new Promise<net.Server>(resolve => {
    const server = net.createServer()
    server.listen(0, '127.0.0.1', () => resolve(server))
  })))
  const ports = servers.map(server => (server.address() as net.AddressInfo).port)
  await Promise.all(servers.map(async server => await new Promise(resolve => server.close(resolve))))
  return ports
}

export function tokenFile (token = 'a-cluster-token-' + Math.random().toString(36).slice(2)): string {
  const file = path.join(emptyDir('redirfs-token-'), 'token')
  writeFileSync(file, token + '\n')
  chmodSync(file, 0o600)
  return file
}

export interface Cluster {
  readonly mountpoints: string[]
  readonly peers: string
  readonly token: string
  pids (): Promise<number[]>
  /** Mounts node `node` again, with the options it was first mounted with (after a kill, or an unmount). */
  mount (node: number): Promise<CliResult>
  /** Stops node `node`'s daemon (SIGSTOP), as a long GC, a swapped-out process or a frozen VM would; its mount hangs meanwhile. */
  pause (node: number): Promise<void>
  resume (node: number): void
}

interface Teardown { teardown: (fn: () => Promise<void> | void) => void }

/**
 * Mounts `sources[i]` on node i, all at once. `perNode(i)` adds options for
 * one node; `env`, the environment of every node's mount or of node i's. Resolves with the CLI results when any mount failed (`failed`).
 *
 * The nodes must know each other's ports before any listens, so the ports
 * are found free first and may be taken by another process before a node
 * binds. A node that finds its port taken fails its mount saying so; then
 * the whole cluster is mounted again on fresh ports (twice at most).
 */
export async function mountCluster (t: Teardown, sources: string[], options: string[], perNode: (node: number, ports: number[]) => string[] = () => [], env: NodeJS.ProcessEnv | ((node: number) => NodeJS.ProcessEnv) = CLI_ENV): Promise<Cluster & { results: CliResult[] }> {
  const envOf = typeof env === 'function' ? env : () => env
  const token = tokenFile()
  const mountpoints = sources.map(() => emptyDir('redirfs-node-'))
  const pids = new Map<number, number>()
  const paused = new Map<number, number>()
  t.teardown(async () => {
    // A stopped daemon cannot end: resume it first.
    for (const pid of paused.values()) resumeProcess(pid)
    for (const mountpoint of mountpoints) await forceUnmount(mountpoint)
  })
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(sources.length)
    const peers = ports.map(port => `127.0.0.1:${port}`).join(',')
    const mountNode = async (node: number): Promise<CliResult> => {
      pids.delete(node)
      return await redirfsWith(envOf(node), 'mount', sources[node], mountpoints[node], '--node', String(node), '--peers', peers, '--token-file', token, '--peer-wait', '30', ...options, ...perNode(node, ports))
    }
    const results = await Promise.all(sources.map(async (_, node) => await mountNode(node)))
    if (attempt < 3 && results.some(r => /cannot listen on .*the port is in use/.test(r.stderr))) {
      for (const mountpoint of mountpoints) await forceUnmount(mountpoint)
      continue
    }
    const pidOf = async (node: number): Promise<number> => {
      if (!pids.has(node)) pids.set(node, (await readStats(mountpoints[node])).pid)
      return pids.get(node)!
    }
    return {
      mountpoints,
      peers,
      token,
      results,
      pids: async () => await Promise.all(mountpoints.map(async (_, node) => await pidOf(node))),
      mount: mountNode,
      pause: async node => {
        const pid = await pidOf(node)
        paused.set(node, pid)
        process.kill(pid, 'SIGSTOP')
      },
      resume: node => {
        const pid = paused.get(node)
        paused.delete(node)
        if (pid !== undefined) resumeProcess(pid)
      }
    }
  }
}

/** The last messages of each node's log, for a failure to show. */
async function logTails (mountpoints: string[], lines = 12): Promise<string> {
  const tails = await Promise.all(mountpoints.map(async (mountpoint, node) => {
    const log = await readFile(await defaultLogFile(mountpoint), 'utf8').catch(() => '')
    const messages = log.trim().split('\n').slice(-lines).map(line => { try { return (JSON.parse(line) as { msg: string }).msg } catch { return line } })
    return `node ${node}:\n  ${messages.join('\n  ')}`
  }))
  return tails.join('\n')
}

function resumeProcess (pid: number): void {
  try { process.kill(pid, 'SIGCONT') } catch {}
}

/** A cluster whose nodes can be cut off from each other, all links of a node or one link between two. */
export interface PartitionableCluster extends Cluster {
  /** Cuts node `node` off from every other: their traffic, peer service and data channel, is dropped both ways. */
  cut: (node: number) => void
  heal: (node: number) => void
  /**
   * Cuts only the link between nodes `a` and `b`, both ways: each still
   * reaches the others (a partial cut). `channel` 'data': only their data
   * channels, the peer service still goes through.
   */
  cutBetween: (a: number, b: number, channel?: 'all' | 'data') => void
  healBetween: (a: number, b: number) => void
}

/**
 * `mountCluster`, with every link between two nodes through proxies of its
 * own (test/helpers/tcp-proxy.ts), so that a cut is between two nodes, as a
 * network partition is. Node j listens on an address of its own,
 * 127.0.2.(j+1), its peer service on a free port and its data channel on
 * `--data-port` D_j; node i knows it as 127.0.1.(i+1) and a port of a proxy
 * to its peer service, and reaches its data channel at 127.0.1.(i+1):D_j
 * (the host of its --peers entry, the port its handshake names), where a
 * second proxy forwards to the data channel. So each node's view of each
 * peer, both channels, can be cut apart. (A killed node's port is a
 * proxy's, which accepts: its peers learn its death from the leases, not
 * from a refused connection.)
 */
export async function mountPartitionableCluster (t: Teardown, sources: string[], options: string[]): Promise<PartitionableCluster & { results: CliResult[] }> {
  const nodes = sources.map((_, node) => node)
  const ports = await freePorts(2 * sources.length)
  const listen = nodes.map(node => ({ host: `127.0.2.${node + 1}`, port: ports[node], data: ports[sources.length + node] }))
  const viewFrom = (node: number): string => `127.0.1.${node + 1}`
  const peer = new Map<string, TcpProxy>()
  const data = new Map<string, TcpProxy>()
  const pairs = nodes.flatMap(from => nodes.filter(to => to !== from).map(to => [from, to]))
  // The data proxies first: they need the data ports, which a peer proxy's free port could take.
  for (const [from, to] of pairs) data.set(`${from}-${to}`, await startTcpProxy(t, listen[to].data, { host: viewFrom(from), port: listen[to].data, targetHost: listen[to].host }))
  for (const [from, to] of pairs) peer.set(`${from}-${to}`, await startTcpProxy(t, listen[to].port, { host: viewFrom(from), targetHost: listen[to].host }))
  const peersOf = (node: number): string => nodes.map(to => to === node ? `${listen[to].host}:${listen[to].port}` : `${viewFrom(node)}:${peer.get(`${node}-${to}`)!.port}`).join(',')
  const cluster = await mountCluster(t, sources, options, node => ['--listen', `${listen[node].host}:${listen[node].port}`, '--data-port', String(listen[node].data), '--peers', peersOf(node)])
  const link = (a: number, b: number, channel: 'all' | 'data'): TcpProxy[] =>
    [`${a}-${b}`, `${b}-${a}`].flatMap(pair => channel === 'data' ? [data.get(pair)!] : [peer.get(pair)!, data.get(pair)!])
  const links = (node: number): TcpProxy[] => nodes.filter(other => other !== node).flatMap(other => link(node, other, 'all'))
  return {
    ...cluster,
    cut: node => { for (const proxy of links(node)) proxy.cut() },
    heal: node => { for (const proxy of links(node)) proxy.heal() },
    cutBetween: (a, b, channel = 'all') => { for (const proxy of link(a, b, channel)) proxy.cut() },
    healBetween: (a, b) => { for (const proxy of link(a, b, 'all')) proxy.heal() }
  }
}

/** Polls every node's stats (skipping `skip`, paused ones) until `done` holds of them, or fails after `limitMs` naming `what`. */
export async function untilStats (mountpoints: string[], what: string, done: (stats: Array<MountStats | undefined>) => boolean, options: { skip?: number[], limitMs?: number } = {}): Promise<Array<MountStats | undefined>> {
  const deadline = Date.now() + (options.limitMs ?? 60_000)
  for (;;) {
    const stats = await Promise.all(mountpoints.map(async (mountpoint, node) => options.skip?.includes(node) === true ? undefined : await readStats(mountpoint)))
    if (done(stats)) return stats
    if (Date.now() > deadline) throw new Error(`waited ${(options.limitMs ?? 60_000) / 1000}s for ${what}; the nodes show ${JSON.stringify(stats.map(s => s?.cluster?.peers.map(p => p.state)))}; their logs end:\n${await logTails(mountpoints)}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}

export interface NodeRead extends ReadSample { readonly node: number }
export interface NodeError { readonly node: number, readonly opened: string, readonly code: string }

/**
 * One epoch as DistributedSampler deals it: a seeded permutation, node i
 * reading positions i, i+N, ... through its own mount with `readers`
 * concurrent readers. `afterEach` runs after every answered open (to kill a
 * node mid-epoch); a node whose mount dies stops reading.
 */
export async function readClusterEpoch (mountpoints: string[], samples: readonly string[], seed: number, readers = 4, afterEach?: (done: number) => Promise<void> | void, stopped: Set<number> = new Set()): Promise<{ reads: NodeRead[], errors: NodeError[] }> {
  await epochBoundary()
  const order = new SeededRandom(seed).shuffle([...samples])
  const reads: NodeRead[] = []
  const errors: NodeError[] = []
  let done = 0
  await Promise.all(mountpoints.map(async (mountpoint, node) => {
    const share = order.filter((_, i) => i % mountpoints.length === node)
    let next = 0
    await Promise.all(Array.from({ length: readers }, async () => {
      while (next < share.length && !stopped.has(node)) {
        const relative = share[next++]
        try {
          reads.push({ node, ...(await readFileAsTrainer(mountpoint, relative)) })
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code ?? 'unknown'
          if (stopped.has(node)) return
          errors.push({ node, opened: relative, code })
        }
        await afterEach?.(++done)
      }
    }))
  }))
  return { reads, errors }
}

/**
 * An epoch in which the last node is killed (SIGKILL) a third of the way
 * through. At that point its trainer stops and every reader pauses until
 * the victim's stats say its sync caught up (nothing it served is unknown
 * to its peers), so that what its trainer got can be checked against what
 * the survivors get after the takeover. `victimReads` is what it got.
 */
export async function epochWithKill (t: { comment: (message: string) => void }, mountpoints: string[], samples: readonly string[], pids: number[], seed: number): ReturnType<typeof readClusterEpoch> {
  const victim = mountpoints.length - 1
  const stopped = new Set<number>()
  let killed: Promise<void> | undefined
  const settleThenKill = async (): Promise<void> => {
    const deadline = Date.now() + 120_000
    // The victim's in-flight opens end on their own; then its updates go out within a few sync periods.
    while ((await readStats(mountpoints[victim])).cluster!.unsynced > 0) {
      if (Date.now() > deadline) throw new Error(`node ${victim} never synced its updates to its peers`)
      await new Promise(resolve => setTimeout(resolve, 50))
    }
    process.kill(pids[victim], 'SIGKILL')
    t.comment(`killed node ${victim} after ${Math.floor(samples.length / 3)} opens, once it had synced`)
  }
  return await readClusterEpoch(mountpoints, samples, seed, 4, async done => {
    if (done === Math.floor(samples.length / 3)) {
      stopped.add(victim)
      killed = settleThenKill()
    }
    await killed
  }, stopped)
}

const SHARE_READER = path.resolve(__dirname, 'share_reader.py')

/** One open by a job's trainer: what it got (`content`, the sha1 of the bytes) or why not (`error`, an errno's name). */
export interface TrainerRead { readonly node: number, readonly opened: string, readonly content?: string, readonly error?: string }

/**
 * A training job: one trainer process per node (test/helpers/share_reader.py),
 * all named `runId` by REDIRFS_RUN_ID as a launcher names its ranks. Each
 * epoch deals a seeded permutation of the samples as DistributedSampler
 * does (the job's i-th node reads positions i, i + N, ...), and the next
 * epoch starts only once every trainer has read its share: the barrier a
 * DDP job keeps. `onRead` hears of every open answered, in the order they
 * come in (to pause or kill a node part-way).
 */
export class Job {
  private readonly trainers = new Map<number, { process: ChildProcess, lines: readline.Interface }>()
  private epochs = 0

  constructor (t: Teardown, mountpoints: string[], readonly runId: string, readonly nodes = mountpoints.map((_, node) => node), readers = 4) {
    for (const node of nodes) {
      const child = spawn('/usr/bin/python3', [SHARE_READER, mountpoints[node], '--readers', String(readers)], { stdio: ['pipe', 'pipe', 'inherit'], env: { ...process.env, REDIRFS_RUN_ID: runId }, detached: true })
      this.trainers.set(node, { process: child, lines: readline.createInterface({ input: child.stdout! }) })
    }
    t.teardown(async () => await this.end())
  }

  /** Reads one epoch; resolves once every trainer that still runs has read its share. */
  async epoch (samples: readonly string[], seed: number, onRead?: (read: TrainerRead, answered: number) => void): Promise<TrainerRead[]> {
    const order = new SeededRandom(seed).shuffle([...samples])
    const reads: TrainerRead[] = []
    const epoch = this.epochs++
    await Promise.all(this.nodes.map(async (node, i) => {
      const trainer = this.trainers.get(node)!
      if (trainer.process.exitCode !== null || trainer.process.signalCode !== null) return
      const done = new Promise<void>(resolve => {
        const onLine = (line: string): void => {
          const message = JSON.parse(line) as { opened?: string, sha1?: string, error?: string, done?: number }
          if (message.done === epoch) {
            trainer.lines.off('line', onLine)
            resolve()
            return
          }
          const read = { node, opened: message.opened!, content: message.sha1, error: message.error }
          reads.push(read)
          onRead?.(read, reads.length)
        }
        trainer.lines.on('line', onLine)
        trainer.process.once('exit', () => resolve())
      })
      trainer.process.stdin!.write(JSON.stringify(order.filter((_, position) => position % this.nodes.length === i)) + '\n')
      await done
    }))
    return reads
  }

  /** Ends the job: its trainers exit (killed, if they do not within a while). */
  async end (): Promise<void> {
    await Promise.all([...this.trainers.values()].map(async ({ process: child }) => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = new Promise(resolve => child.once('exit', resolve))
      child.stdin!.end()
      const timer = setTimeout(() => { try { process.kill(-child.pid!, 'SIGKILL') } catch {} }, 120_000)
      await exited
      clearTimeout(timer)
    }))
  }

  /** Whether node `node`'s trainer still runs. */
  running (node: number): boolean { const child = this.trainers.get(node)!.process; return child.exitCode === null && child.signalCode === null && isAlive(child.pid!) }
}
