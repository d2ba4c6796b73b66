/**
 * The mount daemon: checks its inputs, scans the source, builds the layout
 * and the engine, mounts, and serves until SIGINT or SIGTERM.
 *
 * The source is opened as a directory handle before mounting and read
 * through /proc/self/fd, so the mountpoint may be the source itself.
 * An open of `<mnt>/.redirfs/reset` resets the epoch state (`redirfs
 * reset`), and a new training run starts a new epoch by itself (src/runs).
 *
 * In a cluster (`--peers`), the peer service starts and every peer must
 * answer the handshake before the FUSE mount comes up, so a misconfigured
 * cluster fails at mount time with a reason, not at the first open.
 */
import { createHash } from 'node:crypto'
import { promises as fs, readFileSync } from 'node:fs'
import path from 'node:path'
import type { Logger } from 'pino'
import { readIncludeList, scanTree } from '../chunks/scan'
import { SourceCheck } from '../chunks/source-check'
import { SourceWatch } from '../chunks/source-watch'
import { DirectoryFileReader, DirectorySource } from '../chunks/directory-source'
import { native } from '../chunks/native'
import { SampleBuffers } from '../chunks/sample-buffers'
import type { ChunkSource } from '../chunks/source'
import type { DatasetTree, FileReader } from '../chunks/tree'
import { checkPackLayout, INDEX_FILE, isPack, loadPackIndex, looksLikeDamagedPack, type PackChunks } from '../pack/pack-index'
import type { PackLayoutKind } from '../pack/format'
import { DirectoryPackStorage, type PackStorage } from '../pack/storage'
import { ChunkCache } from '../pack/chunk-cache'
import { isS3Url, parseS3Url } from '../s3/location'
import { BucketPackStorage } from '../s3/pack-storage'
import { ObjectFileReader, ObjectSource, scanBucket } from '../s3/object-dataset'
import { ObjectStore } from '../s3/store'
import { PackFileReader, PackSource } from '../pack/pack-source'
import { Engine } from '../engine/engine'
import { SharedEngine } from '../engine/shared-engine'
import { isForUser, UsageError } from '../errors'
import { FsAdapter } from '../fs/adapter'
import type { MountedFilesystem } from '../fs/backend'
import { mountFilesystem } from '../fs/fuse-native-mount'
import { mountNative } from '../fs/native-mount'
import { planMemory, type MemoryPlan } from '../redirect/budget'
import { describeGrouping, sampleOfGroups } from '../redirect/grouping'
import { buildLayout, cutPhysicalChunks, groupsPerHome, type Layout, type NodeId, type PhysicalChunking } from '../redirect/layout'
import { MirrorTable } from '../redirect/mirror'
import { Protocol } from '../redirect/protocol'
import { buildSharedLayout, type SharedLayout } from '../redirect/shared-layout'
import { SharedProtocol } from '../redirect/shared-protocol'
import { parseAddress, parsePeers, type PeerAddress } from '../cluster/addresses'
import { ClusterNode, reclaimFromHolders } from '../cluster/cluster-node'
import { Membership, type Storage } from '../cluster/membership'
import { loadCredentials, readToken } from '../cluster/security'
import { shardName } from '../pack/writer'
import type { MemoryStats, MountStats } from '../stats'
import { formatSize } from '../util/size'
import { RunTracker, type RunEvent } from '../runs/run-tracker'
import { metricsConnectionCap, startMetricsServer, type MetricsServer } from '../metrics/prometheus'
import { mountAt } from '../util/mounts'
import type { MountConfig } from './config'
import { fdLimit } from './fd-limit'
import { memoryLimitOf, type MemoryLimit } from './memory-limit'
import { removeRecord, writeRecord } from './registry'

export interface RunningMount {
  /** What the mount found, for its one line of output. */
  readonly summary: MountSummary
  stop (): Promise<void>
}

export interface MountSummary {
  samples: number
  groups: number
  /** A few group names, spread over the sorted list. */
  someGroups: string[]
  /** Entries of the source left out (`--skip-unservable`). */
  skipped: number
  /** What the source is: 'directory', 'pack' or 'objects' (an ImageFolder in a bucket). */
  kind: string
  /** The layout chosen (`chooseLayout`): 'class', or 'shared' where memory holds no chunk of every class. */
  layout: 'class' | 'shared'
}

async function checkSource (source: string): Promise<void> {
  const stat = await fs.stat(source).catch((err: NodeJS.ErrnoException) => {
    throw new UsageError(err.code === 'ENOENT' ? `source ${source} does not exist` : `cannot read source ${source}: ${err.code ?? err.message}`)
  })
  if (!stat.isDirectory()) throw new UsageError(`source ${source} is not a directory`)
}

