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
 * one node. Resolves with the CLI results when any mount failed (`failed`).
 *
 * The nodes must know each other's ports before any listens, so the ports
 * are found free first and may be taken by another process before a node
 * binds. A node that finds its port taken fails its mount saying so; then
 * the whole cluster is mounted again on fresh ports (twice at most).
 */
export async function mountCluster (t: Teardown, sources: string[], options: string[], perNode: (node: number, ports: number[]) => string[] = () => [], env: NodeJS.ProcessEnv = CLI_ENV): Promise<Cluster & { results: CliResult[] }> {
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
      return await redirfsWith(env, 'mount', sources[node], mountpoints[node], '--node', String(node), '--peers', peers, '--token-file', token, '--peer-wait', '30', ...options, ...perNode(node, ports))
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

/** A cluster whose nodes' peer services can be cut off from each other. */
export interface PartitionableCluster extends Cluster {
  /** Cuts node `node` off from every other: their peer services' traffic is dropped both ways. */
  cut: (node: number) => void
  heal: (node: number) => void
}

/**
 * `mountCluster`, with node i listening on its own port and node j
 * reaching it through a proxy of its own (test/helpers/tcp-proxy.ts), so
 * that a cut is between two nodes, as a network partition is. The data
 * channel goes to the port each node names in its handshake: it is not
 * cut, and a node without a quorum of leases sends nothing on it.
 */
export async function mountPartitionableCluster (t: Teardown, sources: string[], options: string[]): Promise<PartitionableCluster & { results: CliResult[] }> {
  const nodes = sources.map((_, node) => node)
  const listen = await freePorts(sources.length)
  const proxies = new Map<string, TcpProxy>()
  for (const from of nodes) for (const to of nodes) if (from !== to) proxies.set(`${from}-${to}`, await startTcpProxy(t, listen[to]))
  const peersOf = (node: number): string => nodes.map(to => `127.0.0.1:${to === node ? listen[to] : proxies.get(`${node}-${to}`)!.port}`).join(',')
  const cluster = await mountCluster(t, sources, options, node => ['--listen', `127.0.0.1:${listen[node]}`, '--peers', peersOf(node)])
  const touching = (node: number): TcpProxy[] => [...proxies].filter(([pair]) => pair.split('-').includes(String(node))).map(([, proxy]) => proxy)
  return {
    ...cluster,
    cut: node => { for (const proxy of touching(node)) proxy.cut() },
    heal: node => { for (const proxy of touching(node)) proxy.heal() }
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
