/** `redirfs stats`: the daemon's counters, read from `<mnt>/.redirfs/stats`. */
import { readControlFile, unreadable } from './mount-control'
import { formatSize } from '../util/size'
import type { ClusterStats, MountStats } from '../stats'
import type { RunStats } from '../runs/run-tracker'

/** What `formatStats` reads of the stats: a daemon of another version that lacks one is named, not a stack trace. */
const STATS_KEYS = { dataset: 'string', mountpoint: 'string', mode: 'string', layout: 'object', memory: 'object', protocol: 'object', source: 'object', fs: 'object' } as const

export async function readStats (mountpoint: string): Promise<MountStats> {
  return await readControlFile(mountpoint, 'stats', STATS_KEYS) as unknown as MountStats
}

/** `formatStats` of what a mount answered: one it cannot format (another version's, deeper than its keys) is one line too. */
export function formatStatsOf (mountpoint: string, stats: MountStats): string {
  try {
    return formatStats(stats)
  } catch {
    throw unreadable(mountpoint, 'stats', 'its fields are not of this version\'s shape')
  }
}

const percent = (part: number, whole: number): string => whole === 0 ? '-' : `${(100 * part / whole).toFixed(1)}%`

export function formatStats (s: MountStats): string {
  const p = s.protocol
  // In a cluster, `protocol.opens` also counts opens this node answered for others.
  const opens = s.cluster !== undefined ? p.opens - p.remoteOpens + s.cluster.remoteOpens : p.opens
  const rows: [string, string][] = [
    ['mount', `${s.dataset} at ${s.mountpoint} (pid ${s.pid}, up ${s.uptimeSeconds}s)`],
    ['mode', `${s.mode}, chunk size ${s.chunkSize}, seed ${s.seed}`],
    ['layout', `${s.layout.samples} samples in ${s.layout.groups} groups, ${s.layout.physicalChunks} physical / ${s.layout.virtualChunks} virtual chunks, ${formatSize(s.layout.datasetBytes)}`],
    ['groups', `by ${s.layout.grouping}: ${s.layout.someGroups.join(', ')}${s.layout.groups > s.layout.someGroups.length ? ', …' : ''}` +
      (s.layout.skippedEntries > 0 ? `; ${s.layout.skippedEntries} entries of the source left out (--skip-unservable)` : '')],
    ['memory', `${formatSize(p.residentBytes)} resident, ${formatSize(p.inflightBytes)} loading, peak ${formatSize(p.peakResidentBytes)} of ${formatSize(s.memory.budgetBytes)} budget; sample buffers ${formatSize(s.memory.sampleBufferBytes)} (${formatSize(s.memory.idleSampleBufferBytes)} idle)`],
    ['opens', s.cluster !== undefined
      ? `${opens} samples by this node's trainer: ${p.opens - p.remoteOpens} of chunks it owns, ${s.cluster.remoteOpens} of other nodes' (${s.cluster.prefetchUsed} from its mirrors)`
      : `${p.opens} samples: ${p.memoryHits} from memory (${percent(p.memoryHits, p.opens)}), ${p.waitedOpens} waited for a load (${percent(p.waitedOpens, p.opens)}), ${p.failedOpens} failed`],
    ['redirects', `${p.redirects} (${percent(p.redirects, p.opens)} of opens got another file of their class)`],
    ['loads', `${p.chunkLoads} chunk loads (${p.readaheadLoads} ahead of need), ${p.filesLoaded} files placed`],
    ['waste', `${p.wastedFiles} files / ${formatSize(p.wastedBytes)} of loaded chunks not placed`],
    ['rollovers', `${p.rollovers} (per virtual chunk), ${p.resets} resets, ${p.newRuns} new runs`],
    ...(s.runs !== undefined ? [runsRow(s.runs)] : []),
    ['source', Object.entries(s.source).map(([k, v]) => `${k} ${k.endsWith('Bytes') || k === 'bytesRead' ? formatSize(v as number) : String(v)}`).join(', ')],
    ['files', `${s.fs.openHandles} open handles, ${s.fs.passthroughOpens} pass-through opens`],
    ...(s.cluster !== undefined ? clusterRows(s, s.cluster) : [])
  ]
  return rows.map(([k, v]) => `${k.padEnd(10)} ${v}`).join('\n')
}

function runsRow (r: RunStats): [string, string] {
  const now = r.current === undefined ? 'none yet' : `now ${r.current.key}: ${r.current.trainer}`
  const beside = r.alongside.length > 0 ? `; reading at the same time: ${r.alongside.map(run => run.trainer).join(', ')}` : ''
  const exact = r.exact ? '' : '; NOT EXACT: two jobs read at once (each gets duplicates and misses samples) until a run starts after both end'
  const orphans = (r.orphanOpens ?? 0) > 0 ? `; ${r.orphanOpens} opens by orphaned workers refused` : ''
  return ['runs', `${r.runs} seen, ${now}${beside}${exact}${orphans}`]
}

function clusterRows (s: MountStats, c: ClusterStats): [string, string][] {
  const p = s.protocol
  const perSample = c.remoteOpens === 0 ? '-' : (c.remoteRequests / c.remoteOpens).toFixed(2)
  return [
    ['cluster', `node ${c.node} of ${c.nodes}, ${c.storage} storage${c.tls === true ? ', TLS' : ''}, listening on ${c.listen}, data channel on port ${c.dataPort}; ` +
      (c.generation.number === 0 ? 'first generation' : `generation ${c.generation.number} (${c.generation.key})`)],
    ['peers', `${c.peers.map(peer => `${peer.node} ${peer.address} ${peer.state}`).join(', ')}; ${c.unsynced} updates not yet sent to peers; ` +
      `${c.quorum === false ? 'NOT SERVING (no quorum: a majority of the cluster does not grant this node a lease; or it was taken for dead, and waits for the next training run)' : 'quorum held'}, owns ${c.ownedVirtualChunks ?? '-'} virtual chunks`],
    ['remote', `${c.remoteRequests} requests for ${c.remoteOpens} remote samples (${perSample} per sample), ${c.remoteSamplesReceived} samples received, ${c.prefetchReceived} prefetched, ${c.prefetchUsed} used`],
    ['mirrors', `${formatSize(c.mirrorBytes)} now, peak ${formatSize(c.peakMirrorBytes)}; ${c.givenBack} files given back`],
    ['served', `${p.remoteOpens} opens for other nodes, ${p.prefetchShipped} files shipped in batches, ${p.reclaims} reclaim rounds (${p.reclaimedFiles} files back)`],
    ['failures', `${c.peersLost} peers lost, ${c.peersRejoined} came back, ${c.fenced ?? 0} times taken for dead itself, ${c.takeovers} virtual chunks taken over, ${p.lostHeldFiles} shipped files made loadable again`]
  ]
}
