// Clusters of real daemons on loopback: free ports, a shared token, every
// node mounted at once (each waits for the others' handshake), and a
// teardown that leaves nothing mounted and no daemon running.
import { chmodSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { readStats } from '../../src/cli/stats-command'
import { CLI_ENV, emptyDir, forceUnmount, redirfsWith, type CliResult } from './mount'
import { SeededRandom } from '../../src/redirect/random'
import { epochBoundary, readFileAsTrainer, type ReadSample } from './readers'

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
  t.teardown(async () => { for (const mountpoint of mountpoints) await forceUnmount(mountpoint) })
  for (let attempt = 1; ; attempt++) {
    const ports = await freePorts(sources.length)
    const peers = ports.map(port => `127.0.0.1:${port}`).join(',')
    const results = await Promise.all(sources.map(async (source, node) =>
      await redirfsWith(env, 'mount', source, mountpoints[node], '--node', String(node), '--peers', peers, '--token-file', token, '--peer-wait', '30', ...options, ...perNode(node, ports))))
    if (attempt < 3 && results.some(r => /cannot listen on .*the port is in use/.test(r.stderr))) {
      for (const mountpoint of mountpoints) await forceUnmount(mountpoint)
      continue
    }
    return { mountpoints, peers, token, results, pids: async () => await Promise.all(mountpoints.map(async m => (await readStats(m)).pid as number)) }
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
