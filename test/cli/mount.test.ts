// The mount lifecycle through the real CLI: bad input, overmount, umount,
// a killed daemon, foreground signals.
import { spawn } from 'node:child_process'
import { promises as fs, mkdirSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { readStats } from '../../src/cli/stats-command'
import { classOf, generateDataset } from '../helpers/dataset'
import { CLI, CLI_ENV, emptyDir, forceUnmount, isAlive, isMounted, mount, redirfs, waitUntil } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const dataset = generateDataset(4)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

t.test('bad input gets one line on stderr and a non-zero exit', async t => {
  const mountpoint = emptyDir()
  const notEmpty = emptyDir()
  writeFileSync(path.join(notEmpty, 'x'), 'x')
  const noSamples = emptyDir('redirfs-nosamples-')
  mkdirSync(path.join(noSamples, 'cls'))
  writeFileSync(path.join(noSamples, 'cls', 'a.txt'), 'x')
  const aFile = path.join(noSamples, 'cls', 'a.txt')
  t.teardown(() => forceUnmount(mountpoint))

  const cases: [string, string[], RegExp][] = [
    ['missing source', ['mount', '/nonexistent/data', mountpoint], /source \/nonexistent\/data does not exist/],
    ['source not a directory', ['mount', aFile, mountpoint], /is not a directory/],
    ['no samples', ['mount', noSamples, mountpoint], /no sample files found/],
    ['mountpoint missing', ['mount', dataset.root, '/nonexistent/mnt'], /mountpoint \/nonexistent\/mnt does not exist/],
    ['mountpoint not empty', ['mount', dataset.root, notEmpty], /is not empty/],
    // strict has the class layout only: mix and pool mount such memory with the shared layout (test/daemon/shared-layout.test.ts).
    ['memory smaller than a chunk per group, in strict', ['mount', dataset.root, mountpoint, '--memory', '10K', '--redirect', 'strict'], /--memory 10\.0 KiB is too small: the samples fall into \d+ redirect groups \(the directory holding each sample; e\.g\. ant, .*\), \d+ of them of 1-2 files, and each of the \d+ groups needs a chunk of its files \(up to 64.*, or --redirect mix or pool, whose shared layout needs a few files per group, not a chunk\n$/],
    ['bad group depth', ['mount', dataset.root, mountpoint, '--group-depth', '0'], /--group-depth must be a whole number from 1/],
    ['bad size', ['mount', dataset.root, mountpoint, '--memory', 'lots'], /--memory must be a size like 512M or 2G/],
    ['bad chunk size', ['mount', dataset.root, mountpoint, '--chunk-size', '0'], /--chunk-size must be a whole number/],
    ['no FUSE threads', ['mount', dataset.root, mountpoint, '--fuse-threads', '0'], /--fuse-threads must be a whole number from 1 to 64/],
    ['bad mode', ['mount', dataset.root, mountpoint, '--redirect', 'maybe'], /Allowed choices are strict, pool, mix, off/],
    ['missing include list', ['mount', dataset.root, mountpoint, '--include', '/nonexistent/list'], /cannot read include list/],
    ['include list not a file', ['mount', dataset.root, mountpoint, '--include', '/dev/zero'], /^redirfs: cannot read include list \/dev\/zero: not a regular file \(write the list to a file\)\n$/],
    ['no extensions', ['mount', dataset.root, mountpoint, '--extensions', ' , '], /^redirfs: --extensions names no extension/],
    ['unknown option', ['mount', dataset.root, mountpoint, '--memroy', '1G'], /^redirfs: unknown option '--memroy' \(Did you mean --memory\?\) \(run with --help for usage\)\n$/],
    ['missing argument', ['mount', dataset.root], /^redirfs: missing required argument 'mountpoint' \(run with --help for usage\)\n$/],
    ['umount of something not mounted', ['umount', mountpoint], /is not mounted/],
    ['stats of something not mounted', ['stats', mountpoint], /is not a redirfs mount/],
    // In the unit typed, and checked before anything starts.
    ['an S3 timeout below a millisecond', ['mount', 's3://bucket/data', mountpoint, '--s3-timeout', '0.0001'], /^redirfs: option '--s3-timeout <s>' argument '0\.0001' is invalid\. --s3-timeout must be a number of seconds from 0\.001 to 86400 \(run with --help for usage\)\n$/],
    ['a peer timeout above a day', ['mount', dataset.root, mountpoint, '--peer-timeout', '100000'], /^redirfs: option '--peer-timeout <s>' argument '100000' is invalid\. --peer-timeout must be a number of seconds from 0\.001 to 86400/],
    // A bucket's options where no bucket is: refused alike, never ignored.
    ['an S3 endpoint for a local source', ['mount', dataset.root, mountpoint, '--s3-endpoint', 'http://127.0.0.1:9000'], /^redirfs: --s3-endpoint applies only to a source in a bucket \(s3:\/\/bucket\/prefix\)\n$/],
    ['an S3 timeout for a local source', ['mount', dataset.root, mountpoint, '--s3-timeout', '5'], /^redirfs: --s3-timeout applies only to a source in a bucket \(s3:\/\/bucket\/prefix\)\n$/],
    ['a cache for a local source', ['mount', dataset.root, mountpoint, '--cache-dir', notEmpty], /^redirfs: --cache-dir applies only to a source in a bucket \(s3:\/\/bucket\/prefix\)\n$/],
    ['a cache size without a cache', ['mount', 's3://bucket/data', mountpoint, '--cache-size', '1G'], /^redirfs: --cache-size applies only with --cache-dir\n$/],
    ['S3 options for a local pack', ['pack', dataset.root, path.join(notEmpty, 'pack'), '--s3-concurrency', '4'], /^redirfs: --s3-concurrency applies only to a source or output in a bucket \(s3:\/\/bucket\/prefix\)\n$/],
    ['S3 options for a local verify', ['verify', notEmpty, '--s3-path-style'], /^redirfs: --s3-path-style applies only to a pack in a bucket \(s3:\/\/bucket\/prefix\)\n$/],
    ['a size no machine has', ['mount', dataset.root, mountpoint, '--memory', '9999999T'], /^redirfs: option '--memory <size>' argument '9999999T' is invalid\. --memory must be less than 8 PiB, got '9999999T'/],
    ['a log that takes no writes', ['mount', dataset.root, mountpoint, '--log-file', '/proc/version'], /^redirfs: cannot write the log \/proc\/version: an I\/O error \(EIO\)\n$/],
    ['a log that takes no writes, in the foreground', ['mount', dataset.root, mountpoint, '--foreground', '--log-file', '/proc/version'], /^redirfs: cannot write the log \/proc\/version: an I\/O error \(EIO\)\n$/]
  ]
  for (const [what, args, message] of cases) {
    const result = await redirfs(...args)
    t.not(result.code, 0, `${what}: non-zero exit`)
    t.match(result.stderr, message, `${what}: says why`)
    t.notMatch(result.stderr, /\n\s+at /, `${what}: no stack trace`)
  }
  t.notOk(isMounted(mountpoint), 'nothing was mounted')
})

t.test('an entry the mount cannot serve fails the mount, naming it; --skip-unservable leaves it out and says so', async t => {
  const source = emptyDir('redirfs-unservable-')
  t.teardown(async () => { await fs.rm(source, { recursive: true, force: true }) })
  for (const cls of ['cat', 'dog']) {
    mkdirSync(path.join(source, cls))
    for (let i = 0; i < 6; i++) writeFileSync(path.join(source, cls, `${i}.jpg`), `${cls} ${i}`)
  }
  // A Latin-1 name from an old archive: not valid UTF-8.
  writeFileSync(Buffer.concat([Buffer.from(path.join(source, 'cat', 'caf')), Buffer.from([0xe9]), Buffer.from('.jpg')]), 'latin-1 name')
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))

  const refused = await redirfs('mount', source, mountpoint, '--chunk-size', '2')
  t.not(refused.code, 0)
  t.match(refused.stderr, /^redirfs: 1 entry of the source cannot be served: cat\/caf\\xe9\.jpg \(name is not valid UTF-8\); fix or remove it, or pass --skip-unservable to leave it out\n$/)
  t.notOk(isMounted(mountpoint))

  const skipping = await redirfs('mount', source, mountpoint, '--chunk-size', '2', '--skip-unservable')
  t.equal(skipping.code, 0, skipping.stderr)
  t.match(skipping.stdout, /: 12 samples in 2 groups \(cat, dog\); left out 1 entry that cannot be served/)
  t.same((await fs.readdir(path.join(mountpoint, 'cat'))).sort(), ['0.jpg', '1.jpg', '2.jpg', '3.jpg', '4.jpg', '5.jpg'])
  t.equal((await readStats(mountpoint)).layout.skippedEntries, 1)
})

