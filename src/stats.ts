/**
 * What `<mnt>/.redirfs/stats` shows (and `redirfs stats` prints): one type
 * for the daemon that writes it, the CLI that reads it, and the tests.
 * Each layer contributes its own section.
 */
import type { ProtocolCounters } from './redirect/counters'
import type { MirrorCounters } from './redirect/mirror'
import type { RunStats } from './runs/run-tracker'

export interface LayoutStats {
  samples: number
  groups: number
  /** A few group names, for the user to recognise the grouping. */
  someGroups: string[]
  grouping: string
  skippedEntries: number
  physicalChunks: number
  virtualChunks: number
  datasetBytes: number
  hash: string
  nodes: number
  /** 'class': a chunk of every group in memory; 'shared': chunks shared by classes, for memory that holds none of every class (docs/design.md, "Shared chunks"). */
  kind: 'class' | 'shared'
}

export interface MemoryStats {
  budgetBytes: number
  /** Sample bytes bound to open handles (or kept for a re-open). */
  boundBytes: number
  /** Memory of the sample buffers (chunks/sample-buffers.ts), lent and idle; idle is kept for the next loads, within the budget. */
  sampleBufferBytes: number
  idleSampleBufferBytes: number
  processRssBytes: number
  jsHeapBytes: number
  externalBytes: number
  /** The memory cgroup whose limit the daemon runs under now (followed when it is moved into another), and that limit. */
  cgroup?: string
  cgroupLimitBytes?: number
}

/** The chunk source's own counters (directory or pack; `kind` says which). */
export type SourceStats = Record<string, number | string>

export interface FsStats {
  backend: string
  openHandles: number
  passthroughOpens: number
  failedOpens: number
  /** The native server's counters (lookups, reads, re-opens, …); absent on fuse-native. */
  [nativeCounter: string]: number | string
}

/** What a cluster node counts beyond the protocol and its mirrors. */
export interface ClusterCounters {
  peersLost: number
  /** Peers that came back after they died (mounted again). */
  peersRejoined: number
  /** Generations this node started. */
  generations: number
  /** Times this node learned that its peers took it for dead, and stopped serving until the next generation. */
  fenced: number
  refusedRequests: number
}

export interface ClusterStats extends ClusterCounters, MirrorCounters {
  node: number
  nodes: number
  storage: string
  listen: string
  /** Where this node's data channel listens, on the listen host. */
  dataPort: number
  remoteMemoryBytes: number
  tls: boolean
  /** Each node as this one sees it: `suspected`, not heard from for longer than --peer-timeout (dead once a majority says so). */
  peers: Array<{ node: number, address: string, state: 'self' | 'alive' | 'suspected' | 'rejoining' | 'dead' }>
  /** Whether this node may serve now: a majority of the cluster grants it a lease, and it is not fenced (taken for dead, until the next training run). */
  quorum: boolean
  /** Virtual chunks this node answers for now (the nodes' counts add up to the layout's, one owner each). */
  ownedVirtualChunks: number
  /** The generation the cluster is in (src/cluster/generations.ts): how many runs began since the mount, and the last one's name. */
  generation: { number: number, key: string }
  takeovers: number
  /** Standby copies, served notices and sync calls not yet delivered to peers (0 once the sync caught up). */
  unsynced: number
}

export interface MountStats {
  pid: number
  dataset: string
  mountpoint: string
  mode: string
  chunkSize: number
  seed: number
  uptimeSeconds: number
  layout: LayoutStats
  memory: MemoryStats
  protocol: ProtocolCounters
  source: SourceStats
  fs: FsStats
  /** Training runs seen (native backend only: it knows who opens). */
  runs?: RunStats
  /** Where Prometheus metrics are served (`--metrics`). */
  metrics?: string
  cluster?: ClusterStats
}
