/**
 * `--metrics <host:port>`: the mount's counters in the Prometheus text
 * format at `/metrics`, for operators who scrape and alert.
 *
 * Every value is read from the same stats object `redirfs stats` shows,
 * at scrape time (prom-client's `collect`), so the two never disagree and
 * nothing is counted twice; only the time opens waited is observed as it
 * happens, into a histogram. Names follow Prometheus conventions
 * (`redirfs_` prefix, `_total` counters, base units in the name), and
 * prom-client adds the process metrics (CPU, RSS, open fds, event loop
 * lag). Off by default; bound to loopback unless told otherwise.
 *
 * Any local user can connect to the port, and every connection is one of
 * the daemon's file descriptors, which sample and pass-through opens need
 * too: so the server holds a few connections at most (more are closed as
 * they are accepted) and closes one that idles or trickles its request
 * (docs/metrics.md, "What a scraper may hold").
 */
import http from 'node:http'
import { isIPv6 } from 'node:net'
import type { Logger } from 'pino'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import { UsageError } from '../errors'
import type { MountStats } from '../stats'

/**
 * The most connections the server holds at once: a scraper needs one, a few
 * Prometheus servers a few. Never more than an eighth of the daemon's file
 * descriptor limit, so what a scraper holds leaves the rest to the mount.
 */
export function metricsConnectionCap (fdLimit: number | undefined): number {
  return Math.max(1, Math.min(16, Math.floor((fdLimit ?? Infinity) / 8)))
}

/**
 * How long a connection may take. A scraper sends its request at once and
 * reads the answer at once; Prometheus's own scrape timeout is 10 s.
 */
const IDLE_MS = 10_000
const KEEP_ALIVE_MS = 5_000

export interface MetricsServer {
  /** Where it serves, `http://host:port/metrics` (the port chosen, when 0 was asked). */
  readonly url: string
  /** Records how long a sample open took (waits included). */
  observeOpen (seconds: number): void
  close (): Promise<void>
}

/** Parses `--metrics`: `host:port`, `[IPv6]:port`, or a bare port (then loopback). */
export function parseMetricsAddress (text: string): { host: string, port: number } {
  const match = /^(?:(\[[^\]]+\]|[^:]+):)?(\d+)$/.exec(text.trim())
  const port = match === null ? NaN : Number(match[2])
  const host = (match?.[1] ?? '127.0.0.1').replace(/^\[(.*)\]$/, '$1')
  if (match === null || !Number.isInteger(port) || port < 0 || port > 65535 || (match[1]?.startsWith('[') === true && !isIPv6(host))) {
    throw new UsageError(`--metrics must be host:port, [IPv6 address]:port or a port, e.g. 127.0.0.1:9464, got '${text}'`)
  }
  return { host, port }
}

/** An address as written in a URL and as the user gives it: an IPv6 host in brackets. */
export function formatAddress (address: { host: string, port: number }): string {
  return isIPv6(address.host) ? `[${address.host}]:${address.port}` : `${address.host}:${address.port}`
}

/** Why an address cannot be listened on, in words. */
const LISTEN_ERRORS: Record<string, string> = { ENOTFOUND: 'no such host', EADDRNOTAVAIL: 'not an address of this machine', EACCES: 'permission denied' }

type Stats = () => MountStats

/** A counter whose value is a running total the stats already keep. */
function total (registry: Registry, name: string, help: string, read: (s: MountStats) => Array<[Record<string, string>, number]>, stats: Stats, labelNames: string[] = []): void {
  // eslint-disable-next-line no-new
  new Counter({
    name,
    help,
    labelNames,
    registers: [registry],
    collect () {
      this.reset()
      for (const [labels, value] of read(stats())) if (Number.isFinite(value) && value > 0) this.inc(labels, value)
    }
  })
}

function gauge (registry: Registry, name: string, help: string, read: (s: MountStats) => Array<[Record<string, string>, number]>, stats: Stats, labelNames: string[] = []): void {
  // eslint-disable-next-line no-new
  new Gauge({
    name,
    help,
    labelNames,
    registers: [registry],
    collect () {
      this.reset()
      for (const [labels, value] of read(stats())) if (Number.isFinite(value)) this.set(labels, value)
    }
  })
}

const num = (value: unknown): number => typeof value === 'number' ? value : Number(value ?? 0)