t.test('special files and broken links are named too, not dropped silently', async t => {
  const source = emptyDir('redirfs-special-')
  t.teardown(async () => { await fs.rm(source, { recursive: true, force: true }) })
  mkdirSync(path.join(source, 'cat'))
  for (let i = 0; i < 3; i++) writeFileSync(path.join(source, 'cat', `${i}.jpg`), `cat ${i}`)
  await new Promise<void>((resolve, reject) => spawn('mkfifo', [path.join(source, 'cat', 'pipe.jpg')]).on('exit', code => (code === 0 ? resolve() : reject(new Error('mkfifo')))))
  await fs.symlink('/nonexistent/target.jpg', path.join(source, 'cat', 'gone.jpg'))
  const result = await redirfs('mount', source, emptyDir(), '--chunk-size', '2')
  t.not(result.code, 0)
  t.match(result.stderr, /2 entries of the source cannot be served: cat\/gone\.jpg \(broken symbolic link\), cat\/pipe\.jpg \(not a regular file or directory\)/)
})

t.test('a second mount on a busy mountpoint is refused', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const again = await redirfs('mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  t.not(again.code, 0)
  t.match(again.stderr, /is busy/)
})

t.test('mounting over the source itself serves the covered files', async t => {
  const copy = generateDataset(5)
  t.teardown(async () => { await fs.rm(copy.root, { recursive: true, force: true }) })
  await mount(t, copy.root, copy.root, '--memory', '300K', '--chunk-size', '4', '--redirect', 'pool')
  t.ok(isMounted(copy.root))
  for (let epoch = 0; epoch < 2; epoch++) {
    const read = await readEpoch(copy.root, copy.samples, epoch)
    const served = read.map(r => copy.byContent.get(r.content))
    t.equal(read.filter((r, i) => served[i] === undefined || classOf(served[i]!) !== classOf(r.opened)).length, 0)
    t.same([...served].sort(), copy.samples)
  }
})