async function checkMountpoint (mountpoint: string, source: string): Promise<void> {
  const dead = (): UsageError => new UsageError(`mountpoint ${mountpoint} is a dead mount (transport endpoint is not connected); run: redirfs umount --force ${mountpoint}`)
  const stat = await fs.stat(mountpoint).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOTCONN') throw dead()
    throw new UsageError(err.code === 'ENOENT' ? `mountpoint ${mountpoint} does not exist` : `cannot use mountpoint ${mountpoint}: ${err.code ?? err.message}`)
  })
  if (!stat.isDirectory()) throw new UsageError(`mountpoint ${mountpoint} is not a directory`)
  const existing = await mountAt(mountpoint)
  // The kernel may answer a stat from its cache; statfs always asks the filesystem.
  if (existing !== undefined) await fs.statfs(mountpoint).catch((err: NodeJS.ErrnoException) => { if (err.code === 'ENOTCONN') throw dead() })
  if (existing !== undefined && mountpoint !== source) throw new UsageError(`mountpoint ${mountpoint} is busy: ${existing.source} (${existing.type}) is mounted there`)
  if (existing !== undefined && existing.source === 'redirfs') throw new UsageError(`mountpoint ${mountpoint} is busy: redirfs is already mounted there`)
  if (mountpoint !== source && (await fs.readdir(mountpoint)).length > 0) throw new UsageError(`mountpoint ${mountpoint} is not empty (mount over the source itself, or use an empty directory)`)
}

/** A dataset opened for a mount: its tree, where its bytes come from, and how it is laid out. */
export interface OpenedDataset {
  tree: DatasetTree
  files: FileReader
  source: ChunkSource
  statfsPath: string
  chunkSize: number
  layoutSeed: number
  /** The grouping the samples were grouped by (a pack's own). */
  groupDepth?: number
  /** For a pack: the layout its chunks were written in, and a check that refuses any other. */
  packedIn?: PackLayoutKind
  checkLayout?: (layout: PackChunks) => void
  /** A shard of a `--nodes` pack: its cluster size and node. */
  shard?: { nodes: number, node: number }
  /** A directory's changes since the scan, noticed at every sample open (source-watch.ts). */
  watch?: SourceWatch
  close (): Promise<void>
}

/** A plain ImageFolder directory, read through a handle opened before mounting. */
async function openDirectory (config: MountConfig, buffers: SampleBuffers, log: Logger): Promise<OpenedDataset> {
  const include = config.includeFile !== undefined ? await readIncludeList(config.includeFile) : undefined
  const sourceDir = await fs.open(config.source, 'r')
  const sourceRoot = `/proc/self/fd/${sourceDir.fd}`
  try {
    const tree = await scanTree(sourceRoot, { include, extensions: config.extensions, groupDepth: config.groupDepth, skipUnservable: config.skipUnservable, foldAcls: config.allowOther, onWarning: message => log.warn(message) })
    const realSource = await fs.realpath(sourceRoot)
    const check = new SourceCheck(sourceRoot, tree, realSource, config.allowOther)
    const watch = await SourceWatch.start(tree, check, realSource, log)
    return {
      tree,
      files: new DirectoryFileReader(tree, check),
      source: new DirectorySource(tree, check, buffers, log, () => watch.unchangedDirectories()),
      statfsPath: sourceRoot,
      chunkSize: config.chunkSize,
      layoutSeed: config.seed,
      groupDepth: config.groupDepth,
      watch,
      close: async () => {
        watch.close()
        await sourceDir.close()
      }
    }
  } catch (err) {
    await sourceDir.close()
    throw err
  }
}

/**
 * What a pack's disk cache is the cache of: its index and where it is read
 * from. Chunks are checked against the index's CRC-32s when fetched, which
 * a forger meets at will, so a bucket (or directory) someone else fills with
 * the same index and forged chunks must not share a cache with the pack it
 * copies: mounted once with that --cache-dir, it would feed the real one.
 */
async function cacheIdentity (config: MountConfig, indexIdentity: string): Promise<string> {
  const place = isS3Url(config.source)
    ? `${config.s3?.endpoint ?? process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL ?? 'the default endpoint'} ${config.source}`
    : await fs.realpath(config.source)
  return createHash('sha1').update(`${indexIdentity}\0${place}`).digest('hex')
}

/** A pack, in a directory or a bucket: its layout was fixed when it was written. */
export async function openPack (config: MountConfig, buffers: SampleBuffers, log: Logger, storage: PackStorage = new DirectoryPackStorage(config.source)): Promise<OpenedDataset> {
  if (config.includeFile !== undefined) throw new UsageError('--include does not apply to a pack: pack the subset instead (redirfs pack --include <list>)')
  const pack = await loadPackIndex(storage)
  if (config.chunkSizeGiven && config.chunkSize !== pack.header.chunkSize) {
    throw new UsageError(`the pack was written with chunk size ${pack.header.chunkSize}; its chunks cannot be mounted with --chunk-size ${config.chunkSize}`)
  }
  if (config.groupDepth !== undefined && config.groupDepth !== pack.header.groupDepth) {
    throw new UsageError(`the pack was written with redirect groups by ${describeGrouping(pack.header.groupDepth)}; it cannot be mounted with --group-depth ${config.groupDepth} (leave it out, or re-pack with it)`)
  }
  const cache = config.cache === undefined ? undefined : await ChunkCache.open(config.cache.directory, await cacheIdentity(config, pack.identity), config.cache.sizeBytes, pack.arrays.chunkLength, log)
  const source = new PackSource(pack, buffers, log, cache, cacheFillBytes(config))
  return {
    tree: pack.tree,
    files: new PackFileReader(pack),
    source,
    statfsPath: isS3Url(config.source) ? '/' : config.source,
    chunkSize: pack.header.chunkSize,
    layoutSeed: pack.header.seed,
    groupDepth: pack.header.groupDepth,
    packedIn: pack.header.layout ?? 'class',
    checkLayout: layout => checkPackLayout(pack, layout),
    shard: pack.header.nodes !== undefined ? { nodes: pack.header.nodes, node: pack.header.node ?? 0 } : undefined,
    close: async () => await source.close()
  }
}

