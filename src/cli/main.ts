/**
 * The redirfs command line. Every failure a user can cause ends in one
 * line on stderr and a non-zero exit, never a stack trace.
 */
import { Command, InvalidArgumentError, Option } from 'commander'
import path from 'node:path'
import type { MountConfig } from '../daemon/config'
import { RedirfsError } from '../errors'
import { REDIRECT_MODES, type RedirectMode } from '../redirect/protocol'
import { SingleBar, Presets } from 'cli-progress'
import { verifyPack } from '../pack/verify'
import { writePack } from '../pack/writer'
import { formatSize, parseSize } from '../util/size'
import { runInBackground, runInForeground } from './mount-command'
import { resetEpochs } from './reset-command'
import { formatStats, readStats } from './stats-command'
import { unmount } from './umount-command'
import { formatSimulationTable, runSimulations } from './simulate-command'

const program = new Command()

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

program
  .name('redirfs')
  .description('A FUSE filesystem that serves an ImageFolder dataset to training jobs by label-safe file redirection:\n' +
    'an open of a sample may be answered with another unconsumed sample of the same class that is already in memory,\n' +
    'so the disk is read only in large chunks. Every sample is still seen exactly once per epoch.')
  .showHelpAfterError('(run with --help for usage)')

program.command('mount')
  .description('present <source> (an ImageFolder tree) at <mountpoint>; returns once the mount is ready')
  .argument('<source>', 'dataset root: one directory per class')
  .argument('<mountpoint>', 'an empty directory, or the source itself to mount over it')
  .addOption(new Option('--memory <size>', 'memory budget for samples, e.g. 512M, 2G').argParser(size('--memory')).default(parseSize('1G', '--memory'), '1G'))
  .option('--chunk-size <K>', 'files per chunk: larger means fewer, bigger disk reads', wholeNumber('--chunk-size', 1, 65535), 64)
  .addOption(new Option('--redirect <mode>', 'strict: the Redox protocol; pool: any in-memory sample of the chunk, no wasted reads; off: no redirection (exact files, chunked reads)').choices(REDIRECT_MODES as string[]).default('strict'))
  .option('--seed <n>', 'seed of the chunk layout and of runtime choices', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--include <listfile>', 'show only the samples listed (relative paths, one per line): for training on a subset')
  .option('--extensions <list>', 'comma-separated sample extensions (default: common image and audio types)')
  .option('--foreground', 'stay attached; Ctrl-C unmounts', false)
  .option('--allow-other', 'let other users read the mount (needs user_allow_other in /etc/fuse.conf for non-root)', false)
  .option('--log-file <path>', 'daemon log (default: next to the runtime record in /run/redirfs)')
  .addOption(new Option('--log-level <level>', 'log detail').choices(['error', 'warn', 'info', 'debug']).default('info'))
  .action(async (source: string, mountpoint: string, options, command: Command) => {
    const config: MountConfig = {
      source: path.resolve(source),
      mountpoint: path.resolve(mountpoint),
      memoryBytes: options.memory,
      chunkSize: options.chunkSize,
      chunkSizeGiven: command.getOptionValueSource('chunkSize') !== 'default',
      mode: options.redirect as RedirectMode,
      seed: options.seed,
      allowOther: options.allowOther,
      includeFile: options.include !== undefined ? path.resolve(options.include) : undefined,
      extensions: parseExtensions(options.extensions),
      logFile: options.logFile !== undefined ? path.resolve(options.logFile) : undefined,
      logLevel: options.logLevel
    }
    if (options.foreground) return await runInForeground(config)
    const args = ['mount', config.source, config.mountpoint, '--memory', String(config.memoryBytes),
      '--redirect', config.mode, '--seed', String(config.seed), '--log-level', config.logLevel]
    if (config.chunkSizeGiven) args.push('--chunk-size', String(config.chunkSize))
    if (config.allowOther) args.push('--allow-other')
    if (config.includeFile !== undefined) args.push('--include', config.includeFile)
    if (config.extensions !== undefined) args.push('--extensions', config.extensions.join(','))
    const logFile = await runInBackground(config, args)
    process.stdout.write(`redirfs: mounted ${config.source} at ${config.mountpoint} (${config.mode}; log ${logFile})\n`)
  })

program.command('pack')
  .description('write <source> as contiguous chunks plus an index (with checksums) into <out>, for one sequential read per chunk')
  .argument('<source>', 'dataset root: one directory per class')
  .argument('<out>', 'the pack directory to create (must not exist)')
  .option('--chunk-size <K>', 'files per chunk (a pack is always mounted with this K)', wholeNumber('--chunk-size', 1, 65535), 64)
  .option('--seed <n>', 'seed of the within-class shuffle', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--include <listfile>', 'pack only the samples listed (relative paths, one per line)')
  .option('--extensions <list>', 'comma-separated sample extensions (default: common image and audio types)')
  .action(async (source: string, out: string, options) => {
    const summary = await withProgress('packing', async onProgress => await writePack(path.resolve(source), path.resolve(out), {
      chunkSize: options.chunkSize,
      seed: options.seed,
      includeFile: options.include !== undefined ? path.resolve(options.include) : undefined,
      extensions: parseExtensions(options.extensions),
      onProgress,
      onWarning: message => process.stderr.write(`redirfs: warning: ${message}\n`)
    }))
    process.stdout.write(`redirfs: packed ${summary.samples} samples in ${summary.chunks} chunks (${formatSize(summary.sampleBytes)}) and ${summary.others} other files into ${out}\n`)
  })

program.command('verify')
  .description('check every chunk and file of a pack against its checksums; exit 1 on any problem')
  .argument('<pack>')
  .action(async (pack: string) => {
    const report = await withProgress('verifying', async onProgress => await verifyPack(path.resolve(pack), onProgress))
    for (const problem of report.problems) process.stdout.write(`${problem}\n`)
    if (report.problems.length > 0) throw new RedirfsError(`${pack}: ${report.problems.length} problem(s) in ${report.chunks} chunks and ${report.files} files`)
    process.stdout.write(`redirfs: ${pack} is intact (${report.chunks} chunks, ${report.files} files)\n`)
  })

program.command('umount')
  .alias('unmount')
  .description('unmount and stop the daemon; --force also recovers a mount whose daemon died')
  .argument('<mountpoint>')
  .option('--force', 'unmount even if busy or dead (lazy unmount, then kill the daemon)', false)
  .action(async (mountpoint: string, options) => {
    await unmount(path.resolve(mountpoint), options.force)
  })

program.command('reset')
  .description('start a fresh epoch: run this before training again on a mount where an earlier run stopped mid-epoch')
  .argument('<mountpoint>')
  .action(async (mountpoint: string) => {
    await resetEpochs(path.resolve(mountpoint))
    process.stdout.write(`redirfs: ${mountpoint} starts a fresh epoch\n`)
  })

program.command('stats')
  .description('print the counters of a mount: loads, waste, hits, redirects, memory')
  .argument('<mountpoint>')
  .option('--json', 'the raw counters as JSON', false)
  .action(async (mountpoint: string, options) => {
    const stats = await readStats(path.resolve(mountpoint))
    process.stdout.write((options.json ? JSON.stringify(stats, null, 2) : formatStats(stats)) + '\n')
  })

function parseExtensions (text: string | undefined): string[] | undefined {
  return text?.split(',').map(e => e.trim().toLowerCase()).filter(Boolean).map(e => (e.startsWith('.') ? e : `.${e}`))
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

function mode (text: string): RedirectMode {
  if (!(REDIRECT_MODES as string[]).includes(text)) throw new InvalidArgumentError(`modes are ${REDIRECT_MODES.join(', ')}`)
  return text as RedirectMode
}

program.command('simulate')
  .description('run the protocol on random traces (no FUSE, no disk) and print chunk loads, read amplification, waste and batch randomness per mode, chunk size and memory')
  .option('--source <dir>', 'take the file list and sizes from a real ImageFolder instead of a synthetic one')
  .option('--files <n>', 'synthetic dataset: number of files', wholeNumber('--files', 1, 50_000_000), 100_000)
  .option('--classes <n>', 'synthetic dataset: number of classes (uneven sizes)', wholeNumber('--classes', 1, 1_000_000), 100)
  .option('--mean-size <size>', 'synthetic dataset: mean file size', size('--mean-size'), 110 * 1024)
  .option('--modes <list>', 'modes to compare', list(mode), ['strict', 'pool'])
  .option('--chunk-sizes <list>', 'chunk sizes K', list(wholeNumber('--chunk-sizes', 1, 65535)), [16, 64])
  .option('--memory <list>', 'memory as fractions of the dataset', list(fraction), [0.1, 0.25, 0.5])
  .option('--epochs <n>', 'epochs per run', wholeNumber('--epochs', 1, 1000), 3)
  .option('--batch-size <n>', 'batch size for the randomness measure', wholeNumber('--batch-size', 2, 100_000), 256)
  .option('--readers <n>', 'concurrent opens (DataLoader workers)', wholeNumber('--readers', 1, 1024), 8)
  .option('--seed <n>', 'seed', wholeNumber('--seed', 0, 2 ** 31 - 1), 0)
  .option('--json', 'print the rows as JSON', false)
  .action(async options => {
    const rows = await runSimulations({ ...options, memoryFractions: options.memory, source: options.source !== undefined ? path.resolve(options.source) : undefined })
    process.stdout.write((options.json ? JSON.stringify(rows, null, 2) : formatSimulationTable(rows)) + '\n')
  })

export async function main (argv: string[]): Promise<void> {
  try {
    await program.parseAsync(argv)
  } catch (err) {
    const message = err instanceof RedirfsError ? err.message : `unexpected error: ${(err as Error).message}`
    process.stderr.write(`redirfs: ${message}\n`)
    process.exitCode = 1
  }
}

if (require.main === module) void main(process.argv)