t.test('umount leaves nothing mounted and stops the daemon', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const { pid } = await readStats(mountpoint)
  const result = await redirfs('umount', mountpoint)
  t.equal(result.code, 0, result.stderr)
  t.notOk(isMounted(mountpoint))
  t.notOk(isAlive(pid), 'the daemon exited')
  t.same(await fs.readdir(mountpoint), [], 'the mountpoint is an empty directory again')
})

t.test('umount refuses while a file is open there, and --force does it anyway', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const { pid } = await readStats(mountpoint)
  const handle = await fs.open(path.join(mountpoint, 'README.txt'), 'r')
  t.teardown(async () => { await handle.close().catch(() => {}) })
  const busy = await redirfs('umount', mountpoint)
  t.not(busy.code, 0)
  t.match(busy.stderr, /busy/)
  t.ok(isMounted(mountpoint))
  const forced = await redirfs('umount', '--force', mountpoint)
  t.equal(forced.code, 0, forced.stderr)
  t.notOk(isMounted(mountpoint))
  t.notOk(isAlive(pid))
})

/** After the daemon died: umount --force clears the mountpoint, and a new mount serves every sample once. */
async function forceUnmountAndRemount (t: Test, mountpoint: string): Promise<void> {
  const forced = await redirfs('umount', '--force', mountpoint)
  t.equal(forced.code, 0, forced.stderr)
  t.notOk(isMounted(mountpoint))
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const read = await readEpoch(mountpoint, dataset.samples, 1)
  t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, 'the remount serves every sample once')
}

t.test('a killed daemon: umount --force recovers the mountpoint and a remount works', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const { pid } = await readStats(mountpoint)
  process.kill(pid, 'SIGKILL')
  await waitUntil(() => !isAlive(pid))
  // A request caught in the kernel's abort of the connection fails ECONNABORTED; every later one, ENOTCONN.
  const code = async (): Promise<string | undefined> => await fs.readdir(mountpoint).then(() => undefined, (err: NodeJS.ErrnoException) => err.code)
  await waitUntil(async () => await code() !== 'ECONNABORTED')
  t.equal(await code(), 'ENOTCONN', 'a dead mount')
  const refused = await redirfs('mount', dataset.root, mountpoint)
  t.match(refused.stderr, /dead mount.*redirfs umount --force/)
  await forceUnmountAndRemount(t, mountpoint)
})