/**
 * A bucket prefix (`s3://bucket/prefix`): a pack if it holds a pack's
 * index, else an ImageFolder stored as objects. The first request tells
 * bad credentials, a missing bucket or an unreachable endpoint, in one line.
 */
async function openBucket (config: MountConfig, buffers: SampleBuffers, log: Logger): Promise<OpenedDataset> {
  const location = parseS3Url(config.source)
  const store = new ObjectStore({
    bucket: location.bucket,
    endpoint: config.s3?.endpoint,
    pathStyle: config.s3?.pathStyle,
    concurrency: config.s3?.concurrency,
    timeoutMs: config.s3?.timeoutMs,
    onRetry: info => log.warn({ operation: info.operation, url: info.url, attempt: info.attempt, reason: info.reason, delayMs: info.delayMs }, 'S3 request retried')
  })
  try {
    const storage = new BucketPackStorage(store, location)
    if (await isPack(storage)) return await openPack(config, buffers, log, storage)
    if (await store.head(location.prefix + 'segments/00000.bin') !== undefined || await store.head(location.prefix + 'chunks.bin') !== undefined) {
      throw new UsageError(`${config.source} has a pack's files but no ${INDEX_FILE}: an upload that did not finish; pack it again (redirfs pack <dir> ${config.source})`)
    }
    if (config.cache !== undefined) throw new UsageError(`--cache-dir keeps a pack's chunks: ${config.source} holds objects, not a pack (pack it: redirfs pack ${config.source} s3://<bucket>/<prefix>.pack)`)
    const include = config.includeFile !== undefined ? await readIncludeList(config.includeFile) : undefined
    const dataset = await scanBucket(store, location, { include, extensions: config.extensions, groupDepth: config.groupDepth, skipUnservable: config.skipUnservable, foldAcls: config.allowOther, onWarning: message => log.warn(message) })
    const source = new ObjectSource(store, dataset, buffers, log)
    return {
      tree: dataset.tree,
      files: new ObjectFileReader(store, dataset),
      source,
      statfsPath: '/',
      chunkSize: config.chunkSize,
      layoutSeed: config.seed,
      groupDepth: config.groupDepth,
      close: async () => await source.close()
    }
  } catch (err) {
    await store.close()
    throw err
  }
}

export async function startMount (config: MountConfig, log: Logger): Promise<RunningMount> {
  if (isS3Url(config.source)) {
    await checkMountpoint(config.mountpoint, config.source)
    native().tuneAllocator()
    const buffers = sampleBuffersFor(config)
    const dataset = await openBucket(config, buffers, log)
    try {
      return await serve(config, dataset, buffers, log)
    } catch (err) {
      await dataset.close()
      throw err
    }
  }
  await checkSource(config.source)
  await checkMountpoint(config.mountpoint, config.source)
  if (await isPack(path.join(config.source, shardName(0)))) {
    throw new UsageError(`${config.source} holds one pack per node (written with --nodes): mount ${path.join(config.source, shardName(config.cluster?.node ?? 0))} on node ${config.cluster?.node ?? 0}`)
  }
  // Before any sample is read: freed samples must leave the process (or be reused within --memory), or RSS drifts above it.
  native().tuneAllocator()
  const buffers = sampleBuffersFor(config)
  if (await looksLikeDamagedPack(config.source)) {
    throw new UsageError(`${config.source} has a pack's files, but its ${INDEX_FILE} is not a redirfs pack index: check it with redirfs verify ${config.source}, or pack the dataset again`)
  }
  const dataset = await (await isPack(config.source) ? openPack(config, buffers, log) : openDirectory(config, buffers, log))
  try {
    return await serve(config, dataset, buffers, log)
  } catch (err) {
    await dataset.close()
    throw err
  }
}

/**
 * The mount's one pool of sample buffers, handed to every part that reads
 * samples or gives them back. A cluster node's mirrors hold peers' samples
 * in it too (src/cluster/data-channel.ts), within --remote-memory.
 */
function sampleBuffersFor (config: MountConfig): SampleBuffers {
  return new SampleBuffers(config.memoryBytes + (config.cluster?.remoteMemoryBytes ?? 0))
}

/** The cluster's shape from the configuration, checked against a pack shard. */
interface ClusterShape { nodes: number, node: NodeId, storage: Storage, peers: PeerAddress[] }

