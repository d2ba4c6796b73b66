/**
 * The redirfs command line. Every failure a user can cause ends in one
 * line on stderr and a non-zero exit, never a stack trace.
 */
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander'
import path from 'node:path'
import { defaultFuseThreads, FUSE_BACKENDS, type ClusterConfig, type FuseBackend, type MountConfig, type S3Config } from '../daemon/config'
import { isForUser, printable, systemErrorMessage, UsageError } from '../errors'
import { REDIRECT_MODES, type RedirectMode } from '../redirect/protocol'
import { SingleBar, Presets } from 'cli-progress'
import { verifyPack } from '../pack/verify'
import { DEFAULT_SEGMENT_SIZE, writePack, type PackInput, type PackOptions, type PackSummary } from '../pack/writer'
import { readIncludeList } from '../chunks/scan'
import { isS3Url, parseS3Url } from '../s3/location'
import { BucketOutput } from '../s3/pack-output'
import { BucketPackStorage } from '../s3/pack-storage'
import { bucketInput, scanBucket } from '../s3/object-dataset'
import { checkEndpoint, ObjectStore } from '../s3/store'
import { parseMetricsAddress } from '../metrics/prometheus'
import { formatSize, parseSize } from '../util/size'
import { sampleOfGroups } from '../redirect/grouping'
import { runDaemon, runInBackground, runInForeground } from './mount-command'
import { resetEpochs } from './reset-command'
import { formatStatsOf, readStats } from './stats-command'
import { unmount } from './umount-command'
import { expandOptionLists } from './mount-options'
import { formatClusterSimulationTable, formatSimulationTable, LAYOUT_KINDS, runClusterSimulations, runSimulations, type LayoutKind } from './simulate-command'

/** The command line, as commander has it (its commands and options are what fuzz/cli.fuzz.ts draws from). */
export const program = new Command()

function wholeNumber (what: string, min: number, max: number) {
  return (text: string): number => {
    const value = Number(text)
    if (!/^\d+$/.test(text.trim()) || value < min || value > max) throw new InvalidArgumentError(`${what} must be a whole number from ${min} to ${max}`)
    return value
  }
}

function size (what: string) {
  return (text: string): number => {
    try { return parseSize(text, what) } catch (err) { throw new InvalidArgumentError((err as Error).message) }
  }
}

/** Shared by mount and pack: how samples are grouped for redirection. */
const GROUP_DEPTH_OPTION = ['--group-depth <N>', 'redirect between samples that share the first N directories of their path, instead of the directory that holds them ' +
  '(e.g. 1 for <class>/<video>/<frame>.jpg at the root); set above the class level, it mixes classes and gives wrong labels', wholeNumber('--group-depth', 1, 1000)] as const
const SKIP_UNSERVABLE_OPTION = ['--skip-unservable', 'leave out entries that cannot be served (names that are not UTF-8, special files, broken links, links that loop, directories it cannot list, samples it may not read) ' +
  'instead of failing; the output says how many', false] as const

program
  .name('redirfs')
  .description('A FUSE filesystem that serves an ImageFolder dataset to training jobs by label-safe file redirection:\n' +
    'an open of a sample may be answered with another unconsumed sample of the same class that is already in memory,\n' +
    'so the disk is read only in large chunks. Every sample is still seen exactly once per epoch.')
  // A usage error is one line, as every other error: what is wrong, and where help is.
  .configureOutput({ outputError: (text, write) => write(`redirfs: ${printable(text.replace(/^error: /, '').trim().replace(/\s*\n\s*/g, ' '))} (run with --help for usage)\n`) })
  .version((require('../../package.json') as { version: string }).version, '-V, --version', 'print the version of redirfs')
  // Commander ends through main (its error, below) rather than by exiting the process: the CLI also runs in-process (fuzz/cli.fuzz.ts).
  .exitOverride()

