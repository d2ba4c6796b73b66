// The peer service on a real gRPC server on 127.0.0.1:0: the token guard,
// status mapping for refusals and malformed requests, mutual TLS with
// certificates made by openssl, and the offset bitmap of the wire format.
// The handler is a small stand-in here; test/cluster/cluster.test.ts runs
// the real nodes.
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t, { type Test } from 'tap'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { parseAddress, parsePeers } from '../../src/cluster/addresses'
import { PeerCallError } from '../../src/cluster/call-error'
import { FIRST_GENERATION } from '../../src/cluster/generations'
import { PeerClient } from '../../src/cluster/peer-client'
import { PeerRefusal } from '../../src/cluster/call-error'
import { startPeerServer, type PeerHandler } from '../../src/cluster/peer-server'
import { loadCredentials, TOKEN_METADATA, type Credentials } from '../../src/cluster/security'
import { decodeOffsets, encodeOffsets, peerService, peerStub, PROTOCOL_VERSION, requestLimit } from '../../src/cluster/wire'
import { UsageError } from '../../src/errors'
import { makeCertificates } from '../helpers/certificates'
import { generateDataset } from '../helpers/dataset'
import { freePorts, mountCluster, readClusterEpoch } from '../helpers/cluster'
import { readStats } from '../../src/cli/stats-command'

const TOKEN = 'the-cluster-token-0123456789'
const log = pino({ level: 'silent' })
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-peer-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

const handler: PeerHandler = {
  handshake: request => {
    if (request.layoutHash !== 'abc') throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, 'layout differs')
    return { protocolVersion: PROTOCOL_VERSION, node: 1, layoutHash: 'abc', dataPort: 0, generation: null, rejoining: false, dead: [], incarnation: 1, suspicions: [], samples: 0, alive: [] }
  },
  read: async request => {
    if (request.file > 10) throw new PeerRefusal(grpc.status.INVALID_ARGUMENT, `file ${request.file} is not in the layout`)
    return { served: { file: request.file, data: Buffer.from('bytes') }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }
  },
  reclaim: () => { throw new Error('boom') },
  takeoverState: async () => ({ vcs: [] }),
  sync: () => ({}),
  newGeneration: request => request,
  renew: () => ({ grantedMs: 1000, refusal: '', takenForDead: false, incarnation: 1, generation: null, dead: [], suspicions: [], reading: [], alive: [] }),
  stats: () => ({ json: '{"ok":true}' })
}

async function serve (t: Test, credentials: Credentials): Promise<PeerClient> {
  const server = await startPeerServer({ host: '127.0.0.1', port: 0, text: '127.0.0.1:0' }, credentials, TOKEN, handler, log, 10)
  t.teardown(() => server.close())
  const client = new PeerClient(parseAddress(`127.0.0.1:${server.port}`, 'peer'), credentials, TOKEN, 3000, new SampleBuffers())
  t.teardown(() => client.close())
  return client
}

const statusOf = async (promise: Promise<unknown>): Promise<grpc.status | undefined> => await promise.then(() => undefined, (err: unknown) => (err as PeerCallError).status)
const ping = { protocolVersion: PROTOCOL_VERSION, node: 0, nodes: 2, layoutHash: 'abc', incarnation: 1, generation: null, samples: 0 }

t.test('calls go through with the token; refusals and malformed requests get their status', async t => {
  const client = await serve(t, await loadCredentials({}))
  t.equal(JSON.parse((await client.stats()).json).ok, true)
  t.equal((await client.read({ node: 0, file: 3, emptyOffsets: Buffer.alloc(1), freeBytes: 0, lastBatch: 0, givenBackFiles: [], givenBackBatches: [], generation: null }, ping)).served?.data.toString(), 'bytes')
  t.equal(await statusOf(client.read({ node: 0, file: 99, emptyOffsets: Buffer.alloc(1), freeBytes: 0, lastBatch: 0, givenBackFiles: [], givenBackBatches: [], generation: null }, ping)), grpc.status.INVALID_ARGUMENT)
  t.equal(await statusOf(client.handshake({ ...ping, layoutHash: 'other' })), grpc.status.FAILED_PRECONDITION)
  t.equal(await statusOf(client.reclaim({ node: 0, vc: 0, giveBack: false, offsets: [], generation: null }, ping)), grpc.status.INTERNAL, 'a handler bug is INTERNAL, not a crash')
})