function clusterShape (config: MountConfig, dataset: OpenedDataset): ClusterShape {
  const cluster = config.cluster
  if (cluster === undefined) {
    if (dataset.shard !== undefined) throw new UsageError(`${config.source} is the shard of node ${dataset.shard.node} of a ${dataset.shard.nodes}-node pack: mount it with --node ${dataset.shard.node} --peers <every node's address> ...`)
    return { nodes: 1, node: 0 as NodeId, storage: 'shared', peers: [] }
  }
  const peers = parsePeers(cluster.peers)
  const nodes = peers.length
  if (cluster.node >= nodes) throw new UsageError(`--node ${cluster.node} is not in --peers, which lists ${nodes} nodes (0 to ${nodes - 1})`)
  if (dataset.shard !== undefined) {
    if (dataset.shard.nodes !== nodes) throw new UsageError(`${config.source} is a shard of a ${dataset.shard.nodes}-node pack, but --peers lists ${nodes} nodes`)
    if (dataset.shard.node !== cluster.node) throw new UsageError(`${config.source} is the shard of node ${dataset.shard.node}; this is --node ${cluster.node}`)
  }
  return { nodes, node: cluster.node as NodeId, storage: dataset.shard !== undefined ? 'sharded' : 'shared', peers }
}

/** What the class layout needs: its physical chunks, and the memory a chunk of every group takes. */
interface ClassLayoutPlan { chunking: PhysicalChunking, busiest?: number, memory: MemoryPlan, sharedFits?: boolean }

function classLayoutPlan (dataset: OpenedDataset, memoryBytes: number, nodes: number): ClassLayoutPlan {
  const chunking = cutPhysicalChunks(dataset.tree.samples, dataset.chunkSize, dataset.layoutSeed)
  const busiest = nodes === 1 ? undefined : Math.max(...groupsPerHome(chunking, nodes))
  return { chunking, busiest, memory: planMemory(dataset.tree.samples, dataset.chunkSize, memoryBytes, nodes) }
}

function classLayout (dataset: OpenedDataset, nodes: number, { chunking, memory }: ClassLayoutPlan): Layout {
  const layout = buildLayout(dataset.tree.samples, { chunkSize: dataset.chunkSize, seed: dataset.layoutSeed, vcCount: memory.vcCount, nodes, chunking })
  dataset.checkLayout?.(layout)
  return layout
}

/** The layout a mount uses, and the engine that serves it. */
export type ChosenLayout = { kind: 'class', layout: Layout } | { kind: 'shared', layout: SharedLayout }

/**
 * The class layout wherever its memory holds a chunk of every group: it
 * is what every mode, packs and clusters are built on. Below that (many
 * classes), the shared layout (docs/design.md, "Shared chunks"), whose
 * least memory does not grow with classes × K: for now on one node, over
 * a source read file by file (a directory, or objects in a bucket), in
 * `mix` or `pool`. Anywhere else the mount is refused as before, saying so.
 * A pack was cut in one of them when written, and is mounted in that one:
 * every read of a pack is of a chunk of this layout (fuzz/pack-index.fuzz.ts
 * reads them all).
 */
export function chooseLayout (dataset: OpenedDataset, config: Pick<MountConfig, 'memoryBytes' | 'mode' | 'mixBlock'>, nodes: number): ChosenLayout {
  if (dataset.packedIn === 'shared') return { kind: 'shared', layout: sharedPackLayout(dataset, config, nodes) }
  const plan = classLayoutPlan(dataset, config.memoryBytes, nodes)
  if (config.memoryBytes >= plan.memory.minimumBytes) return { kind: 'class', layout: classLayout(dataset, nodes, plan) }
  const sharedFits = nodes === 1 && dataset.source.readsFileByFile && (config.mode === 'mix' || config.mode === 'pool')
  if (!sharedFits) {
    // A pack that does not match its layout is damaged at any memory: that is the line to give, not that memory is short.
    dataset.checkLayout?.({ pcs: plan.chunking.chunksOfGroup.flat().map(files => ({ files })) })
    throw memoryTooSmall(config.memoryBytes, dataset, { ...plan, sharedFits })
  }
  // A directory's or a bucket's files are read one by one: a block is one file.
  return { kind: 'shared', layout: buildSharedLayout(dataset.tree.samples, { chunkSize: dataset.chunkSize, blockSize: 1, seed: dataset.layoutSeed }) }
}

/**
 * What one mix read brings, unless --mix-block says: a directory reads files
 * one by one, so mix may take each from any chunk; a pack reads blocks, a
 * quarter of a chunk each.
 */
function mixBlockOf (dataset: Pick<OpenedDataset, 'checkLayout' | 'chunkSize'>, config: Pick<MountConfig, 'mixBlock'>): number {
  return config.mixBlock ?? (dataset.checkLayout !== undefined ? Math.max(1, Math.ceil(dataset.chunkSize / 4)) : 1)
}

/**
 * A pack written with `--layout shared`: its chunks in blocks, a block one
 * read (pool reads whole chunks, mix a quarter of one unless --mix-block
 * says), checked against the pack. The shared protocol serves one node
 * in mix or pool, so anything else is refused, saying how to re-pack.
 */