/** The registry a mount's metrics live in: every series, read from `stats`. */
export function mountRegistry (stats: Stats): { registry: Registry, openWait: Histogram } {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: 'redirfs_' })
  const p = (s: MountStats): MountStats['protocol'] => s.protocol
  total(registry, 'redirfs_opens_total', 'Opens of samples, by how they were answered: from memory, after waiting for a load, or failed (EIO)', s => [
    [{ result: 'memory' }, p(s).memoryHits], [{ result: 'waited' }, p(s).waitedOpens - p(s).failedOpens], [{ result: 'failed' }, p(s).failedOpens]
  ], stats, ['result'])
  total(registry, 'redirfs_redirects_total', 'Opens answered with another sample of the same group', s => [[{}, p(s).redirects]], stats)
  total(registry, 'redirfs_chunk_loads_total', 'Chunk loads, by what started them', s => [[{ trigger: 'open' }, p(s).chunkLoads - p(s).readaheadLoads], [{ trigger: 'readahead' }, p(s).readaheadLoads]], stats, ['trigger'])
  total(registry, 'redirfs_readahead_held_back_total', 'Readahead loads not started because bytes bound to open files took their room', s => [[{}, p(s).readaheadHeldBack ?? 0]], stats)
  total(registry, 'redirfs_files_loaded_total', 'Sample files placed in memory by loads', s => [[{}, p(s).filesLoaded]], stats)
  total(registry, 'redirfs_wasted_bytes_total', 'Bytes of loaded chunks that were not placed (read amplification)', s => [[{}, p(s).wastedBytes]], stats)
  total(registry, 'redirfs_failed_files_total', 'Sample files a source failed to deliver', s => [[{}, p(s).failedFiles]], stats)
  total(registry, 'redirfs_rollovers_total', 'Epochs that ended, per virtual chunk', s => [[{}, p(s).rollovers]], stats)
  total(registry, 'redirfs_resets_total', 'Epoch resets (redirfs reset)', s => [[{}, p(s).resets]], stats)
  total(registry, 'redirfs_new_runs_total', 'Training runs that started a new epoch', s => [[{}, p(s).newRuns]], stats)
  gauge(registry, 'redirfs_resident_bytes', 'Sample bytes held in memory now', s => [[{}, p(s).residentBytes]], stats)
  gauge(registry, 'redirfs_inflight_bytes', 'Sample bytes of loads in flight', s => [[{}, p(s).inflightBytes]], stats)
  gauge(registry, 'redirfs_budget_bytes', 'The --memory budget for samples', s => [[{}, s.memory.budgetBytes]], stats)
  gauge(registry, 'redirfs_open_handles', 'Files open through the mount', s => [[{}, s.fs.openHandles]], stats)
  gauge(registry, 'redirfs_samples', 'Samples the mount shows', s => [[{}, s.layout.samples]], stats)
  gauge(registry, 'redirfs_dataset_bytes', 'Bytes of the samples the mount shows', s => [[{}, s.layout.datasetBytes]], stats)
  gauge(registry, 'redirfs_runs_exact', '1 while epochs are exact; 0 after two jobs read at once, until the next run', s => s.runs === undefined ? [] : [[{}, s.runs.exact ? 1 : 0]], stats)
  total(registry, 'redirfs_orphan_opens_total', 'Sample opens refused to orphaned workers (their trainer exited, or their run ended)', s => s.runs === undefined ? [] : [[{}, s.runs.orphanOpens ?? 0]], stats)
  total(registry, 'redirfs_runs_total', 'Training runs seen, and those that began while another read', s => s.runs === undefined ? [] : [[{ concurrent: 'false' }, s.runs.runs - s.runs.concurrentRuns], [{ concurrent: 'true' }, s.runs.concurrentRuns]], stats, ['concurrent'])
  // The source: what it read, by kind of request.
  const kind = (s: MountStats): string => String(s.source.kind)
  total(registry, 'redirfs_source_requests_total', 'Requests the source made: file reads (directory), chunk reads (pack), or S3 requests by type', s => {
    const src = s.source
    if (src.getRequests !== undefined) return ['get', 'list', 'head'].map(type => [{ source: kind(s), type }, num(src[`${type}Requests`])] as [Record<string, string>, number])
    return [[{ source: kind(s), type: src.kind === 'pack' ? 'chunk' : 'file' }, num(src.chunksRead ?? src.filesRead)]]
  }, stats, ['source', 'type'])
  total(registry, 'redirfs_source_bytes_total', 'Bytes the source read', s => [[{ source: kind(s) }, num(s.source.bytesRead)]], stats, ['source'])
  total(registry, 'redirfs_source_retries_total', 'S3 requests sent again after a transient failure', s => s.source.retries === undefined ? [] : [[{ source: kind(s) }, num(s.source.retries)]], stats, ['source'])
  total(registry, 'redirfs_source_failures_total', 'Reads that failed for good: S3 requests past their retries, unreadable files, damaged chunks', s =>
    [[{ source: kind(s) }, num(s.source.failures) + num(s.source.readErrors) + num(s.source.corruptChunks)]], stats, ['source'])
  total(registry, 'redirfs_source_changed_files_total', 'Samples found changed in the source since the mount (served as EIO)', s => [[{ source: kind(s) }, num(s.source.changedFiles)]], stats, ['source'])
  gauge(registry, 'redirfs_source_requests_in_flight', 'S3 requests in flight now', s => s.source.inFlight === undefined ? [] : [[{ source: kind(s) }, num(s.source.inFlight)]], stats, ['source'])
  total(registry, 'redirfs_cache_reads_total', 'Chunk reads of the local disk tier: hit, miss, or forged (its HMAC failed; read from the bucket)', s => s.source.cacheHits === undefined ? [] : [[{ result: 'hit' }, num(s.source.cacheHits)], [{ result: 'miss' }, num(s.source.cacheMisses)], [{ result: 'forged' }, num(s.source.cacheForged)]], stats, ['result'])
  gauge(registry, 'redirfs_cache_bytes', 'Bytes the local disk tier holds', s => s.source.cacheBytes === undefined ? [] : [[{}, num(s.source.cacheBytes)]], stats)
  // A cluster: peers by state, and what crossed between nodes.
  gauge(registry, 'redirfs_cluster_peers', 'Nodes of the cluster by state, as this node sees them', s => {
    if (s.cluster === undefined) return []
    const counts: Record<string, number> = { self: 0, alive: 0, suspected: 0, rejoining: 0, dead: 0 }
    for (const peer of s.cluster.peers) counts[peer.state]++
    return Object.entries(counts).map(([state, count]) => [{ state }, count] as [Record<string, string>, number])
  }, stats, ['state'])
  total(registry, 'redirfs_cluster_remote_requests_total', 'Requests to other nodes for samples whose home they are', s => s.cluster === undefined ? [] : [[{}, s.cluster.remoteRequests]], stats)
  total(registry, 'redirfs_cluster_remote_samples_total', 'Samples this node\'s trainer got from other nodes, by how', s => s.cluster === undefined ? [] : [[{ via: 'request' }, s.cluster.remoteOpens - s.cluster.prefetchUsed], [{ via: 'mirror' }, s.cluster.prefetchUsed]], stats, ['via'])
  gauge(registry, 'redirfs_cluster_quorum', 'Whether this node may serve (1): a majority of the cluster grants it a lease and it is not fenced (taken for dead, until the next training run)', s => s.cluster === undefined ? [] : [[{}, s.cluster.quorum ? 1 : 0]], stats)
  gauge(registry, 'redirfs_cluster_generation', 'The cluster\'s generation (training runs begun since the mount)', s => s.cluster === undefined ? [] : [[{}, s.cluster.generation.number]], stats)
  const openWait = new Histogram({
    name: 'redirfs_open_wait_seconds',
    help: 'How long sample opens took in the daemon, waits for loads (and peers) included',
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry]
  })
  return { registry, openWait }
}

