/** `redirfs stats`: the daemon's counters, read from `<mnt>/.redirfs/stats`. */
import { parseControl, readControlText, unreadable } from './mount-control'
import { formatSize } from '../util/size'
import { printable, UsageError } from '../errors'
import type { ClusterStats, MountStats } from '../stats'
import type { RunStats } from '../runs/run-tracker'

/** What `formatStats` reads of the stats: a daemon of another version that lacks one is named, not a stack trace. */
const STATS_KEYS = { dataset: 'string', mountpoint: 'string', mode: 'string', layout: 'object', memory: 'object', protocol: 'object', source: 'object', fs: 'object' } as const

export async function readStats (mountpoint: string): Promise<MountStats> {
  return parseStats(mountpoint, await readControlText(mountpoint, 'stats'))
}

/** The stats in the text of a mount's stats file; a one-line error when it is not a JSON object with every section. */
export function parseStats (mountpoint: string, text: string): MountStats {
  return parseControl(mountpoint, 'stats', text, STATS_KEYS) as unknown as MountStats
}

/** `formatStats` of what a mount answered: one it cannot format (another version's, deeper than its keys) is one line too. */
export function formatStatsOf (mountpoint: string, stats: MountStats): string {
  try {
    return formatStats(stats, mountpoint)
  } catch (err) {
    if (err instanceof UsageError) throw err
    throw unreadable(mountpoint, 'stats', 'its fields are not of this version\'s shape')
  }
}

/** Readaheads held back by files kept open, when any (a daemon of an older version does not count them). */
const heldBack = (count: number | undefined): string => count !== undefined && count > 0 ? `; ${count} held back by files kept open` : ''
const percent = (part: number, whole: number): string => whole === 0 ? '-' : `${(100 * part / whole).toFixed(1)}%`

/** A type per field, a list of one shape (`[shape]`), or an object's fields (`name?` when optional); `record`: names to numbers or text. */
type Shape = 'number' | 'string' | 'boolean' | 'record' | [Shape] | { readonly [field: string]: Shape }
const N = 'number'
const T = 'string'
const PROTOCOL_READ = ['opens', 'remoteOpens', 'memoryHits', 'waitedOpens', 'failedOpens', 'redirects', 'chunkLoads', 'readaheadLoads', 'filesLoaded', 'wastedFiles',
  'wastedBytes', 'rollovers', 'resets', 'newRuns', 'residentBytes', 'inflightBytes', 'peakResidentBytes', 'prefetchShipped', 'reclaims', 'reclaimedFiles', 'lostHeldFiles', 'lostAnswers']

/** What `formatStats` reads, checked before it reads any: a daemon of another version is named in one line, never a TypeError. */
const STATS_SHAPE: Shape = {
  pid: N,
  dataset: T,
  mountpoint: T,
  mode: T,
  chunkSize: N,
  seed: N,
  uptimeSeconds: N,
  layout: { samples: N, groups: N, someGroups: [T], grouping: T, skippedEntries: N, physicalChunks: N, virtualChunks: N, datasetBytes: N, kind: T },
  memory: { budgetBytes: N, sampleBufferBytes: N, idleSampleBufferBytes: N },
  protocol: Object.fromEntries(PROTOCOL_READ.map(field => [field, N])),
  source: 'record',
  fs: { openHandles: N, passthroughOpens: N },
  'runs?': { runs: N, 'current?': { key: T, trainer: T }, alongside: [{ trainer: T }], exact: 'boolean', 'orphanOpens?': N },
  'cluster?': {
    node: N,
    nodes: N,
    storage: T,
    'tls?': 'boolean',
    listen: T,
    dataPort: N,
    generation: { number: N, key: T },
    peers: [{ node: N, address: T, state: T }],
    unsynced: N,
    'quorum?': 'boolean',
    'ownedVirtualChunks?': N,
    'fenced?': N,
    ...Object.fromEntries(['remoteRequests', 'remoteOpens', 'prefetchUsed', 'remoteSamplesReceived', 'prefetchReceived', 'mirrorBytes', 'peakMirrorBytes', 'givenBack',
      'peersLost', 'peersRejoined', 'takeovers'].map(field => [field, N]))
  }
}

const IS = { number: (v: unknown) => typeof v === 'number', string: (v: unknown) => typeof v === 'string', boolean: (v: unknown) => typeof v === 'boolean' }