function sharedPackLayout (dataset: OpenedDataset, config: Pick<MountConfig, 'mode' | 'mixBlock'>, nodes: number): SharedLayout {
  const repack = 're-pack it without --layout shared'
  if (nodes > 1) throw new UsageError(`this pack is in the shared layout, which serves one node, not a cluster: ${repack} for a cluster`)
  if (config.mode !== 'mix' && config.mode !== 'pool') throw new UsageError(`this pack is in the shared layout, which serves --redirect mix or pool, not ${config.mode}: use one of those, or ${repack}`)
  const blockSize = config.mode === 'pool' ? dataset.chunkSize : mixBlockOf(dataset, config)
  const layout = buildSharedLayout(dataset.tree.samples, { chunkSize: dataset.chunkSize, blockSize, seed: dataset.layoutSeed })
  dataset.checkLayout?.(layout)
  return layout
}

async function serve (config: MountConfig, dataset: OpenedDataset, buffers: SampleBuffers, log: Logger): Promise<RunningMount> {
  const { tree, chunkSize } = dataset
  const shape = clusterShape(config, dataset)
  const chosen = chooseLayout(dataset, config, shape.nodes)
  const { layout } = chosen
  let memoryLimit = checkMemoryLimit(config, tree.count)
  const mixBlock = mixBlockOf(dataset, config)
  // Samples bound to open files are the adapter's (built below, once the engine is): readahead leaves room for them.
  const opens = { held: (): number => 0 }
  // The object graph, built once: the engine reclaims through the cluster's
  // membership, the cluster node routes opens to the engine, and the stats
  // it serves its peers are the whole mount's (a function, called only once
  // the mount is up). A cluster always has the class layout (chooseLayout).
  const membership = config.cluster === undefined || chosen.kind !== 'class' ? undefined : await clusterMembership(config.cluster, shape, chosen.layout, buffers, log)
  const engine = chosen.kind === 'class'
    ? new Engine(new Protocol(chosen.layout, { mode: config.mode, memoryBytes: config.memoryBytes, seed: config.seed, node: shape.node, prefetch: config.cluster?.prefetch, mixBlock, heldByOpens: () => opens.held() }),
      dataset.source, buffers, log, membership === undefined ? undefined : reclaimFromHolders(membership, log))
    : new SharedEngine(new SharedProtocol(chosen.layout, { memoryBytes: config.memoryBytes, seed: config.seed, heldByOpens: () => opens.held() }), dataset.source, buffers, log)
  if (chosen.kind === 'shared') warnIfFewPerClass(config.memoryBytes, chosen.layout, log)
  const cluster = membership === undefined || config.cluster === undefined || chosen.kind !== 'class' || !(engine instanceof Engine)
    ? undefined
    : new ClusterNode(chosen.layout, engine, new MirrorTable(chosen.layout, config.cluster.remoteMemoryBytes, config.mode, config.seed + shape.node), membership, buffers, {
      // parsePeers refuses wildcard entries, so only an explicit --listen listens on one.
      listen: config.cluster.listen !== undefined ? parseAddress(config.cluster.listen, '--listen') : shape.peers[shape.node],
      dataPort: config.cluster.dataPort,
      statsJson: () => JSON.stringify(stats()),
      readingRuns: () => runs?.readingGlobalRuns() ?? [],
      runElsewhere: (peer, run) => {
        runs?.noteRunElsewhere()
        log.warn({ peer, run, here: runs?.readingGlobalRuns() }, `two jobs read this cluster at once (node ${peer} reads ${run}): each gets duplicates and misses samples until a run starts after both end`)
      }
    }, log)
  let mounted: MountedFilesystem | undefined
  const startedAt = Date.now()

  /** What the daemon process holds, as the kernel and V8 see it: against the budget, what is overhead. */
  const sampleBufferMemory = (): Pick<MemoryStats, 'sampleBufferBytes' | 'idleSampleBufferBytes'> => {
    const { slabBytes, idleBytes } = buffers.stats()
    return { sampleBufferBytes: slabBytes, idleSampleBufferBytes: idleBytes }
  }
  const processMemory = (): Pick<MemoryStats, 'processRssBytes' | 'jsHeapBytes' | 'externalBytes'> => {
    const m = process.memoryUsage()
    return { processRssBytes: m.rss, jsHeapBytes: m.heapUsed, externalBytes: m.external }
  }
  const stats = (): MountStats => ({
    pid: process.pid,
    dataset: config.source,
    mountpoint: config.mountpoint,
    mode: config.mode,
    chunkSize,
    seed: config.seed,
    uptimeSeconds: Math.round((Date.now() - startedAt) / 1000),
    layout: { samples: layout.files.length, groups: layout.groups.length, someGroups: sampleOfGroups(layout.groups), grouping: describeGrouping(dataset.groupDepth), skippedEntries: tree.skipped.length, physicalChunks: layout.pcs.length, virtualChunks: chosen.kind === 'class' ? chosen.layout.vcs.length : 0, datasetBytes: layout.totalBytes, hash: layout.hash, nodes: shape.nodes, kind: chosen.kind },
    memory: { budgetBytes: config.memoryBytes, boundBytes: adapter.handles.boundBytes, ...sampleBufferMemory(), ...processMemory(), ...(memoryLimit !== undefined ? { cgroup: memoryLimit.cgroup, cgroupLimitBytes: memoryLimit.limitBytes } : {}) },
    ...engine.stats(),
    ...(dataset.watch !== undefined ? { source: { ...engine.stats().source, ...dataset.watch.stats() } } : {}),
    // The native server counts the kernel's open handles itself (the adapter's table also holds bytes kept for a re-open).
    fs: { backend: config.fuseBackend, ...(config.fuseBackend === 'native' ? { fuseThreads: config.fuseThreads } : {}), openHandles: adapter.handles.size, ...adapter.counters, ...(mounted?.counters?.() ?? {}) },
    ...(runs !== undefined ? { runs: runs.stats() } : {}),
    ...(metrics !== undefined ? { metrics: metrics.url } : {}),
    ...(cluster !== undefined ? { cluster: cluster.describe() } : {})
  })
  /** `<mnt>/.redirfs/reset` (redirfs reset): a fresh epoch everywhere, mirrors dropped. */
  const reset = (): object => {
    const dropped = engine.reset()
    if (cluster !== undefined) log.info({ dropped: cluster.reset() }, 'mirrors dropped')
    return { resets: engine.stats().protocol.resets, droppedFiles: dropped }
  }
  // Which job each open comes from: the native server knows the calling thread; fuse-native does not.
  const runs = config.fuseBackend === 'native' ? new RunTracker() : undefined
  const adapter: FsAdapter = new FsAdapter({
    tree,
    files: dataset.files,
    statfsPath: dataset.statfsPath,
    samples: cluster ?? engine,
    buffers,
    log,
    stats,
    reset,
    beforeSampleOpen: runs === undefined ? undefined : (thread, recheck) => thread === undefined || onRunEvent(runs.noteOpen(thread, Date.now(), recheck), cluster ?? engine, log),
    runsBegun: runs === undefined ? undefined : () => engine.newRuns,
    afterSampleOpen: seconds => metrics?.observeOpen(seconds),
    watch: dataset.watch,
    passThroughCap: passThroughCap(fdLimit()?.soft)
  })
  opens.held = () => adapter.handles.boundBytes
  let metrics: MetricsServer | undefined

  try {
    await cluster?.start()
  } catch (err) {
    await cluster?.close()
    throw err
  }
  try {
    const options = { allowOther: config.allowOther, overSource: config.mountpoint === config.source }
    mounted = config.fuseBackend === 'native'
      ? await mountNative(config.mountpoint, adapter, tree, { ...options, statfsPath: dataset.statfsPath, reopenWindowMs: config.reopenWindowMs, fuseThreads: config.fuseThreads })
      : await mountFilesystem(config.mountpoint, adapter.operations(), options)
  } catch (err) {
    await cluster?.close()
    throw isForUser(err) ? err : new UsageError(`cannot mount at ${config.mountpoint}: ${(err as Error).message}`, { cause: err })
  }
  // umount(8) from outside (an fstab mount's usual end): the daemon goes with its mount.
  mounted.onGone?.(() => {
    log.info({ mountpoint: config.mountpoint }, 'unmounted from outside: stopping')
    process.kill(process.pid, 'SIGTERM')
  })
  try {
    if (config.metrics !== undefined) metrics = await startMetricsServer(config.metrics, stats, log, metricsConnectionCap(fdLimit()?.soft))
  } catch (err) {
    await mounted.unmount().catch(() => {})
    await cluster?.close()
    throw err
  }
  const record = { pid: process.pid, mountpoint: config.mountpoint, source: config.source, logFile: config.logFile, startedAt: new Date().toISOString() }
  let cgroupWatch: NodeJS.Timeout
  try {
    await writeRecord({ ...record, memoryLimit })
    cgroupWatch = followMemoryCgroup(memoryLimit, async moved => {
      memoryLimit = moved
      await writeRecord({ ...record, memoryLimit })
    }, config, tree.count, log)
  } catch (err) {
    // Whatever fails once the mount is up takes it down again: no daemon is left serving a mount that said it failed.
    await mounted.unmount().catch(() => {})
    await metrics?.close()
    await cluster?.close()
    throw err
  }
  log.info({ source: config.source, mountpoint: config.mountpoint, mode: config.mode, layout: chosen.kind, samples: layout.files.length, groups: layout.groups.length, pcs: layout.pcs.length, vcs: chosen.kind === 'class' ? chosen.layout.vcs.length : 0, layoutHash: layout.hash, fdLimit: fdLimit()?.soft }, 'mounted')

  return {
    summary: { samples: layout.files.length, groups: layout.groups.length, someGroups: sampleOfGroups(layout.groups), skipped: tree.skipped.length, kind: String(dataset.source.stats().kind), layout: chosen.kind },
    stop: async () => {
      clearInterval(cgroupWatch)
      const stillMounted = (await mountAt(config.mountpoint))?.source === 'redirfs'
      if (stillMounted) await mounted?.unmount().catch(err => log.error({ err: (err as Error).message }, 'unmount failed'))
      await engine.drain()
      await metrics?.close()
      await cluster?.close()
      await adapter.handles.closeAll()
      await dataset.close()
      await removeRecord(config.mountpoint)
      log.info({ mountpoint: config.mountpoint }, 'unmounted')
    }
  }
}