/** The status of a sync naming more files than a 10-file layout could ever send, sent with `token` (none: a stranger's) to a node of `samples` files. */
async function oversizedSync (t: Test, samples: number, token?: string): Promise<grpc.status | 'ok'> {
  const credentials = await loadCredentials({})
  const served = Array.from({ length: Math.ceil(requestLimit(10) / 8) }, (_, file) => ({ vc: 1, file, batch: 1 }))
  const server = await startPeerServer({ host: '127.0.0.1', port: 0, text: '127.0.0.1:0' }, credentials, TOKEN, handler, log, samples)
  t.teardown(() => server.close())
  const stub = peerStub(`127.0.0.1:${server.port}`, credentials.client)
  t.teardown(() => stub.close())
  const metadata = new grpc.Metadata()
  if (token !== undefined) metadata.set(TOKEN_METADATA, token)
  return await new Promise(resolve => stub.sync({ node: 0, standby: [], served, generation: null }, metadata, (err: grpc.ServiceError | null) => resolve(err?.code ?? 'ok')))
}

t.test('a call without the token is refused from its headers, before its message is read: even one past the size cap', async t => {
  t.equal(await oversizedSync(t, 10), grpc.status.UNAUTHENTICATED, 'no token: refused unread, not for its size')
  t.equal(await oversizedSync(t, 10, 'not-the-cluster-token-at-all'), grpc.status.UNAUTHENTICATED, 'a wrong token: the same')
})

t.test('a member\'s request is refused past what the layout can need, and taken within it', async t => {
  t.equal(await oversizedSync(t, 10, TOKEN), grpc.status.RESOURCE_EXHAUSTED, 'past the cap of a 10-file layout')
  t.equal(await oversizedSync(t, 1_000_000, TOKEN), 'ok', 'within the cap of a big layout')
})

t.test('the largest sync a node sends fits what its peers take: a standby copy of every file and as many served notices', async t => {
  for (const [samples, vcs] of [[1, 1], [1000, 1], [1000, 1000], [500_000, 500_000], [3_000_000, 1]]) {
    // Every number at its widest (every varint at its longest), the files in `vcs` standby copies.
    const files = Array.from({ length: samples }, () => 2 ** 32 - 1)
    const perVc = Math.ceil(samples / vcs)
    const standby = Array.from({ length: vcs }, (_, vc) => files.slice(vc * perVc, (vc + 1) * perVc))
      .map(served => ({ vc: 2 ** 32 - 1, epoch: 2 ** 32 - 1, servedFiles: served, servedNodes: served, servedBatches: served.map(() => Number.MAX_SAFE_INTEGER) }))
    const sync = {
      generation: { number: 2 ** 32 - 1, key: 'k'.repeat(64) },
      node: 2 ** 32 - 1,
      standby,
      served: files.map(file => ({ vc: 2 ** 32 - 1, file, batch: Number.MAX_SAFE_INTEGER }))
    }
    const bytes = peerService().Sync.requestSerialize(sync).length
    t.ok(bytes <= requestLimit(samples), `${samples} files in ${vcs} VCs: ${bytes} bytes within ${requestLimit(samples)}`)
  }
})

t.test('a port another program holds: the node refuses to start, saying the port is in use', async t => {
  const holder = await new Promise<net.Server>(resolve => { const server = net.createServer().listen(0, '127.0.0.1', () => resolve(server)) })
  t.teardown(() => { holder.close() })
  const port = (holder.address() as net.AddressInfo).port
  const error = await startPeerServer(parseAddress(`127.0.0.1:${port}`, '--listen'), await loadCredentials({}), TOKEN, handler, log, 10).then(async server => { await server.close() }, (err: unknown) => err)
  t.ok(error instanceof UsageError, 'a usage error, not a crash')
  t.match((error as Error).message, `cannot listen on 127.0.0.1:${port}: the port is in use`)
})

