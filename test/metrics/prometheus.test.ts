// Prometheus metrics of a live mount (--metrics), scraped over HTTP and
// read with a real parser of the text format: the values are those
// `redirfs stats --json` shows, opens waited are a histogram, the process
// metrics are there, the server listens on loopback unless told, and no
// number of connections to it takes what the mount needs.
import { execFile } from 'node:child_process'
import { promises as fs, readdirSync, readlinkSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import parse from 'parse-prometheus-text-format'
import { readStats } from '../../src/cli/stats-command'
import { metricsConnectionCap } from '../../src/metrics/prometheus'
import { generateDataset } from '../helpers/dataset'
import { CLI, CLI_ENV, emptyDir, forceUnmount, mount, redirfs, settledStats } from '../helpers/mount'
import { readEpoch } from '../helpers/readers'

const run = promisify(execFile)

const dataset = generateDataset(41)
t.teardown(async () => { await fs.rm(dataset.root, { recursive: true, force: true }) })

interface Family { name: string, type: string, metrics: Array<{ value?: string, labels?: Record<string, string>, count?: string, buckets?: Record<string, string> }> }

async function scrape (url: string): Promise<Map<string, Family>> {
  const response = await fetch(url)
  const families = parse(await response.text()) as Family[]
  return new Map(families.map(family => [family.name, family]))
}

const sum = (family: Family | undefined): number => (family?.metrics ?? []).reduce((total, m) => total + Number(m.value), 0)
const valueOf = (family: Family | undefined, labels: Record<string, string> = {}): number =>
  Number(family?.metrics.find(m => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))?.value)

t.test('a scrape shows what redirfs stats shows, by Prometheus conventions', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', '0')
  for (let epoch = 0; epoch < 2; epoch++) await readEpoch(mountpoint, dataset.samples, epoch)
  const stats = await settledStats(mountpoint)
  t.match(stats.metrics, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, 'on loopback, at the port it was given')
  const families = await scrape(stats.metrics!)
  const after = await readStats(mountpoint)
  t.same(after.protocol, stats.protocol, 'nothing moved while scraping')
  t.equal(families.get('redirfs_opens')?.type ?? families.get('redirfs_opens_total')?.type, 'COUNTER')
  const opens = families.get('redirfs_opens_total') ?? families.get('redirfs_opens')
  t.equal(sum(opens), stats.protocol.opens, 'opens, all results')
  t.equal(valueOf(opens, { result: 'memory' }), stats.protocol.memoryHits)
  t.equal(sum(families.get('redirfs_chunk_loads_total') ?? families.get('redirfs_chunk_loads')), stats.protocol.chunkLoads)
  t.equal(valueOf(families.get('redirfs_resident_bytes')), stats.protocol.residentBytes)
  t.equal(valueOf(families.get('redirfs_budget_bytes')), 300 * 1024)
  t.equal(valueOf(families.get('redirfs_samples')), dataset.samples.length)
  t.equal(sum(families.get('redirfs_source_bytes_total') ?? families.get('redirfs_source_bytes')), Number(stats.source.bytesRead))
  const wait = families.get('redirfs_open_wait_seconds')
  t.equal(wait?.type, 'HISTOGRAM')
  t.equal(Number(wait?.metrics[0].count), stats.protocol.opens, 'every sample open timed')
  t.ok(families.has('redirfs_process_resident_memory_bytes'), 'the process metrics too')
  t.equal(valueOf(families.get('redirfs_runs_exact')), 1)
})

t.test('an IPv6 address is served, and named in brackets as a URL has it', async t => {
  const mountpoint = emptyDir()
  await mount(t, dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', '[::1]:0')
  const { metrics } = await readStats(mountpoint)
  t.match(metrics, /^http:\/\/\[::1\]:\d+\/metrics$/)
  t.equal((await scrape(metrics!)).get('redirfs_samples')?.type, 'GAUGE')
})

t.test('a bad --metrics address, and a port in use, are one-line errors', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  for (const address of ['nonsense', '[zz]:0']) {
    const bad = await redirfs('mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', address)
    t.equal(bad.stderr, `redirfs: --metrics must be host:port, [IPv6 address]:port or a port, e.g. 127.0.0.1:9464, got '${address}'\n`)
  }
  const elsewhere = await redirfs('mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', '[::2]:0')
  t.equal(elsewhere.stderr, 'redirfs: --metrics [::2]:0: cannot listen (not an address of this machine, EADDRNOTAVAIL)\n', 'as given, brackets included')
  const first = emptyDir()
  await mount(t, dataset.root, first, '--memory', '300K', '--chunk-size', '4', '--metrics', '0')
  const port = new URL((await readStats(first)).metrics!).port
  const taken = await redirfs('mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', port)
  t.equal(taken.code, 1)
  t.equal(taken.stderr, `redirfs: --metrics 127.0.0.1:${port}: the port is in use; choose another\n`)
})

/** The TCP and other sockets a process holds (its listening socket included). */
function socketsOf (pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).filter(fd => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:') } catch { return false } }).length
}

/** Polls `condition` until it holds, or gives up after `ms` (a failing test ends, never hangs). */
async function until (condition: () => boolean, ms: number): Promise<boolean> {
  for (const deadline = Date.now() + ms; !condition() && Date.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 100))
  return condition()
}

t.test('idle connections to the metrics port cannot take the descriptors opens need, and are closed', async t => {
  const mountpoint = emptyDir()
  t.teardown(() => forceUnmount(mountpoint))
  // A daemon with few descriptors, so that a few hundred connections (not 20,000) would take them all.
  const FD_LIMIT = 160
  await run('prlimit', [`--nofile=${FD_LIMIT}`, CLI, 'mount', dataset.root, mountpoint, '--memory', '300K', '--chunk-size', '4', '--metrics', '0'], { env: CLI_ENV })
  const stats = await readStats(mountpoint)
  const port = Number(new URL(stats.metrics!).port)

  // Connections that never send a byte, from this process, more than the daemon has descriptors.
  const CONNECTIONS = 400
  const sockets: net.Socket[] = []
  t.teardown(() => { for (const socket of sockets) socket.destroy() })
  let closed = 0
  await Promise.all(Array.from({ length: CONNECTIONS }, async () => await new Promise<void>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', resolve)
    socket.once('error', err => { if (socket.connecting) reject(err) })
    socket.once('close', () => { closed++ })
    sockets.push(socket)
  })))
  const cap = metricsConnectionCap(FD_LIMIT)
  t.ok(await until(() => closed >= CONNECTIONS - cap, 60_000), `the daemon closed every connection over its cap of ${cap} (${closed} of ${CONNECTIONS} closed)`)
  t.ok(socketsOf(stats.pid) <= cap + 1, 'the daemon holds the rest, and no more')

  const read = await readEpoch(mountpoint, dataset.samples, 1)
  t.same(read.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, 'every sample opens, once each')
  const [other, bytes] = [...dataset.others].find(([, b]) => b.length > 0)!
  t.same(await fs.readFile(path.join(mountpoint, other)), bytes, 'a pass-through open works')
  const seen = await redirfs('stats', mountpoint)
  t.equal(seen.code, 0, `redirfs stats works: ${seen.stderr}`)

  t.ok(await until(() => closed === CONNECTIONS, 60_000), `the idle ones are closed too (${closed} of ${CONNECTIONS})`)
  const scrape = await fetch(stats.metrics!)
  t.equal(scrape.status, 200, 'and a scraper is served again')
  await scrape.text()
})