/**
 * What the daemon holds beyond --memory (and --remote-memory), as the
 * README states it: Node, the JS heap V8 fills before it collects, the
 * tree; a cluster node adds its connections (test/daemon/memory.test.ts,
 * test/cluster/memory.test.ts check these).
 */
const DAEMON_OVERHEAD_BYTES = 160 * 2 ** 20
const OVERHEAD_PER_ENTRY_BYTES = 1536
const CLUSTER_OVERHEAD_BYTES = 40 * 2 ** 20

/** Whole chunks on their way from the bucket to the cache (--cache-dir) are outside --memory: a quarter of it, at most 64 MiB. */
function cacheFillBytes (config: MountConfig): number {
  return config.cache === undefined ? 0 : Math.min(64 * 2 ** 20, config.memoryBytes / 4)
}

/**
 * Refuses a mount whose budget cannot fit under the memory cgroup it runs
 * in (a container, a Slurm job): the kernel would kill the daemon
 * mid-epoch. Returns the limit, for the runtime record.
 */
function checkMemoryLimit (config: MountConfig, entries: number): MemoryLimit | undefined {
  const limit = memoryLimitOf()
  if (limit === undefined) return undefined
  const remote = config.cluster?.remoteMemoryBytes ?? 0
  const overhead = DAEMON_OVERHEAD_BYTES + OVERHEAD_PER_ENTRY_BYTES * entries + (config.cluster !== undefined ? CLUSTER_OVERHEAD_BYTES : 0) + cacheFillBytes(config)
  const needed = config.memoryBytes + remote + overhead
  if (needed > limit.limitBytes) {
    const fits = Math.max(0, limit.limitBytes - overhead - remote)
    throw new UsageError(`--memory ${formatSize(config.memoryBytes)}${remote > 0 ? ` and --remote-memory ${formatSize(remote)}` : ''} plus the daemon's own ${formatSize(overhead)} for this tree ` +
      `come to ${formatSize(needed)}, more than the memory limit of ${formatSize(limit.limitBytes)} this mount runs under (cgroup ${limit.cgroup}): the kernel would kill the daemon mid-epoch; ` +
      (fits > 0 ? `use --memory ${formatSize(fits)} or less, or raise the limit` : 'raise the limit'))
  }
  return limit
}