/** Where `value` is not of `shape` (a field's path and what it is not), or undefined. */
function mismatch (value: unknown, shape: Shape, at: string): string | undefined {
  if (shape === 'record') {
    const table = typeof value === 'object' && value !== null && !Array.isArray(value)
    return table && Object.values(value).every(v => typeof v === 'number' || typeof v === 'string') ? undefined : `${at} is not a table of numbers and text`
  }
  if (typeof shape === 'string') return IS[shape](value) ? undefined : `${at} is not ${shape === 'string' ? 'text' : `a ${shape}`}`
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return `${at} is not a list`
    for (let i = 0; i < value.length; i++) {
      const wrong = mismatch(value[i], shape[0], `${at}[${i}]`)
      if (wrong !== undefined) return wrong
    }
    return undefined
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return `${at === '' ? 'the stats' : at} is not an object`
  for (const [key, inner] of Object.entries(shape)) {
    const name = key.replace(/\?$/, '')
    const field = Object.hasOwn(value, name) ? (value as Record<string, unknown>)[name] : undefined
    if (key.endsWith('?') && field === undefined) continue
    const wrong = mismatch(field, inner, at === '' ? name : `${at}.${name}`)
    if (wrong !== undefined) return wrong
  }
  return undefined
}

/**
 * The stats as the table `redirfs stats` prints, one line per row (text from
 * the daemon, a path with a line break in it, stays on its row). Stats of
 * another shape than this version's are refused in one line.
 */
export function formatStats (s: MountStats, mountpoint: string): string {
  const wrong = mismatch(s, STATS_SHAPE, '')
  if (wrong !== undefined) throw new UsageError(`${mountpoint} answered stats that redirfs cannot show (${wrong}); is its daemon another version? remount it, or print them with --json`)
  const p = s.protocol
  // In a cluster, `protocol.opens` also counts opens this node answered for others.
  const opens = s.cluster !== undefined ? p.opens - p.remoteOpens + s.cluster.remoteOpens : p.opens
  const rows: [string, string][] = [
    ['mount', `${s.dataset} at ${s.mountpoint} (pid ${s.pid}, up ${s.uptimeSeconds}s)`],
    ['mode', `${s.mode}, chunk size ${s.chunkSize}, seed ${s.seed}`],
    ['layout', s.layout.kind === 'shared'
      ? `${s.layout.samples} samples in ${s.layout.groups} groups, ${s.layout.physicalChunks} chunks shared by the groups (the shared layout), ${formatSize(s.layout.datasetBytes)}`
      : `${s.layout.samples} samples in ${s.layout.groups} groups, ${s.layout.physicalChunks} physical / ${s.layout.virtualChunks} virtual chunks, ${formatSize(s.layout.datasetBytes)}`],
    ['groups', `by ${s.layout.grouping}: ${s.layout.someGroups.join(', ')}${s.layout.groups > s.layout.someGroups.length ? ', …' : ''}` +
      (s.layout.skippedEntries > 0 ? `; ${s.layout.skippedEntries} entries of the source left out (--skip-unservable)` : '')],
    ['memory', `${formatSize(p.residentBytes)} resident, ${formatSize(p.inflightBytes)} loading, peak ${formatSize(p.peakResidentBytes)} of ${formatSize(s.memory.budgetBytes)} budget; sample buffers ${formatSize(s.memory.sampleBufferBytes)} (${formatSize(s.memory.idleSampleBufferBytes)} idle)`],
    ['opens', s.cluster !== undefined
      ? `${opens} samples by this node's trainer: ${p.opens - p.remoteOpens} of chunks it owns, ${s.cluster.remoteOpens} of other nodes' (${s.cluster.prefetchUsed} from its mirrors)`
      : `${p.opens} samples: ${p.memoryHits} from memory (${percent(p.memoryHits, p.opens)}), ${p.waitedOpens} waited for a load (${percent(p.waitedOpens, p.opens)}), ${p.failedOpens} failed`],
    ['redirects', `${p.redirects} (${percent(p.redirects, p.opens)} of opens got another file of their class)`],
    ['loads', `${p.chunkLoads} chunk loads (${p.readaheadLoads} ahead of need${heldBack(p.readaheadHeldBack)}), ${p.filesLoaded} files placed`],
    ['waste', `${p.wastedFiles} files / ${formatSize(p.wastedBytes)} of loaded chunks not placed`],
    ['rollovers', `${p.rollovers} (per virtual chunk), ${p.resets} resets, ${p.newRuns} new runs`],
    ...(s.runs !== undefined ? [runsRow(s.runs)] : []),
    ['source', Object.entries(s.source).map(([k, v]) => `${k} ${k.endsWith('Bytes') || k === 'bytesRead' ? formatSize(v as number) : String(v)}`).join(', ')],
    ['files', `${s.fs.openHandles} open handles, ${s.fs.passthroughOpens} pass-through opens`],
    ...(s.cluster !== undefined ? clusterRows(s, s.cluster) : [])
  ]
  return rows.map(([k, v]) => `${k.padEnd(10)} ${printable(v)}`).join('\n')
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
    ['failures', `${c.peersLost} peers lost, ${c.peersRejoined} came back, ${c.fenced ?? 0} times taken for dead itself, ${c.takeovers} virtual chunks taken over, ${p.lostHeldFiles} shipped files made loadable again, ${p.lostAnswers} answers lost on the way served again`]
  ]
}