t.test('a daemon killed while a reader reads: the reader fails at once, and umount --force and a remount work', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4')
  const { pid } = await readStats(mountpoint)
  // Reads every sample again and again until an error; prints the errno it died of.
  const script = 'import os, sys\nfiles=[os.path.join(sys.argv[1], p) for p in sys.argv[2:]]\nprint("reading", flush=True)\n' +
    'while True:\n  for p in files:\n    try:\n      open(p, "rb").read()\n    except OSError as e:\n      print(e.errno); sys.exit(3)'
  const reader = spawn('/usr/bin/python3', ['-c', script, mountpoint, ...dataset.samples], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { if (reader.exitCode === null) reader.kill('SIGKILL') })
  let output = ''
  reader.stdout.on('data', chunk => { output += String(chunk) })
  const exited = new Promise<number | null>(resolve => reader.on('exit', code => resolve(code)))
  // Kill the daemon once the reader is in the middle of its work: the mount has answered some of its opens.
  while (!output.includes('reading') || (await readStats(mountpoint)).protocol.opens < 20) await new Promise(resolve => setTimeout(resolve, 20))
  process.kill(pid, 'SIGKILL')
  const timeout = new Promise<string>(resolve => setTimeout(() => resolve('still running'), 10_000))
  t.equal(await Promise.race([exited, timeout]), 3, 'the reader got an error, no hang')
  const errno = Number(output.trim().split('\n').pop())
  t.ok([os.constants.errno.ENOTCONN, os.constants.errno.ECONNABORTED].includes(errno), `errno ${errno}: the connection is gone`)
  await forceUnmountAndRemount(t, mountpoint)
})

t.test('--foreground stays attached and unmounts cleanly on SIGTERM and SIGINT', async t => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    const mountpoint = emptyDir()
    t.teardown(() => forceUnmount(mountpoint))
    const child = spawn(CLI, ['mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--foreground', '--log-level', 'error'], { stdio: 'ignore', env: CLI_ENV })
    t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
    await waitUntil(() => isMounted(mountpoint) || child.exitCode !== null)
    t.ok(isMounted(mountpoint), `${signal}: mounted`)
    const exited = new Promise<number | null>(resolve => child.on('exit', code => resolve(code)))
    child.kill(signal)
    t.equal(await exited, 0, `${signal}: exit 0`)
    t.notOk(isMounted(mountpoint), `${signal}: unmounted`)
  }
})

t.test('after a run stopped mid-epoch, redirfs reset makes the next epochs exact again', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--redirect', 'strict')
  await readEpoch(mountpoint, dataset.samples.slice(0, 70), 1)
  const result = await redirfs('reset', mountpoint)
  t.equal(result.code, 0, result.stderr)
  t.equal((await readStats(mountpoint)).protocol.resets, 1)
  for (let epoch = 0; epoch < 2; epoch++) {
    const read = await readEpoch(mountpoint, dataset.samples, 10 + epoch)
    t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, `epoch ${epoch}: every sample once`)
  }
})

t.test('a signal that arrives while the mount is starting still ends in a clean unmount', async t => {
  // A source big enough that scanning it keeps the daemon from mounting for a while.
  const big = emptyDir('redirfs-bigtree-')
  t.teardown(async () => { await fs.rm(big, { recursive: true, force: true }) })
  for (let c = 0; c < 10; c++) {
    mkdirSync(path.join(big, `c${c}`))
    for (let i = 0; i < 2000; i++) writeFileSync(path.join(big, `c${c}`, `${i}.jpg`), 'x')
  }
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  const child = spawn(CLI, ['mount', big, mountpoint, '--memory', '1M', '--chunk-size', '4', '--foreground', '--log-level', 'info'], { stdio: ['ignore', 'ignore', 'pipe'], env: CLI_ENV })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const exited = new Promise<number | null>(resolve => child.on('exit', code => resolve(code)))
  // The daemon says 'starting' once its signal handlers are in place, before it scans and mounts.
  await new Promise<void>(resolve => {
    let seen = ''
    child.stderr.on('data', (text: Buffer) => { seen += text.toString(); if (seen.includes('starting')) resolve() })
  })
  t.notOk(isMounted(mountpoint), 'the signal comes before the mount is up')
  child.kill('SIGTERM')
  t.equal(await exited, 0, 'exit 0')
  t.notOk(isMounted(mountpoint), 'nothing is left mounted')
})