/**
 * A daemon moved into another memory cgroup after it mounted (a job
 * scheduler that starts the daemon first, a bench) must be named when that
 * cgroup's OOM killer strikes: its record follows the move (checked every
 * two seconds, `/proc/self/cgroup`), with that cgroup's OOM kills counted
 * from the move. A limit too small for --memory is logged; the mount is up.
 */
function followMemoryCgroup (recorded: MemoryLimit | undefined, onMoved: (limit: MemoryLimit | undefined) => Promise<void>, config: MountConfig, entries: number, log: Logger): NodeJS.Timeout {
  let seen = readFileSync('/proc/self/cgroup', 'utf8')
  let limit = recorded
  return setInterval(() => {
    let now: string
    // Unreadable for a moment (EMFILE while users hold many files open): looked at again next time.
    try { now = readFileSync('/proc/self/cgroup', 'utf8') } catch { return }
    if (now === seen) return
    seen = now
    const moved = memoryLimitOf()
    if (moved?.cgroup === limit?.cgroup && moved?.limitBytes === limit?.limitBytes) return
    limit = moved
    log.info({ cgroup: moved?.cgroup, limitBytes: moved?.limitBytes }, 'moved into another memory cgroup')
    try {
      checkMemoryLimit(config, entries)
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'the memory cgroup this daemon was moved into is too small for its --memory')
    }
    onMoved(moved).catch(err => log.error({ err: (err as Error).message }, 'cannot update the mount\'s record'))
  }, 2000).unref()
}

/**
 * Pass-through files (non-samples) open at once: half the daemon's
 * descriptors, the rest kept for its own loads, cache, log and sockets.
 */
export function passThroughCap (fdLimit: number | undefined): number {
  return fdLimit === undefined || !Number.isFinite(fdLimit) ? 1 << 20 : Math.max(16, Math.floor(fdLimit / 2))
}

/** When an orphaned worker's open was last logged: a leftover worker may try thousands; they are counted, and logged once a minute. */
let orphanLoggedAt = -Infinity

/**
 * Acts on what an open says of runs (src/runs); false when the open must
 * be refused (an orphaned worker's). On one node, a new run after the last
 * one ended starts a new epoch; in a cluster every run's beginning is the
 * cluster's business (a generation, src/cluster); one beside another is said.
 */
