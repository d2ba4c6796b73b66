// What reading from S3 costs the reading process in CPU, per MiB, and how
// much of it is redirfs's: the same bytes read four ways, each in its own
// round, the reader's CPU measured by process.cpuUsage():
// - store: redirfs's S3 client (src/s3/store.ts, the AWS SDK v3 under it),
//   ranged GETs of --range bytes, --concurrency at a time, as a pack's
//   chunk reads are, each kept in a buffer of its own;
// - http: the same ranged GETs by Node's bare http module (the bucket is
//   public-read, so no signing), their bodies counted and dropped: the
//   floor for any HTTP client in Node;
// - tcp: the same bytes sent over loopback TCP by a child process, read by
//   a plain socket: no HTTP, no server, the kernel's socket path alone;
// - file: the same bytes read from a local file, --range at a time (what a
//   local pack's reads cost, for scale).
// The server is a single-node Ceph RGW on loopback (scripts/rgw.sh).
//
//   node bench/s3-cost.js [--mib 256] [--range 2097152] [--concurrency 16] [--rounds 3] [--ways store,http,tcp,file] [--sweep 524288,8388608]
//
// (--ways: only those, e.g. one under `node --cpu-prof` to see where its CPU goes.)
//
// Prints a markdown report: CPU ms per MiB of each way, the median of
// --rounds rounds, and the cores each would keep busy at a given rate;
// then store and http again at each --sweep range size, which splits what
// the S3 client adds to bare HTTP into a cost per GET and one per MiB.
'use strict'
const { spawnSync, fork } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { parseArgs } = require('node:util')

// The SDK's notice that its releases after January 2027 need Node 22 (as redirfs's own store does).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
const ROOT = path.join(__dirname, '..')
const dist = path.join(ROOT, 'dist')