/** Shared by mount, pack and verify: how a bucket is reached (credentials and region come from the standard AWS chain). */
function s3Options (command: Command): Command {
  return command
    .optionsGroup('Object storage (a source or output given as s3://bucket/prefix; credentials and region from the standard AWS chain):')
    .addOption(new Option('--s3-endpoint <url>', 'an S3-compatible endpoint, e.g. http://minio:9000 (default: AWS, or AWS_ENDPOINT_URL)').argParser(checkEndpoint))
    .option('--s3-path-style', 'put the bucket in the path, not the host name (most S3-compatible stores want this)', false)
    .addOption(new Option('--s3-concurrency <n>', 'requests in flight at once').argParser(wholeNumber('--s3-concurrency', 1, 4096)).default(64))
    .addOption(new Option('--s3-timeout <s>', 'a request that receives nothing for this long is retried (with backoff; a failure after 5 retries is EIO for the opens that needed it)').argParser(seconds('--s3-timeout')).default(20))
}

/** What only a bucket uses: where no path given is in one, they are refused, never ignored. */
const BUCKET_OPTIONS = ['s3Endpoint', 's3PathStyle', 's3Concurrency', 's3Timeout', 'cacheDir', 'cacheSize']

/** The flag of an option, by its attribute name (`s3Endpoint`: `--s3-endpoint`). */
const flagOf = (command: Command, name: string): string => command.options.find(option => option.attributeName() === name)?.long ?? name

/** Refuses a bucket's options given for `paths` of which none is in a bucket; `what` names the paths ('a source'). */
function refuseBucketOptions (command: Command, paths: string[], what: string): void {
  const given = (name: string): boolean => command.getOptionValueSource(name) === 'cli'
  const stray = paths.some(isS3Url) ? undefined : BUCKET_OPTIONS.find(given)
  if (stray !== undefined) throw new UsageError(`${flagOf(command, stray)} applies only to ${what} in a bucket (s3://bucket/prefix)`)
  if (given('cacheSize') && !given('cacheDir')) throw new UsageError('--cache-size applies only with --cache-dir')
}

function s3Config (options: Record<string, any>): S3Config {
  return { endpoint: options.s3Endpoint, pathStyle: options.s3PathStyle === true, concurrency: options.s3Concurrency, timeoutMs: Math.round(options.s3Timeout * 1000) }
}

/** A local path resolved, or an s3:// URL as given. */
const sourcePath = (text: string): string => isS3Url(text) ? text : path.resolve(text)

