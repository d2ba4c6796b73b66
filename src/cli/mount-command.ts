/**
 * `redirfs mount`: in the foreground the mount lives in this process; in
 * the background (the default) this process starts the daemon, waits for
 * it to report the mount ready or failed, and exits accordingly, so that
 * `redirfs mount a b && python train.py` is safe.
 */
import { spawn } from 'node:child_process'
import { startMount, type MountSummary } from '../daemon/daemon'
import type { MountConfig } from '../daemon/config'
import { createLogger } from '../daemon/logger'
import { defaultLogFile, openLog } from '../daemon/registry'
import { isForUser, UsageError } from '../errors'
import { isS3Url } from '../s3/location'

type Notice = { ready: true, summary: MountSummary } | { error: string }

/** What `redirfs mount` sends the daemon it starts: the config, and whether its log is its standard output (opened by `redirfs mount`). */
interface DaemonStart { config: MountConfig, logToStdout: boolean }

/** The daemon's side: the config its parent sends, then the mount, as in the foreground. */
export async function runDaemon (): Promise<void> {
  if (process.send === undefined) throw new UsageError('redirfs daemon is started by redirfs mount, not by hand')
  // A parent that dies before it sends leaves nothing to wait for: the channel closes.
  // Both listeners go once either fires: a listener keeps the IPC channel, and so this process, alive.
  const start = await new Promise<DaemonStart>((resolve, reject) => {
    const onMessage = (message: unknown): void => { process.off('disconnect', onDisconnect); resolve(message as DaemonStart) }
    const onDisconnect = (): void => { process.off('message', onMessage); reject(new UsageError('redirfs mount went away before it sent the mount\'s options')) }
    process.once('message', onMessage)
    process.once('disconnect', onDisconnect)
  })
  await runInForeground(start.config, start.logToStdout)
}

/** What a mount found, as its one line of output says it: a user must see what the redirect groups are. */
export function describeMount (config: MountConfig, summary: MountSummary, logFile: string): string {
  const groups = `${summary.samples} samples in ${summary.groups} groups (${summary.someGroups.join(', ')}${summary.groups > summary.someGroups.length ? ', …' : ''})`
  const skipped = summary.skipped > 0 ? `; left out ${summary.skipped} entr${summary.skipped === 1 ? 'y' : 'ies'} that cannot be served (listed in the log)` : ''
  const bucket = isS3Url(config.source) ? ` (${summary.kind === 'pack' ? 'a pack' : 'an ImageFolder of objects'} in a bucket)` : ''
  // The shared layout serves what the class layout would refuse: a user must know which one reads for them.
  const layout = summary.layout === 'shared' ? ', chunks shared by the groups (the shared layout: memory for a few files per group, not a chunk of each)' : ''
  return `redirfs: mounted ${config.source}${bucket} at ${config.mountpoint}: ${groups}${skipped}; ${config.mode}${layout}; log ${logFile}`
}

/** Runs the mount in this process until SIGINT/SIGTERM. */
export async function runInForeground (config: MountConfig, logToStdout = false): Promise<void> {
  // A log that takes no writes is one line now, not a failed write later.
  if (!logToStdout && config.logFile !== undefined) await (await openLog(config.logFile, false)).close()
  const log = createLogger(config.logLevel, logToStdout ? 1 : config.logFile)
  const notify = (notice: Notice): void => { if (process.send !== undefined) process.send(notice) }
  // Signals are handled from the start: one that arrives while the mount is
  // coming up must still unmount it, never kill the process under a live mount.
  let requested: string | undefined
  let onSignal = (signal: string): void => {
    if (requested === undefined) log.info({ signal }, 'stopping once the mount is up')
    requested ??= signal
  }
  process.on('SIGINT', () => onSignal('SIGINT'))
  process.on('SIGTERM', () => onSignal('SIGTERM'))
  log.info({ source: config.source, mountpoint: config.mountpoint }, 'starting: scanning the source')

  let running
  try {
    running = await startMount(config, log)
  } catch (err) {
    const message = isForUser(err) ? err.message : `unexpected error: ${(err as Error).stack ?? String(err)}`
    log.error({ err: message }, 'mount failed')
    notify({ error: isForUser(err) ? err.message : `unexpected error: ${(err as Error).message}` })
    // Whatever it left open (a server, a socket) must not keep a failed mount's process alive: it
    // exits once its one line is out (the caller prints it, in this same turn).
    setImmediate(() => process.exit(1))
    throw err
  }
  notify({ ready: true, summary: running.summary })
  if (process.send !== undefined) process.disconnect()
  else process.stderr.write(describeMount(config, running.summary, config.logFile ?? 'stderr') + '\n')

  await new Promise<void>(resolve => {
    let stopping = false
    const stop = (signal: string): void => {
      if (stopping) return
      stopping = true
      log.info({ signal }, 'stopping')
      running.stop().finally(resolve)
    }
    onSignal = stop
    if (requested !== undefined) stop(requested)
  })
  // fuse-native's thread keeps the event loop alive after an unmount: exit
  // explicitly once everything is closed (this also flushes --cpu-prof).
  process.exit(0)
}

/**
 * V8 flags for the daemon. Its JS heap is small (tens of MiB) and V8 sizes
 * its first collection limits from that, so under load it ran a full
 * mark-compact every few tens of milliseconds, a third of the daemon's CPU
 * on the hot path (measured with --trace-gc, see docs/design.md, "The FUSE
 * layer"). A larger starting heap limit lets the young generation's
 * collections do the work; live memory is unchanged.
 */
const DAEMON_V8_FLAGS = ['--initial-heap-size=100']

/**
 * Starts the daemon detached, hands it the validated config over the IPC
 * channel (the options are parsed once, here), and resolves, with the
 * mount's line of output, once it reports the mount ready.
 */
export async function runInBackground (config: MountConfig): Promise<string> {
  const logFile = config.logFile ?? await defaultLogFile(config.mountpoint)
  const log = await openLog(logFile, config.logFile === undefined)
  const out = log.fd
  // The mountpoint is in the daemon's arguments only so that `ps` shows which mount it serves.
  const child = spawn(process.execPath, [...DAEMON_V8_FLAGS, ...process.execArgv, require.main!.filename, 'daemon', config.mountpoint], {
    detached: true,
    stdio: ['ignore', out, out, 'ipc']
  })
  child.send({ config: { ...config, logFile }, logToStdout: true } satisfies DaemonStart)
  await log.close()
  return await new Promise<string>((resolve, reject) => {
    let settled = false
    child.on('message', (notice: Notice) => {
      settled = true
      if ('ready' in notice) {
        child.unref()
        child.disconnect()
        resolve(describeMount(config, notice.summary, logFile))
      } else {
        // Nothing more to hear from it: the channel must not keep this process waiting.
        child.unref()
        child.disconnect()
        reject(new UsageError(notice.error))
      }
    })
    child.on('exit', code => {
      if (!settled) reject(new UsageError(`the daemon exited (code ${code}) before the mount was ready; see ${logFile}`))
    })
  })
}