/** The command line, or a one-line error: every size and count a whole number of at least 1. */
function parseOptions () {
  const { values } = parseArgs({
    options: {
      mib: { type: 'string', default: '256' },
      range: { type: 'string', default: String(2 * 2 ** 20) },
      concurrency: { type: 'string', default: '16' },
      rounds: { type: 'string', default: '3' },
      ways: { type: 'string', default: 'store,http,tcp,file' },
      sweep: { type: 'string', default: `${512 * 2 ** 10},${8 * 2 ** 20}` },
      'tcp-sender': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false }
    }
  })
  if (values.help) {
    // The file's opening comment is the help.
    const lines = fs.readFileSync(__filename, 'utf8').split('\n')
    console.log(lines.slice(0, lines.findIndex(line => line.startsWith("'use strict'"))).map(line => line.replace(/^\/\/ ?/, '')).join('\n'))
    process.exit(0)
  }
  const whole = (/** @type {string} */ name, /** @type {string} */ text) => {
    const value = Number(text)
    if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a whole number of at least 1, got '${text}'`)
    return value
  }
  const ways = values.ways.split(',')
  const unknown = ways.filter(name => !(name in WAYS))
  if (unknown.length > 0 || new Set(ways).size !== ways.length) throw new Error(`--ways takes some of ${Object.keys(WAYS).join(', ')}, each once, got '${values.ways}'`)
  return {
    mib: whole('mib', values.mib),
    range: whole('range', values.range),
    concurrency: whole('concurrency', values.concurrency),
    rounds: whole('rounds', values.rounds),
    ways,
    sweep: values.sweep.split(',').map(size => whole('sweep', size)),
    tcpSender: values['tcp-sender']
  }
}

const cpuMicroseconds = () => { const u = process.cpuUsage(); return u.user + u.system }
const median = (/** @type {number[]} */ xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

/** The TCP sender: writes `bytes` bytes to whoever connects, then closes (a child process, so that its CPU is not the reader's). */
function sendOverTcp () {
  const chunk = Buffer.alloc(1 << 20, 7)
  const server = net.createServer(socket => {
    socket.once('data', request => {
      let left = Number(request.toString())
      const more = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length)
          left -= n
          if (!socket.write(n === chunk.length ? chunk : chunk.subarray(0, n))) { socket.once('drain', more); return }
        }
        socket.end()
      }
      more()
    })
  })
  server.listen(0, '127.0.0.1', () => { /** @type {NonNullable<typeof process.send>} */ (process.send)({ port: /** @type {net.AddressInfo} */ (server.address()).port }) })
  process.on('message', message => { if (message === 'stop') process.exit(0) })
  // Its parent gone (killed, say), the sender goes too.
  process.on('disconnect', () => process.exit(0))
}

/** Runs `read` with at most `concurrency` ranges out at a time; gives the reader's CPU per MiB and the MiB/s. */
async function measure (/** @type {string} */ name, /** @type {number} */ totalBytes, /** @type {number} */ range, /** @type {number} */ concurrency, /** @type {(offset: number, length: number) => Promise<number>} */ read) {
  const cpu0 = cpuMicroseconds()
  const t0 = performance.now()
  let next = 0
  let got = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < totalBytes) {
      const offset = next
      const length = Math.min(range, totalBytes - offset)
      next += length
      const n = await read(offset, length) // not `got += await …`: that reads `got` before the await
      got += n
    }
  }))
  if (got !== totalBytes) throw new Error(`${name}: read ${got} bytes of ${totalBytes}`)
  const seconds = (performance.now() - t0) / 1000
  const mib = totalBytes / 2 ** 20
  return { cpuMsPerMib: (cpuMicroseconds() - cpu0) / 1000 / mib, mibPerSecond: mib / seconds }
}

/** Reads a whole answer body; gives its length. */
async function drain (/** @type {import('node:stream').Readable} */ stream) {
  let n = 0
  for await (const piece of stream) n += piece.length
  return n
}

async function main () {
  const { mib, range, concurrency, rounds, ways: only, sweep: sweepSizes, tcpSender } = parseOptions()
  if (tcpSender) { sendOverTcp(); return }
  const totalBytes = mib * 2 ** 20
  const { ObjectStore } = require(path.join(dist, 's3/store.js'))
  const { S3Client, CreateBucketCommand, PutBucketPolicyCommand } = require('@aws-sdk/client-s3')

  const rgwDir = fs.mkdtempSync(path.join(os.tmpdir(), 'redirfs-s3-cost-'))
  fs.rmSync(rgwDir, { recursive: true })
  const up = spawnSync('bash', [path.join(ROOT, 'scripts/rgw.sh'), 'up', rgwDir, '--owner', String(process.pid), '--memory', String(totalBytes * 2 + 2 ** 30)], { encoding: 'utf8' })
  if (up.status !== 0) { console.error(`s3-cost: RGW did not come up: ${up.stderr.trim()}`); process.exit(1) }
  const server = JSON.parse(up.stdout.trim().split('\n').pop() ?? '')
  const stopServer = () => spawnSync('bash', [path.join(ROOT, 'scripts/rgw.sh'), 'down', rgwDir])
  const sender = fork(__filename, ['--tcp-sender'])
  const localFile = path.join(os.tmpdir(), `redirfs-s3-cost-${process.pid}.bin`)
  try {
    const bucket = 'cost'
    const key = 'object.bin'
    const credentials = { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey }
    const admin = new S3Client({ endpoint: server.endpoint, region: server.region, forcePathStyle: true, credentials })
    await admin.send(new CreateBucketCommand({ Bucket: bucket }))
    await admin.send(new PutBucketPolicyCommand({ Bucket: bucket, Policy: JSON.stringify({ Version: '2012-10-17', Statement: [{ Effect: 'Allow', Principal: '*', Action: 's3:GetObject', Resource: `arn:aws:s3:::${bucket}/*` }] }) }))
    const bytes = Buffer.alloc(totalBytes)
    for (let i = 0; i < totalBytes; i += 4096) bytes[i] = i & 255
    const store = new ObjectStore({ bucket, endpoint: server.endpoint, region: server.region, pathStyle: true, credentials, concurrency, partSize: range })
    await store.put(key, bytes)
    fs.writeFileSync(localFile, bytes)

    const url = new URL(`${server.endpoint}/${bucket}/${key}`)
    const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency })
    const senderPort = await new Promise(resolve => sender.once('message', message => resolve(/** @type {{ port: number }} */ (message).port)))
    const fd = fs.openSync(localFile, 'r')
    const buffers = Array.from({ length: concurrency }, () => Buffer.allocUnsafe(range))
    let nextBuffer = 0

    /** @type {Record<string, (offset: number, length: number) => Promise<number>>} */
    const ways = {
      store: async (offset, length) => (await store.getRange(key, offset, length)).length,
      http: async (offset, length) => await new Promise((resolve, reject) => {
        http.get(url, { agent, headers: { Range: `bytes=${offset}-${offset + length - 1}` } }, response => {
          if (response.statusCode !== 206) { reject(new Error(`GET answered ${response.statusCode}`)); response.resume(); return }
          drain(response).then(resolve, reject)
        }).on('error', reject)
      }),
      tcp: async (_offset, length) => await new Promise((resolve, reject) => {
        const socket = net.connect(senderPort, '127.0.0.1', () => socket.write(String(length)))
        socket.on('error', reject)
        drain(socket).then(resolve, reject)
      }),
      file: async (offset, length) => await new Promise((resolve, reject) => {
        fs.read(fd, buffers[nextBuffer++ % buffers.length], 0, length, offset, (err, n) => err === null ? resolve(n) : reject(err))
      })
    }
    for (const name of Object.keys(ways)) if (!only.includes(name)) delete ways[name]
    /** @type {Record<string, { cpu: number[], rate: number[] }>} */
    const results = {}
    // A warm-up of each way first (connections, the JIT), not counted.
    for (const [name, read] of Object.entries(ways)) await measure(name, Math.min(totalBytes, 16 * range), range, concurrency, read)
    for (let round = 0; round < rounds; round++) {
      for (const [name, read] of Object.entries(ways)) {
        const { cpuMsPerMib, mibPerSecond } = await measure(name, totalBytes, range, concurrency, read)
        results[name] ??= { cpu: [], rate: [] }
        results[name].cpu.push(cpuMsPerMib)
        results[name].rate.push(mibPerSecond)
      }
    }
    /** @type {Array<{ range: number, store: number[], http: number[] }>} */
    const sweep = []
    if (ways.store !== undefined && ways.http !== undefined) {
      for (const size of [...new Set([range, ...sweepSizes])].sort((a, b) => a - b)) {
        const sized = new ObjectStore({ bucket, endpoint: server.endpoint, region: server.region, pathStyle: true, credentials, concurrency, partSize: size })
        const viaStore = async (/** @type {number} */ offset, /** @type {number} */ length) => (await sized.getRange(key, offset, length)).length
        const row = { range: size, store: /** @type {number[]} */ ([]), http: /** @type {number[]} */ ([]) }
        await measure('store', Math.min(totalBytes, 16 * size), size, concurrency, viaStore)
        for (let round = 0; round < rounds; round++) {
          row.store.push((await measure('store', totalBytes, size, concurrency, viaStore)).cpuMsPerMib)
          row.http.push((await measure('http', totalBytes, size, concurrency, ways.http)).cpuMsPerMib)
        }
        sweep.push(row)
      }
    }
    fs.closeSync(fd)
    agent.destroy()
    report({ mib, range, concurrency, rounds, results, sweep })
  } finally {
    if (sender.connected) sender.send('stop')
    fs.rmSync(localFile, { force: true })
    stopServer()
  }
}