const mount = program.command('mount')
  .description('present <source> (an ImageFolder tree, or a pack; a directory or s3://bucket/prefix) at <mountpoint>; returns once the mount is ready')
  .argument('<source>', 'dataset root: one directory per class; or a pack; or s3://bucket/prefix holding either')
  .argument('<mountpoint>', 'an empty directory, or the source itself to mount over it')
  .addOption(new Option('--memory <size>', 'memory budget for samples, e.g. 512M, 2G').argParser(size('--memory')).default(parseSize('1G', '--memory'), '1G'))
  .option('--chunk-size <K>', 'files per chunk: larger means fewer, bigger disk reads', wholeNumber('--chunk-size', 1, 65535), 64)
  .addOption(new Option('--redirect <mode>', 'mix: any in-memory sample of the virtual chunk, each file read once per epoch, and each load takes blocks ' +
    'of several chunks chosen afresh, so samples stored together are not served together; pool: the same with whole chunks; strict: the Redox ' +
    'protocol (re-reads chunks over a pack); off: no redirection (exact files, chunked reads)').choices(REDIRECT_MODES as string[]).default('mix'))
  .option('--mix-block <files>', 'mix: consecutive files of one chunk a load reads together (default: 1 over a directory, a quarter of the chunk size over a pack)', wholeNumber('--mix-block', 1, 65535))
  .option('--seed <n>', 'seed of the chunk layout and of runtime choices', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--include <listfile>', 'show only the samples listed (relative paths, one per line): for training on a subset')
  .option('--extensions <list>', 'comma-separated sample extensions (default: common image and audio types)')
  .option(...GROUP_DEPTH_OPTION)
  .option(...SKIP_UNSERVABLE_OPTION)
  .addOption(new Option('--fuse-backend <name>', 'native: a libfuse3 server that answers reads without JS; fuse-native: libfuse 2 through JS (slower; a fallback)').choices(FUSE_BACKENDS as unknown as string[]).default('native').env('REDIRFS_FUSE_BACKEND'))
  .option('--reopen-window <ms>', 'a thread that re-opens the sample it opened last within this many milliseconds of closing it (and before opening ' +
    'another) gets the same bytes again, not a second sample, so loaders that open a file twice (cv2.imread, PIL verify) stay exact; and a thread ' +
    'that stats a sample path and opens it within a second (or the window) gets the file itself (torchvision read_file). 0 turns both off, for a job whose ' +
    'loader opens each file once and whose persistent workers may open one path last in an epoch and first in the next (native backend)',
  wholeNumber('--reopen-window', 0, 60_000), 50)
  .addOption(new Option('--fuse-threads <n>', 'threads answering the kernel in the native backend; they never wait on storage, so one per core is enough')
    .argParser(wholeNumber('--fuse-threads', 1, 64)).default(defaultFuseThreads(), 'one per core, 2 to 16').env('REDIRFS_FUSE_THREADS'))
  .option('--foreground', 'stay attached; Ctrl-C unmounts', false)
  .option('--allow-other', 'let other users read the mount (needs user_allow_other in /etc/fuse.conf for non-root)', false)
  .option('--log-file <path>', 'daemon log (default: next to the runtime record in /run/redirfs)')
  .option('--metrics <[host:]port>', 'serve Prometheus metrics at http://host:port/metrics (a bare port listens on 127.0.0.1 only)')
  .addOption(new Option('--log-level <level>', 'log detail').choices(['error', 'warn', 'info', 'debug']).default('info'))
  .optionsGroup('Cluster options (every node mounts the same tree; each node\'s --memory holds its own chunks):')
  .option('--node <i>', 'this node\'s id: its index in --peers', wholeNumber('--node', 0, 65535))
  .option('--peers <list>', 'every node\'s address, host:port, in node-id order, this node included')
  .option('--listen <host:port>', 'where to listen (default: this node\'s --peers entry; a wildcard only if given here)')
  .option('--data-port <port>', 'the port of the data channel that carries samples between nodes, on the --listen host (default: any free port, which the handshake tells peers)', wholeNumber('--data-port', 1, 65535))
  .option('--remote-memory <size>', 'memory for mirrors of other nodes\' chunks (default: a quarter of --memory)', size('--remote-memory'))
  .option('--token-file <path>', 'the cluster token every call carries (required; e.g. openssl rand -hex 32)')
  .option('--tls-cert <path>', 'mutual TLS between nodes: this node\'s certificate (give all three --tls options, or none)')
  .option('--tls-key <path>', 'mutual TLS: this node\'s key')
  .option('--tls-ca <path>', 'mutual TLS: the CA every node\'s certificate is signed by')
  .option('--peer-timeout <s>', 'a peer a majority has not heard from for this long is dead (its lease)', seconds('--peer-timeout'), 10)
  .option('--peer-wait <s>', 'how long mounting waits for every peer to come up', seconds('--peer-wait'), 120)
  .option('--no-prefetch', 'ask for one file per request (no opportunistic batches)')
  .addHelpText('after', `
With shared storage (a directory or a whole pack every node can read), a dead node's
chunks are taken over by the others; with sharded packs (redirfs pack --nodes N) its
samples fail with EIO.

-o <list> gives these options as mount(8) and /etc/fstab write them (its helper
mount.fuse.redirfs passes them on): -o memory=32G,chunk_size=64,allow_other, a value
with commas in double quotes (extensions="jpg,png"), mount(8)'s own options ignored.`)
  .action(async (source: string, mountpoint: string, options, command: Command) => {
    refuseBucketOptions(command, [source], 'a source')
    const config: MountConfig = {
      source: sourcePath(source),
      mountpoint: path.resolve(mountpoint),
      memoryBytes: options.memory,
      chunkSize: options.chunkSize,
      chunkSizeGiven: command.getOptionValueSource('chunkSize') !== 'default',
      mode: options.redirect as RedirectMode,
      mixBlock: options.mixBlock,
      seed: options.seed,
      groupDepth: options.groupDepth,
      skipUnservable: options.skipUnservable,
      allowOther: options.allowOther,
      fuseBackend: options.fuseBackend as FuseBackend,
      reopenWindowMs: options.reopenWindow,
      fuseThreads: options.fuseThreads,
      includeFile: options.include !== undefined ? path.resolve(options.include) : undefined,
      extensions: parseExtensions(options.extensions),
      logFile: options.logFile !== undefined ? path.resolve(options.logFile) : undefined,
      logLevel: options.logLevel,
      cluster: clusterConfig(options, command),
      s3: s3Config(options),
      cache: options.cacheDir !== undefined ? { directory: path.resolve(options.cacheDir), sizeBytes: options.cacheSize } : undefined,
      metrics: options.metrics !== undefined ? parseMetricsAddress(options.metrics) : undefined
    }
    if (options.foreground) return await runInForeground(config)
    process.stdout.write(await runInBackground(config) + '\n')
  })

program.command('daemon', { hidden: true })
  .description('the background daemon of a mount; redirfs mount starts it and sends it the mount\'s options')
  .argument('<mountpoint>')
  .action(async () => { await runDaemon() })

s3Options(mount)
  .option('--cache-dir <path>', 'keep chunks of a pack in a bucket on this local disk, so later epochs read them there (a remount of the same pack finds them again); a directory of yours or root\'s that no one else may write, nor the directories above it')
  .addOption(new Option('--cache-size <size>', 'the most the cache holds of one pack').argParser(size('--cache-size')).default(parseSize('10G', '--cache-size'), '10G'))

/** The share of the dataset above which the pack command notes how much memory a class-layout mount needs. */
const LARGE_LEAST_MEMORY = 0.25

const pack = program.command('pack')
  .description('write <source> as contiguous chunks plus an index (with checksums) into <out>, for one sequential read (or ranged GET) per chunk')
  .argument('<source>', 'dataset root: one directory per class; or s3://bucket/prefix holding one as objects')
  .argument('<out>', 'the pack directory to create (must not exist), or s3://bucket/prefix (must hold no objects): uploaded as it is written, the index last')
  .option('--chunk-size <K>', 'files per chunk (a pack is always mounted with this K)', wholeNumber('--chunk-size', 1, 65535), 64)
  .option('--seed <n>', 'seed of the within-class shuffle', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--include <listfile>', 'pack only the samples listed (relative paths, one per line)')
  .option('--extensions <list>', 'comma-separated sample extensions (default: common image and audio types)')
  .option(...GROUP_DEPTH_OPTION)
  .option(...SKIP_UNSERVABLE_OPTION)
  .option('--nodes <N>', 'for a cluster without shared storage: write one pack per node, <out>/node-<i>, each with that node\'s home chunks', wholeNumber('--nodes', 1, 65535), 1)
  .addOption(new Option('--layout <layout>', 'class: each chunk of one class (every mode, clusters; a mount needs a chunk of every class in memory); shared: each chunk a cross-section of the classes (one node, --redirect mix or pool; memory for a few files per class), for many classes').choices(['class', 'shared']).default('class'))
  .addOption(new Option('--segment-size <size>', 'cut the chunks into segment files (objects) of about this size, each holding whole chunks').argParser(size('--segment-size')).default(DEFAULT_SEGMENT_SIZE, formatSize(DEFAULT_SEGMENT_SIZE)))
  .action(async (source: string, out: string, options, command: Command) => {
    refuseBucketOptions(command, [source, out], 'a source or output')
    const packOptions: PackOptions = {
      chunkSize: options.chunkSize,
      seed: options.seed,
      layout: options.layout,
      nodes: options.nodes,
      segmentSize: options.segmentSize,
      includeFile: options.include !== undefined ? path.resolve(options.include) : undefined,
      extensions: parseExtensions(options.extensions),
      groupDepth: options.groupDepth,
      skipUnservable: options.skipUnservable,
      onWarning: message => process.stderr.write(`redirfs: warning: ${printable(message)}\n`)
    }
    const stores: ObjectStore[] = []
    const storeFor = (bucket: string): ObjectStore => {
      const store = new ObjectStore({ bucket, ...s3Config(options) })
      stores.push(store)
      return store
    }
    let summary: PackSummary
    try {
      const input = isS3Url(source) ? await bucketPackInput(source, packOptions, storeFor) : path.resolve(source)
      const output = isS3Url(out) ? new BucketOutput(storeFor(parseS3Url(out).bucket), parseS3Url(out)) : path.resolve(out)
      summary = await withProgress('packing', async onProgress => await writePack(input, output, { ...packOptions, onProgress }))
    } finally {
      for (const store of stores) await store.close()
    }
    const where = options.nodes > 1 ? `${options.nodes} packs, ${out}/node-0 to node-${options.nodes - 1} (mount node-<i> on node i)` : out
    const groups = `${summary.groups.length} groups (${sampleOfGroups(summary.groups).join(', ')}${summary.groups.length > 4 ? ', …' : ''})`
    const skipped = summary.skipped > 0 ? `; left out ${summary.skipped} entries that cannot be served` : ''
    const chunks = options.nodes > 1 ? '' : `, ${summary.chunks} chunks${summary.layout === 'shared' ? ' shared by the groups' : ''}`
    process.stdout.write(`redirfs: packed ${summary.samples} samples in ${groups}${chunks} (${formatSize(summary.sampleBytes)}) and ${summary.others} other files into ${where}${skipped}\n`)
    // A chunk of every class may be more than a mount can spare: say so now, not at the first mount.
    if (summary.layout === 'class' && summary.leastMemoryBytes > summary.sampleBytes * LARGE_LEAST_MEMORY) {
      process.stderr.write(`redirfs: warning: a mount of it needs --memory ${formatSize(summary.leastMemoryBytes)} or more (a chunk of each of ${summary.groups.length} groups); for less, pack it with --layout shared (one node, --redirect mix or pool)\n`)
    }
  })

s3Options(pack)

const verify = program.command('verify')
  .description('check every chunk and file of a pack against its checksums; exit 1 on any problem')
  .argument('<pack>', 'a pack directory, or s3://bucket/prefix')
  .action(async (pack: string, options, command: Command) => {
    refuseBucketOptions(command, [pack], 'a pack')
    const where = isS3Url(pack)
      ? new BucketPackStorage(new ObjectStore({ bucket: parseS3Url(pack).bucket, ...s3Config(options) }), parseS3Url(pack))
      : path.resolve(pack)
    const report = await withProgress('verifying', async onProgress => await verifyPack(where, onProgress))
    for (const problem of report.problems) process.stdout.write(`${problem}\n`)
    if (report.problems.length > 0) throw new UsageError(`${pack}: ${report.problems.length} problem(s) in ${report.chunks} chunks and ${report.files} files`)
    process.stdout.write(`redirfs: ${pack} is intact (${report.chunks} chunks, ${report.files} files)\n`)
  })
s3Options(verify)

/** An ImageFolder in a bucket, listed, as the input of a pack. */
async function bucketPackInput (source: string, options: PackOptions, storeFor: (bucket: string) => ObjectStore): Promise<PackInput> {
  const location = parseS3Url(source)
  const store = storeFor(location.bucket)
  const include = options.includeFile !== undefined ? await readIncludeList(options.includeFile) : undefined
  const dataset = await scanBucket(store, location, { include, extensions: options.extensions, groupDepth: options.groupDepth, skipUnservable: options.skipUnservable, onWarning: options.onWarning })
  return bucketInput(store, dataset)
}

program.command('umount')
  .alias('unmount')
  .description('unmount and stop the daemon; --force also recovers a mount whose daemon died')
  .argument('<mountpoint>')
  .option('--force', 'unmount even if busy or dead (lazy unmount, then kill the daemon)', false)
  .action(async (mountpoint: string, options) => {
    const died = await unmount(path.resolve(mountpoint), options.force)
    if (died !== undefined) process.stderr.write(`redirfs: unmounted; ${died.replace(/; run: redirfs umount.*$/, '')}\n`)
  })

program.command('reset')
  .description('start a fresh epoch now (a new training run starts one by itself; see the README): only the user who mounted, or root')
  .argument('<mountpoint>')
  .action(async (mountpoint: string) => {
    const done = await resetEpochs(path.resolve(mountpoint))
    process.stdout.write(`redirfs: ${mountpoint} starts a fresh epoch (${done.droppedFiles} samples waiting in memory dropped)\n`)
  })

program.command('stats')
  .description('print the counters of a mount: loads, waste, hits, redirects, memory')
  .argument('<mountpoint>')
  .option('--json', 'the raw counters as JSON', false)
  .action(async (mountpoint: string, options) => {
    const stats = await readStats(path.resolve(mountpoint))
    process.stdout.write((options.json ? JSON.stringify(stats, null, 2) : formatStatsOf(path.resolve(mountpoint), stats)) + '\n')
  })

/** A number of seconds, from a millisecond (what is used is whole milliseconds) to a day. */
function seconds (what: string) {
  return (text: string): number => {
    const value = Number(text)
    if (!(value >= 0.001 && value <= 86_400)) throw new InvalidArgumentError(`${what} must be a number of seconds from 0.001 to 86400`)
    return value
  }
}

const CLUSTER_FLAGS = ['node', 'listen', 'dataPort', 'remoteMemory', 'tokenFile', 'tlsCert', 'tlsKey', 'tlsCa', 'peerTimeout', 'peerWait']

/** The cluster options, checked together; undefined for a single mount. */
function clusterConfig (options: Record<string, any>, command: Command): ClusterConfig | undefined {
  const given = (name: string): boolean => command.getOptionValueSource(name) === 'cli'
  if (options.peers === undefined) {
    const stray = CLUSTER_FLAGS.filter(given)
    if (stray.length > 0 || options.prefetch === false) throw new UsageError(`${stray.length > 0 ? flagOf(command, stray[0]) : '--no-prefetch'} applies only to a cluster: give --peers and --node too`)
    return undefined
  }
  if (options.node === undefined) throw new UsageError('--peers needs --node: this node\'s index in the --peers list')
  if (options.tokenFile === undefined) throw new UsageError('--peers needs --token-file: the file with the cluster token every node shares')
  const resolve = (file: string | undefined): string | undefined => file === undefined ? undefined : path.resolve(file)
  return {
    node: options.node,
    peers: options.peers,
    listen: options.listen,
    dataPort: options.dataPort ?? 0,
    remoteMemoryBytes: options.remoteMemory ?? Math.floor(options.memory / 4),
    tokenFile: path.resolve(options.tokenFile),
    tls: { cert: resolve(options.tlsCert), key: resolve(options.tlsKey), ca: resolve(options.tlsCa) },
    peerTimeoutMs: options.peerTimeout * 1000,
    startupTimeoutMs: options.peerWait * 1000,
    prefetch: options.prefetch !== false
  }
}

function parseExtensions (text: string | undefined): string[] | undefined {
  const extensions = text?.split(',').map(e => e.trim().toLowerCase()).filter(Boolean).map(e => (e.startsWith('.') ? e : `.${e}`))
  if (extensions?.length === 0) throw new UsageError('--extensions names no extension (give a comma-separated list, e.g. jpg,png)')
  return extensions
}

/** A progress bar with rate and ETA on a terminal; nothing otherwise. */
async function withProgress<T> (label: string, work: (onProgress: (done: number, total: number) => void) => Promise<T>): Promise<T> {
  const bar = new SingleBar({
    format: `${label} {bar} {percentage}% | {doneMiB}/{totalMiB} MiB | {rateMiB} MiB/s | ETA {eta_formatted}`,
    hideCursor: true
  }, Presets.shades_classic)
  const started = Date.now()
  let running = false
  try {
    return await work((done, total) => {
      const payload = { doneMiB: (done / 2 ** 20).toFixed(0), totalMiB: (total / 2 ** 20).toFixed(0), rateMiB: (done / 2 ** 20 / Math.max(0.001, (Date.now() - started) / 1000)).toFixed(1) }
      if (!running) { bar.start(total, done, payload); running = true } else bar.update(done, payload)
    })
  } finally {
    if (running) bar.stop()
  }
}

function list<T> (parse: (text: string) => T) {
  return (text: string): T[] => text.split(',').map(item => parse(item.trim()))
}

function fraction (text: string): number {
  const value = Number(text)
  if (!(value > 0 && value <= 1)) throw new InvalidArgumentError('memory fractions must be numbers in (0, 1], e.g. 0.25')
  return value
}

/** A parser for one of `values`, whose error names them all ("modes are strict, pool, ..."). */
function oneOf<T extends string> (what: string, values: readonly T[]) {
  return (text: string): T => {
    if (!(values as readonly string[]).includes(text)) throw new InvalidArgumentError(`${what} are ${values.join(', ')}`)
    return text as T
  }
}
const layoutKind = oneOf<LayoutKind>('layouts', LAYOUT_KINDS)
const mode = oneOf<RedirectMode>('modes', REDIRECT_MODES)

program.command('simulate')
  .description('run the protocol on random traces (no FUSE, no disk) and print opens that waited, chunk loads, read amplification, waste and batch randomness per layout, mode, chunk size and memory')
  .option('--source <dir>', 'take the file list and sizes from a real ImageFolder instead of a synthetic one')
  .option('--files <n>', 'synthetic dataset: number of files', wholeNumber('--files', 1, 50_000_000), 100_000)
  .option('--classes <n>', 'synthetic dataset: number of classes (uneven sizes)', wholeNumber('--classes', 1, 1_000_000), 100)
  .option('--mean-size <size>', 'synthetic dataset: mean file size', size('--mean-size'), 110 * 1024)
  .option('--layouts <list>', 'layouts to compare: class (each chunk one class; --modes apply) and shared (each chunk many classes: a few files per class in memory, for datasets with many classes); default both, class only with --nodes', list(layoutKind))
  .option('--modes <list>', 'modes to compare over the class layout', list(mode), ['strict', 'pool', 'mix'])
  .option('--mix-block <files>', 'mix and the shared layout: consecutive files of one chunk a load takes together (1: a directory; a pack reads blocks)', wholeNumber('--mix-block', 1, 65535), 1)
  .option('--chunk-sizes <list>', 'chunk sizes K', list(wholeNumber('--chunk-sizes', 1, 65535)), [16, 64])
  .option('--memory <list>', 'memory as fractions of the dataset', list(fraction), [0.1, 0.25, 0.5])
  .option('--epochs <n>', 'epochs per run', wholeNumber('--epochs', 1, 1000), 3)
  .option('--batch-size <n>', 'batch size for the randomness measure', wholeNumber('--batch-size', 2, 100_000), 256)
  .option('--readers <n>', 'concurrent opens (DataLoader workers)', wholeNumber('--readers', 1, 1024), 8)
  .option('--seed <n>', 'seed', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--nodes <n>', 'simulate a cluster of n nodes (each with --memory of the dataset): remote requests, prefetch, exactness; with and without prefetch', wholeNumber('--nodes', 1, 64), 1)
  .option('--remote-memory <fraction>', 'cluster: a node\'s mirror memory as a fraction of its memory', fraction, 0.25)
  .option('--json', 'print the rows as JSON', false)
  .action(async options => {
    const simulateOptions = { ...options, memoryFractions: options.memory, source: options.source !== undefined ? path.resolve(options.source) : undefined }
    if (options.nodes > 1) {
      if (options.layouts?.includes('shared') === true) throw new UsageError('--nodes simulates the class layout only: the shared layout does not run on a cluster yet')
      const rows = await runClusterSimulations(simulateOptions)
      process.stdout.write((options.json ? JSON.stringify(rows, null, 2) : formatClusterSimulationTable(rows)) + '\n')
      return
    }
    const rows = await runSimulations(simulateOptions)
    process.stdout.write((options.json ? JSON.stringify(rows, null, 2) : formatSimulationTable(rows)) + '\n')
  })

export async function main (argv: string[]): Promise<void> {
  try {
    await program.parseAsync(expandOptionLists(argv, mount))
  } catch (err) {
    // Commander's own end (--help, --version, a bad option or argument): it has said what it had to; its exit code stands.
    // (An InvalidArgumentError is one only once commander has caught and reported it, as a CommanderError of its own.)
    if (err instanceof CommanderError && !(err instanceof InvalidArgumentError)) {
      process.exitCode = err.exitCode
      return
    }
    const message = isForUser(err) ? err.message : systemErrorMessage(err) ?? `unexpected error: ${(err as Error).message}`
    // One line whatever the message holds: a path or a key may have a line break, or a terminal's escape sequence, in it.
    process.stderr.write(`redirfs: ${printable(message)}\n`)
    process.exitCode = 1
  }
}

if (require.main === module) void main(process.argv)
