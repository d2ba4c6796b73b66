// What moving samples between two nodes costs in CPU through redirfs's own
// RPC layer alone: the peer server and client of src/cluster (a read's
// request and answer on the data channel, its watchdog's pings on gRPC,
// the token check), each end in its own process, with nothing behind the
// server but samples already in memory. It is a floor under the daemons' CPU per remote sample
// in the cluster bench (bench/run.py --cluster), which runs it in the same
// run with the sample size and the samples per call its cluster measured.
//
//   node bench/rpc-cost.js [--sample-bytes 113000] [--per-call 4] [--calls 600] [--concurrency 4]
//
// Prints one JSON line: CPU µs per sample on the sending end (the owner,
// answering Read) and on the receiving end (the requester).
'use strict'
const { fork } = require('node:child_process')
const path = require('node:path')

const dist = path.join(__dirname, '..', 'dist')
const { startPeerServer } = require(path.join(dist, 'cluster/peer-server.js'))
const { PeerClient } = require(path.join(dist, 'cluster/peer-client.js'))
const { loadCredentials } = require(path.join(dist, 'cluster/security.js'))
const { parseAddress } = require(path.join(dist, 'cluster/addresses.js'))
const { SampleBuffers } = require(path.join(dist, 'chunks/sample-buffers.js'))

const args = process.argv.slice(2)
/** A whole-number option of at least 1. */
function option (/** @type {string} */ name, /** @type {number} */ fallback) {
  const i = args.indexOf(name)
  const value = i < 0 ? fallback : Number(args[i + 1])
  if (!Number.isInteger(value) || value < 1) {
    console.error(`rpc-cost: ${name} must be a whole number of at least 1, got '${args[i + 1]}'`)
    process.exit(1)
  }
  return value
}
const sampleBytes = option('--sample-bytes', 113000)
const perCall = option('--per-call', 4)
const calls = option('--calls', 600)
const concurrency = option('--concurrency', 4)
const TOKEN = 'rpc-cost-bench-token-0123456789'
const silent = { warn () {}, error () {}, info () {}, debug () {} }
const cpuMicroseconds = () => { const u = process.cpuUsage(); return u.user + u.system }

async function serve () {
  // Distinct buffers, as samples in memory are; each answer ships perCall of them.
  const samples = Array.from({ length: 64 }, (_, i) => Buffer.alloc(sampleBytes, i))
  let next = 0
  const take = () => ({ file: next, data: samples[next++ % samples.length] })
  const handler = {
    handshake: () => ({ protocolVersion: 0, node: 0, layoutHash: '' }),
    read: async () => ({ served: take(), batch: Array.from({ length: perCall - 1 }, take), batchNumber: next, vcEpoch: 0 })
  }
  const server = await startPeerServer({ host: '127.0.0.1', port: 0, text: '127.0.0.1:0' }, await loadCredentials({}), TOKEN, handler, silent)
  const send = /** @type {NonNullable<typeof process.send>} */ (process.send).bind(process)
  process.on('message', message => {
    if (message === 'cpu') send({ cpu: cpuMicroseconds() })
    if (message === 'stop') void server.close().then(() => process.exit(0))
  })
  send({ port: server.port })
}

async function measure () {
  const sender = fork(__filename, ['--serve', ...args])
  sender.on('exit', code => { if (code !== 0) { console.error(`rpc-cost: the sending process failed (exit ${code})`); process.exit(1) } })
  const ask = (/** @type {string | undefined} */ what) => /** @type {Promise<any>} */ (new Promise(resolve => { sender.once('message', resolve); if (what !== undefined) sender.send(what) }))
  const { port } = await ask(undefined)
  const credentials = await loadCredentials({})
  const buffers = new SampleBuffers()
  const client = new PeerClient(parseAddress(`127.0.0.1:${port}`, 'peer'), credentials, TOKEN, 5000, buffers)
  const request = { node: 1, file: 0, emptyOffsets: Buffer.alloc(8, 0xff), freeBytes: 2 ** 40, lastBatch: 0 }
  const ping = { protocolVersion: 0, node: 1, nodes: 2, layoutHash: '' }
  let received = 0
  const run = async (/** @type {number} */ count) => {
    let started = 0
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (started < count) {
        started++
        const reply = await client.read(request, ping)
        // As a daemon does once it has served them: the buffers go back for the next answer.
        for (const file of [reply.served, ...reply.batch]) buffers.give(file.data)
        received += 1 + reply.batch.length
      }
    }))
  }
  await run(50) // connect and warm the JIT
  received = 0
  const senderBefore = (await ask('cpu')).cpu
  const receiverBefore = cpuMicroseconds()
  const started = process.hrtime.bigint()
  await run(calls)
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  const receiverCpu = cpuMicroseconds() - receiverBefore
  const senderCpu = (await ask('cpu')).cpu - senderBefore
  client.close()
  sender.send('stop')
  console.log(JSON.stringify({
    sampleBytes,
    samplesPerCall: perCall,
    calls,
    concurrency,
    samples: received,
    senderCpuMicrosecondsPerSample: senderCpu / received,
    receiverCpuMicrosecondsPerSample: receiverCpu / received,
    megabytesPerSecond: received * sampleBytes / seconds / 1e6
  }))
}

if (args[0] === '--serve') {
  serve().catch(err => { console.error(err); process.exit(1) })
} else {
  measure().catch(err => { console.error(`rpc-cost: ${err.message}`); process.exit(1) })
}