const WAYS = {
  store: "redirfs's S3 client (AWS SDK v3), ranged GETs into buffers of their own",
  http: "Node's bare `http`, the same ranged GETs (no signing)",
  tcp: 'a plain loopback TCP socket, the bytes alone (sender in another process)',
  file: 'a local file, `pread` of the same ranges (the page cache)'
}

function report (/** @type {{ mib: number, range: number, concurrency: number, rounds: number, results: Record<string, { cpu: number[], rate: number[] }>, sweep: Array<{ range: number, store: number[], http: number[] }> }} */ run) {
  const commit = spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).stdout.trim()
  const load = os.loadavg().map(x => x.toFixed(2)).join(' / ')
  const lines = [
    '# What reading from S3 costs the reader in CPU',
    '',
    `Run on commit ${commit}: \`node bench/s3-cost.js --mib ${run.mib} --range ${run.range} --concurrency ${run.concurrency} --rounds ${run.rounds}\``,
    '',
    `${run.mib} MiB from one object on a single-node Ceph RGW 16.2.15 on loopback (scripts/rgw.sh), in ranges of ${(run.range / 2 ** 20).toFixed(1)} MiB, ${run.concurrency} at a time; the reading process's CPU (user + system) per MiB read, and its rate, the median of ${run.rounds} rounds after a warm-up (each way in turn in each round, so all see the same machine). ${os.cpus().length} cores; load average after the run ${load}.`,
    '',
    '| reader | CPU ms per MiB | MiB/s | cores at 100 MiB/s |',
    '|---|---|---|---|'
  ]
  for (const [name, what] of Object.entries(WAYS)) {
    if (run.results[name] === undefined) continue
    const { cpu, rate } = run.results[name]
    const ms = median(cpu)
    lines.push(`| ${what} | ${ms.toFixed(2)} | ${median(rate).toFixed(0)} | ${(ms * 100 / 1000).toFixed(2)} |`)
  }
  if (['store', 'http', 'tcp'].some(name => run.results[name] === undefined)) { console.log(lines.join('\n')); return }
  const store = median(run.results.store.cpu)
  const httpMs = median(run.results.http.cpu)
  const tcp = median(run.results.tcp.cpu)
  lines.push('', `The S3 client costs ${(store / httpMs).toFixed(2)}x bare HTTP and ${(store / tcp).toFixed(2)}x the socket alone: of its ${store.toFixed(2)} ms per MiB, ${tcp.toFixed(2)} are the kernel's socket path that any reader pays, ${(httpMs - tcp).toFixed(2)} HTTP's parsing in Node, ${(store - httpMs).toFixed(2)} the S3 client's own (signing, keeping the bytes, checking each answer).`)
  if (run.sweep.length >= 2) {
    lines.push('', 'By range size (store and http in turn, the median of each):', '', '| range | store, CPU ms per MiB | http, CPU ms per MiB | what the S3 client adds, ms per MiB |', '|---|---|---|---|')
    const extra = run.sweep.map(row => ({ mib: row.range / 2 ** 20, ms: median(row.store) - median(row.http) }))
    for (const [i, row] of run.sweep.entries()) lines.push(`| ${(row.range / 2 ** 20).toFixed(1)} MiB | ${median(row.store).toFixed(2)} | ${median(row.http).toFixed(2)} | ${extra[i].ms.toFixed(2)} |`)
    // What it adds, as a + b / (MiB per GET): b per GET, a per MiB; from the smallest and the largest range.
    const [small, large] = [extra[0], extra[extra.length - 1]]
    const perGet = (small.ms - large.ms) / (1 / small.mib - 1 / large.mib)
    const perMib = large.ms - perGet / large.mib
    lines.push('', `Fitted from the smallest and the largest range: the S3 client adds about ${perGet.toFixed(2)} ms of CPU per GET and ${perMib.toFixed(2)} ms per MiB to bare HTTP.`)
  }
  console.log(lines.join('\n'))
}

main().catch(err => { console.error(`s3-cost: ${err instanceof Error ? err.message : String(err)}`); process.exit(1) })