t.test('a data port another program holds: the node refuses to start, naming --data-port', async t => {
  const holder = await new Promise<net.Server>(resolve => { const server = net.createServer().listen(0, '127.0.0.1', () => resolve(server)) })
  t.teardown(() => { holder.close() })
  const port = (holder.address() as net.AddressInfo).port
  const error = await startPeerServer({ host: '127.0.0.1', port: 0, text: '127.0.0.1:0' }, await loadCredentials({}), TOKEN, handler, log, 10, port).then(async server => { await server.close() }, (err: unknown) => err)
  t.ok(error instanceof UsageError, 'a usage error, not a crash')
  t.match((error as Error).message, `cannot listen for the data channel on port ${port} of 127.0.0.1: the port is in use; give --data-port a free port`)
})

t.test('a peer that is not listening is unreachable within the timeout', async t => {
  const client = new PeerClient(parseAddress('127.0.0.1:1', 'peer'), await loadCredentials({}), TOKEN, 500, new SampleBuffers())
  t.teardown(() => client.close())
  const err = await client.stats().catch((e: unknown) => e)
  t.ok(err instanceof PeerCallError && err.unreachable)
})

t.test('a peer back after it was down for a while answers the next call within the timeout: the channel does not sit in a long reconnect backoff', async t => {
  const credentials = await loadCredentials({})
  const [port] = await freePorts(1)
  const address = parseAddress(`127.0.0.1:${port}`, 'peer')
  const first = await startPeerServer(address, credentials, TOKEN, handler, log, 10)
  const client = new PeerClient(address, credentials, TOKEN, 3000, new SampleBuffers())
  t.teardown(() => client.close())
  t.equal(JSON.parse((await client.stats()).json).ok, true, 'answered while up')
  await first.close()
  // Down for a while, and called meanwhile: every try to reconnect fails (grpc-js's default backoff grows to minutes).
  for (let call = 0; call < 5; call++) t.ok(await statusOf(client.stats()) !== undefined, `call ${call} while it is down fails`)
  const again = await startPeerServer(address, credentials, TOKEN, handler, log, 10)
  t.teardown(() => again.close())
  t.equal(JSON.parse((await client.stats()).json).ok, true, 'back up: the next call is answered within the peer timeout')
})

t.test('mutual TLS: a peer with the cluster CA gets through; one that trusts another CA does not', async t => {
  const files = await makeCertificates(work)
  const client = await serve(t, await loadCredentials(files))
  t.equal(JSON.parse((await client.stats()).json).ok, true, 'TLS call answered')
  const stranger = new PeerClient(client.address, await loadCredentials({ ...files, ca: files.otherCa }), TOKEN, 1500, new SampleBuffers())
  t.teardown(() => stranger.close())
  t.ok(await statusOf(stranger.stats()) !== undefined, 'a peer of another CA gets no answer')
  // And it is the TLS handshake that fails, not a slow or absent server (the same server
  // answered the call above): a channel with those credentials goes to TRANSIENT_FAILURE.
  const channel = new grpc.Channel(client.address.text, (await loadCredentials({ ...files, ca: files.otherCa })).client, {})
  t.teardown(() => channel.close())
  const deadline = Date.now() + 60_000
  let state = channel.getConnectivityState(true)
  while (state !== grpc.connectivityState.TRANSIENT_FAILURE && Date.now() < deadline) {
    await new Promise<void>(resolve => channel.watchConnectivityState(state, deadline, () => resolve()))
    state = channel.getConnectivityState(false)
  }
  t.equal(grpc.connectivityState[state], 'TRANSIENT_FAILURE', 'the handshake was refused')
  await t.rejects(loadCredentials({ cert: files.cert }), /needs all three/)
  await t.rejects(loadCredentials({ ...files, key: '/nonexistent.key' }), /cannot read --tls-key \/nonexistent.key: ENOENT/)
})

t.test('two real nodes over mutual TLS read an epoch together', async t => {
  const files = await makeCertificates(work)
  const dataset = generateDataset(12)
  t.teardown(() => rmSync(dataset.root, { recursive: true, force: true }))
  const cluster = await mountCluster(t, [dataset.root, dataset.root], ['--memory', '200K', '--chunk-size', '4', '--group-depth', '1', '--tls-cert', files.cert, '--tls-key', files.key, '--tls-ca', files.ca])
  t.same(cluster.results.map(r => r.code), [0, 0], cluster.results.map(r => r.stderr).join(''))
  const { reads, errors } = await readClusterEpoch(cluster.mountpoints, dataset.samples, 3)
  t.same(errors, [])
  t.same(reads.map(r => dataset.byContent.get(r.content)).sort(), dataset.samples, 'every sample once')
  t.equal((await readStats(cluster.mountpoints[0])).cluster?.tls, true)
})