function onRunEvent (event: RunEvent, samples: Engine | SharedEngine | ClusterNode, log: Logger): boolean {
  if (event.kind === 'orphan') {
    if (Date.now() - orphanLoggedAt > 60_000) {
      orphanLoggedAt = Date.now()
      log.warn('refused a sample open by an orphaned DataLoader worker (its trainer exited, or its run ended; a process forked, never exec\'d, whose parent is gone counts as one: a trainer that forks itself into the background must lead its own session, or stay in the foreground under nohup or setsid) or by a process gone since it opened: it would take a sample from the run reading now (counted in runs.orphanOpens)')
    }
    return false
  }
  if (event.kind === 'first' || event.kind === 'new') {
    log.info({ run: event.run.key, trainer: event.run.description, previous: event.kind === 'new' ? event.previous.key : undefined }, 'a training run began')
  }
  if (samples instanceof ClusterNode) {
    if (event.kind === 'first' || event.kind === 'new') samples.beginRun(event.run)
  } else if (event.kind === 'new') {
    const dropped = samples.startNewRun()
    log.info({ run: event.run.key, dropped }, 'the last run ended: every virtual chunk starts a new epoch')
  }
  if (event.kind === 'concurrent') {
    log.warn({ run: event.run.key, trainer: event.run.description, others: event.others.map(other => other.description) },
      'two jobs read this mount at once: each gets duplicates and misses samples (exactly-once holds only over all readers together) until a run starts after both end')
  }
  return true
}

/** Files per class in memory below which most opens of the shared layout wait (docs/design.md, "Shared chunks"). */
const FEW_PER_CLASS = 5

/** The shared layout serves any memory, but below a few files per class most opens wait for a read: the log says so. */
function warnIfFewPerClass (memoryBytes: number, layout: SharedLayout, log: Logger): void {
  const perClass = memoryBytes / (layout.totalBytes / Math.max(1, layout.files.length)) / Math.max(1, layout.groups.length)
  log.info({ layout: 'shared', filesPerClassInMemory: Number(perClass.toFixed(1)) }, 'memory holds no chunk of every class: the shared layout serves it')
  if (perClass < FEW_PER_CLASS) log.warn({ filesPerClassInMemory: Number(perClass.toFixed(1)) }, `--memory holds about ${perClass.toFixed(1)} files per class: below about ${FEW_PER_CLASS}, many opens wait for a read (more memory, or fewer classes, waits less)`)
}

/**
 * The error for a budget below one chunk per group. Many small groups
 * (directories of a file or two) are the usual cause, so it says how many
 * there are and what to do about each cause.
 */
function memoryTooSmall (memoryBytes: number, dataset: OpenedDataset, { chunking: { groups, chunksOfGroup }, busiest, memory, sharedFits }: ClassLayoutPlan): UsageError {
  const { chunkSize, groupDepth } = dataset
  const sizes = chunksOfGroup.map(chunks => chunks.reduce((sum, chunk) => sum + chunk.length, 0))
  const tiny = sizes.filter(size => size <= 2).length
  const served = busiest ?? groups.length
  const where = busiest !== undefined ? ' that one node is home to' : ''
  const why = `the samples fall into ${groups.length} redirect groups (${describeGrouping(groupDepth)}; e.g. ${sampleOfGroups(groups, 3).join(', ')})` +
    (tiny > 0 ? `, ${tiny} of them of 1-2 files` : '') + `, and each of the ${served} groups${where} needs a chunk of its files (up to ${chunkSize}, mean ${formatSize(memory.meanFileSize)} each) in memory`
  const fixes = [`--memory ${formatSize(memory.minimumBytes)} or more`, 'a smaller --chunk-size']
  if (groupDepth === undefined && tiny > 0) fixes.push('--group-depth N if the directories below depth N each belong to one class (see the README)')
  // The shared layout needs no chunk per group, but serves only these so far (chooseLayout).
  if (sharedFits === false && busiest === undefined && dataset.source.readsFileByFile) fixes.push('--redirect mix or pool, whose shared layout needs a few files per group, not a chunk')
  if (busiest === undefined && dataset.packedIn === 'class') fixes.push('a pack written with --layout shared (mounted in mix or pool), which needs a few files per group, not a chunk')
  return new UsageError(`--memory ${formatSize(memoryBytes)} is too small: ${why}; use ${fixes.join(', or ')}`)
}

/** Who the cluster's nodes are and how to reach them (the clients; nothing listens or calls yet). */
async function clusterMembership (cluster: NonNullable<MountConfig['cluster']>, shape: ClusterShape, layout: Layout, buffers: SampleBuffers, log: Logger): Promise<Membership> {
  const token = await readToken(cluster.tokenFile)
  const credentials = await loadCredentials(cluster.tls)
  return new Membership(layout, {
    node: shape.node,
    peers: shape.peers,
    token,
    credentials,
    storage: shape.storage,
    peerTimeoutMs: cluster.peerTimeoutMs,
    startupTimeoutMs: cluster.startupTimeoutMs,
    buffers
  }, log)
}
