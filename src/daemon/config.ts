/** Everything a mount is made from, as validated by the CLI. */
import { availableParallelism } from 'node:os'
import type { RedirectMode } from '../redirect/protocol'

export const FUSE_BACKENDS = ['native', 'fuse-native'] as const
export type FuseBackend = typeof FUSE_BACKENDS[number]

export interface MountConfig {
  source: string
  mountpoint: string
  memoryBytes: number
  chunkSize: number
  /** Whether --chunk-size was given (a pack has its own). */
  chunkSizeGiven: boolean
  /** `--mix-block`: files per block in mix mode; undefined for the source's default. */
  mixBlock?: number
  mode: RedirectMode
  seed: number
  /** `--group-depth`: coarser redirect groups (grouping.ts); undefined for the directory holding each sample. */
  groupDepth?: number
  /** `--skip-unservable`: mount without the entries that cannot be served, instead of failing. */
  skipUnservable: boolean
  allowOther: boolean
  /** Which FUSE server answers the kernel: the native libfuse3 one, or fuse-native (libfuse 2, through JS). */
  fuseBackend: FuseBackend
  /** `--reopen-window`: how long after closing a sample its thread may re-open it and get the same bytes (native backend; 0: never). */
  reopenWindowMs: number
  /** `--fuse-threads`: the native server's FUSE threads. */
  fuseThreads: number
  includeFile?: string
  extensions?: string[]
  logFile?: string
  logLevel: string
  cluster?: ClusterConfig
  /** How a bucket source (`s3://…`) is reached; absent for a local source. */
  s3?: S3Config
  /** `--metrics`: where to serve Prometheus metrics; absent: not served. */
  metrics?: { host: string, port: number }
  /** `--cache-dir`, `--cache-size`: the local disk tier of a pack in a bucket (src/pack/chunk-cache.ts). */
  cache?: { directory: string, sizeBytes: number }
}

/** `--s3-endpoint`, `--s3-path-style`, `--s3-concurrency` (src/s3/store.ts has the defaults). */
export interface S3Config {
  endpoint?: string
  pathStyle?: boolean
  concurrency?: number
  timeoutMs?: number
}

/**
 * The native server's FUSE threads by default: one per core. Nothing they
 * do waits (docs/design.md, "The FUSE layer"), so more only add wake-ups;
 * at least two, so one thread's reply overlaps the next request's arrival.
 */
export function defaultFuseThreads (): number {
  return Math.min(16, Math.max(2, availableParallelism()))
}

/** `--node`, `--peers` and the rest: present only in a cluster. */
export interface ClusterConfig {
  node: number
  /** As given: every node's address, in node-id order. */
  peers: string
  /** Where to listen; default this node's entry of `peers`. */
  listen?: string
  /** The data channel's port on the listen host; 0: any free one. */
  dataPort: number
  remoteMemoryBytes: number
  tokenFile: string
  tls: { cert?: string, key?: string, ca?: string }
  /** A peer that does not answer a call within this is dead. */
  peerTimeoutMs: number
  /** How long the mount waits for every peer to come up. */
  startupTimeoutMs: number
  prefetch: boolean
}