t.test('addresses and the offset bitmap', async t => {
  t.same(parseAddress('[::1]:7000', 'x'), { host: '[::1]', port: 7000, text: '[::1]:7000' })
  t.same(parsePeers('a:1, b:2').map(p => p.text), ['a:1', 'b:2'])
  t.throws(() => parsePeers('a:1,a:1'), /lists a:1 twice/)
  t.throws(() => parseAddress('a:70000', 'x'), /port must be from 1 to 65535/)
  const offsets = new Set([0, 3, 9, 63])
  t.same(decodeOffsets(encodeOffsets(offsets, 64)), offsets)
})

t.test('closing a node\'s peer server while a peer is frozen with a call out (SIGSTOPped) returns once it forces the shutdown, not when the peer answers', async t => {
  let entered!: () => void
  const callArrived = new Promise<void>(resolve => { entered = resolve })
  // A call that never ends: the frozen peer's call stays open on its session.
  const server = await startPeerServer({ host: '127.0.0.1', port: 0, text: '127.0.0.1:0' }, await loadCredentials({}), TOKEN, { ...handler, takeoverState: async () => { entered(); return await new Promise(() => {}) } }, log, 10)
  let closed = false
  // The peer is a process of its own, so that it can be stopped: it calls, then stops itself.
  const script = path.join(work, 'frozen-peer.js')
  writeFileSync(script, `
    const { PeerClient } = require(${JSON.stringify(path.join(__dirname, '../../dist/cluster/peer-client.js'))})
    const { parseAddress } = require(${JSON.stringify(path.join(__dirname, '../../dist/cluster/addresses.js'))})
    const { SampleBuffers } = require(${JSON.stringify(path.join(__dirname, '../../dist/chunks/sample-buffers.js'))})
    const { loadCredentials } = require(${JSON.stringify(path.join(__dirname, '../../dist/cluster/security.js'))})
    loadCredentials({}).then(credentials => {
      new PeerClient(parseAddress('127.0.0.1:${server.port}', 'peer'), credentials, ${JSON.stringify(TOKEN)}, 60000, new SampleBuffers()).takeoverState({ generation: null, node: 0, dead: 1, vcs: [], deaths: [] }).catch(() => {})
    })
    process.on('message', () => process.kill(process.pid, 'SIGSTOP'))
    process.on('disconnect', () => process.exit(0))
  `)
  const peer = spawn(process.execPath, [script], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'], cwd: path.join(__dirname, '../..') })
  // Once the peer is killed, a close that hung completes.
  t.teardown(async () => {
    peer.kill('SIGKILL')
    if (!closed) await server.close()
  })
  const exited = new Promise<string>(resolve => peer.once('exit', code => resolve(`the peer process exited (${code}) before its call arrived`)))
  const arrived = await Promise.race([callArrived.then(() => 'arrived'), exited])
  if (arrived !== 'arrived') { t.fail(arrived); return }
  peer.send('stop')
  const stopped = (): boolean => { const stat = readFileSync(`/proc/${peer.pid!}/stat`, 'utf8'); return stat.slice(stat.lastIndexOf(')') + 2).startsWith('T') }
  for (const deadline = Date.now() + 10_000; !stopped() && Date.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 20))
  t.ok(stopped(), 'the peer is stopped, its call open')
  // Its bound is 2 s; an unmount kills the daemon after 10. Raced, so that a close that never returns fails here instead of hanging the file.
  let timer: NodeJS.Timeout | undefined
  const outcome = await Promise.race([server.close().then(() => 'closed'), new Promise(resolve => { timer = setTimeout(() => resolve('still closing after 8 s'), 8000) })])
  clearTimeout(timer)
  closed = outcome === 'closed'
  t.equal(outcome, 'closed', 'the server closed with the frozen peer\'s call still open')
})