/**
 * Serves `/metrics` at `address`, holding at most `maxConnections`
 * connections; a port in use or an address that cannot be bound is one line.
 */
export async function startMetricsServer (address: { host: string, port: number }, stats: Stats, log: Logger, maxConnections: number): Promise<MetricsServer> {
  const { registry, openWait } = mountRegistry(stats)
  const server = http.createServer({
    // A request must arrive whole within these (checked every second, not Node's default 30 s) ...
    headersTimeout: IDLE_MS,
    requestTimeout: IDLE_MS,
    connectionsCheckingInterval: 1000,
    // ... and a kept-alive connection closes once idle this long after its answer.
    keepAliveTimeout: KEEP_ALIVE_MS
  }, (request, response) => {
    if (request.method !== 'GET' || (request.url ?? '').split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('redirfs serves /metrics only\n')
      return
    }
    registry.metrics().then(text => {
      response.writeHead(200, { 'content-type': registry.contentType }).end(text)
    }, (err: unknown) => {
      log.error({ err: (err as Error).message }, 'metrics scrape failed')
      response.writeHead(500, { 'content-type': 'text/plain' }).end('metrics failed\n')
    })
  })
  // The timeouts above start with a request's first byte: a connection that sends nothing is closed by this one.
  server.setTimeout(IDLE_MS)
  server.maxConnections = maxConnections
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const why = LISTEN_ERRORS[err.code ?? '']
      reject(new UsageError(err.code === 'EADDRINUSE'
        ? `--metrics ${formatAddress(address)}: the port is in use; choose another`
        : `--metrics ${formatAddress(address)}: cannot listen (${why !== undefined ? `${why}, ${err.code}` : err.code ?? err.message})`))
    })
    server.listen(address.port, address.host, () => resolve())
  })
  const bound = server.address()
  const port = typeof bound === 'object' && bound !== null ? bound.port : address.port
  log.info({ host: address.host, port, maxConnections }, 'serving Prometheus metrics at /metrics')
  return {
    url: `http://${formatAddress({ host: address.host, port })}/metrics`,
    observeOpen: seconds => openWait.observe(seconds),
    close: async () => await new Promise<void>(resolve => {
      server.close(() => resolve())
      // Connections a client keeps open would hold the unmount until they idle out.
      server.closeAllConnections()
    })
  }
}
