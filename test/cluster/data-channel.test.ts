// The data channel (src/cluster/data-channel.ts) on real sockets on
// 127.0.0.1: what a read's and a reclaim's answers bring back, how refusals and failures
// reach the requester, the token, TLS, and the buffers going back to the
// owner once its answer is written. The handler is a small stand-in here;
// test/cluster/cluster.test.ts runs the real nodes over it.
import { mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import pino from 'pino'
import t, { type Test } from 'tap'
import { SampleBuffers } from '../../src/chunks/sample-buffers'
import { PeerCallError } from '../../src/cluster/call-error'
import { DataClient, startDataServer, type DataHandler, type StatusOf } from '../../src/cluster/data-channel'
import { FIRST_GENERATION } from '../../src/cluster/generations'
import { PeerRefusal } from '../../src/cluster/call-error'
import { loadCredentials, type Credentials } from '../../src/cluster/security'
import type { ReadReply, ReadRequest, ReclaimReply } from '../../src/cluster/wire'
import { makeCertificates } from '../helpers/certificates'

const TOKEN = 'the-cluster-token-0123456789'
const log = pino({ level: 'silent' })
const work = mkdtempSync(path.join(os.tmpdir(), 'redirfs-data-'))
t.teardown(() => rmSync(work, { recursive: true, force: true }))

const statusOf: StatusOf = err => ({ code: err instanceof PeerRefusal ? err.status : grpc.status.INTERNAL, details: (err as Error).message })
const request = (file: number): ReadRequest => ({ node: 0, file, emptyOffsets: Buffer.alloc(1), freeBytes: 1e9, lastBatch: 0, givenBackFiles: [], givenBackBatches: [], generation: null })

const noReclaim = (): ReclaimReply => { throw new Error('no reclaim in this test') }

/** File n's bytes: n repeated, `size` of them. */
const bytesOf = (file: number, size: number): Buffer => Buffer.alloc(size, file % 251)

async function serve (t: Test, handler: DataHandler, credentials?: Credentials, refused: string[] = []): Promise<{ client: (token?: string, as?: Credentials) => DataClient, close: () => void, port: number }> {
  const own = credentials ?? await loadCredentials({})
  const server = await startDataServer('127.0.0.1', 0, own, TOKEN, handler, statusOf, peer => refused.push(peer), log)
  t.teardown(() => server.close())
  return {
    client: (token = TOKEN, as = own) => {
      const client = new DataClient('127.0.0.1', as, token, 'the owner', new SampleBuffers())
      client.setPort(server.port)
      t.teardown(() => client.close())
      return client
    },
    close: () => server.close(),
    port: server.port
  }
}

/** The handler's `shipped`: what it was told went out, each answer's sizes, and a wait for the nth (a write's callback comes after its answer arrives). */
function shipments (): { shipped: (bytes: Buffer[]) => void, sizes: number[][], reached: (count: number) => Promise<void> } {
  const sizes: number[][] = []
  const waiting: { count: number, resolve: () => void }[] = []
  return {
    sizes,
    shipped: bytes => {
      sizes.push(bytes.map(b => b.length))
      for (const w of waiting) if (sizes.length >= w.count) w.resolve()
    },
    reached: async count => { if (sizes.length < count) await new Promise<void>(resolve => waiting.push({ count, resolve })) }
  }
}

const failure = async (promise: Promise<unknown>): Promise<PeerCallError> => await promise.then(() => { throw new Error('the read succeeded') }, (err: unknown) => err as PeerCallError)

t.test('an answer brings the served file first, then the batch, each with its own bytes, whatever their sizes', async t => {
  // Sizes around the requester's 256 KiB read buffer, and an empty file, so files straddle reads.
  const sizes = [113_000, 0, 300_000, 1, 262_144, 700_000]
  const { client } = await serve(t, {
    reclaim: noReclaim,
    read: async r => ({ served: { file: r.file, data: bytesOf(r.file, 5000) }, batch: sizes.map((size, i) => ({ file: 100 + i, data: bytesOf(100 + i, size) })), batchNumber: 7, vcEpoch: 2, generation: FIRST_GENERATION })
  })
  const reply = await client().read(request(3), 5000).answer
  t.same({ file: reply.served?.file, ok: reply.served?.data.equals(bytesOf(3, 5000)) }, { file: 3, ok: true })
  t.same(reply.batch.map(f => f.file), [100, 101, 102, 103, 104, 105])
  t.same(reply.batch.map((f, i) => f.data.equals(bytesOf(100 + i, sizes[i]))), sizes.map(() => true), 'every file\'s bytes intact')
  t.same([reply.batchNumber, reply.vcEpoch], [7, 2])
})

t.test('a reclaim brings back what the holder holds, and the file it gives back with its bytes, or none', async t => {
  const shipped = shipments()
  const { client } = await serve(t, {
    read: async () => { throw new Error('no read in this test') },
    reclaim: r => ({ held: [4, 5, 6], lastBatch: 9, returned: r.giveBack ? { file: 5, data: bytesOf(5, 120_000) } : null, givenBackBefore: [] }),
    shipped: shipped.shipped
  })
  const one = client()
  const given = await one.reclaim({ node: 0, vc: 1, giveBack: true, offsets: [], generation: null }, 5000).answer
  t.same({ held: given.held, lastBatch: given.lastBatch, file: given.returned?.file }, { held: [4, 5, 6], lastBatch: 9, file: 5 })
  t.ok(given.returned?.data.equals(bytesOf(5, 120_000)), 'the returned file\'s bytes intact')
  t.same(await one.reclaim({ node: 0, vc: 1, giveBack: false, offsets: [], generation: null }, 5000).answer, { held: [4, 5, 6], lastBatch: 9, returned: null, givenBackBefore: [] })
  await shipped.reached(1)
  t.same(shipped.sizes, [[120_000]], 'the returned file\'s buffer went back to the holder once written; an answer with no file ships nothing')
})

t.test('an owner that could not read the file answers without it', async t => {
  const generation = { number: 3, key: 'REDIRFS_RUN_ID a' }
  const { client } = await serve(t, { reclaim: noReclaim, read: async () => ({ served: null, batch: [], batchNumber: 0, vcEpoch: 4, generation }) })
  t.same(await client().read(request(1), 5000).answer, { served: null, batch: [], batchNumber: 0, vcEpoch: 4, generation }, 'with the owner\'s generation')
})

t.test('many reads at once on one connection each get their own answer, in whatever order they are ready', async t => {
  const { client } = await serve(t, {
    reclaim: noReclaim,
    // Later files answer sooner, so answers come back out of order.
    read: async r => await new Promise<ReadReply>(resolve => setTimeout(() => resolve({ served: { file: r.file, data: bytesOf(r.file, 50_000 + r.file) }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }), 40 - r.file))
  })
  const one = client()
  const replies = await Promise.all(Array.from({ length: 40 }, async (_, file) => await one.read(request(file), 5000).answer))
  t.same(replies.map(r => r.served?.file), Array.from({ length: 40 }, (_, file) => file))
  t.ok(replies.every(r => r.served?.data.equals(bytesOf(r.served.file, 50_000 + r.served.file))), 'no answer has another\'s bytes')
})

t.test('a refusal reaches the requester with its status, a handler bug as INTERNAL, and the connection still serves', async t => {
  const { client } = await serve(t, {
    reclaim: noReclaim,
    read: async r => {
      if (r.file === 1) throw new PeerRefusal(grpc.status.FAILED_PRECONDITION, 'does not answer for that chunk')
      if (r.file === 2) throw new Error('boom')
      return { served: { file: r.file, data: Buffer.from('ok') }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }
    }
  })
  const one = client()
  const refused = await failure(one.read(request(1), 5000).answer)
  t.same([refused.status, refused.details, refused.unreachable], [grpc.status.FAILED_PRECONDITION, 'does not answer for that chunk', false])
  t.equal((await failure(one.read(request(2), 5000).answer)).status, grpc.status.INTERNAL)
  t.equal((await one.read(request(3), 5000).answer).served?.data.toString(), 'ok')
})

t.test('a wrong token is refused, noted, and no read goes through', async t => {
  const refused: string[] = []
  let reads = 0
  const { client } = await serve(t, { reclaim: noReclaim, read: async r => { reads++; return { served: { file: r.file, data: Buffer.from('x') }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION } } }, undefined, refused)
  const err = await failure(client('not-the-cluster-token').read(request(1), 5000).answer)
  t.same([err.status, err.details], [grpc.status.UNAUTHENTICATED, 'wrong or missing cluster token'])
  t.equal(refused.length, 1, 'the owner noted the refusal once')
  t.equal(reads, 0)
})

/** A raw connection to a data server's port, as anyone who can reach it has; resolves with it once connected. */
async function rawConnection (t: Test, port: number): Promise<{ socket: net.Socket, closed: Promise<void> }> {
  const socket = net.connect(port, '127.0.0.1')
  t.teardown(() => { socket.destroy() })
  socket.on('error', () => {})
  const closed = new Promise<void>(resolve => socket.on('close', () => resolve()))
  await new Promise<void>(resolve => socket.on('connect', () => resolve()))
  return { socket, closed }
}

t.test('before its hello a connection is closed if it announces more than a hello, and at most 64 such connections are held', async t => {
  const refused: string[] = []
  const { client, port } = await serve(t, { reclaim: noReclaim, read: async r => ({ served: { file: r.file, data: Buffer.from('x') }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }) }, undefined, refused)
  const big = await rawConnection(t, port)
  const head = Buffer.alloc(9)
  head.writeUInt32BE(16 * 2 ** 20 - 1, 0)
  head.writeUInt8(1, 4)
  big.socket.write(head)
  await big.closed
  t.pass('a 16 MiB hello is closed at its head')
  const idle = await Promise.all(Array.from({ length: 64 }, async () => await rawConnection(t, port)))
  const oneMore = await rawConnection(t, port)
  await oneMore.closed
  t.pass('the 65th connection that has not said hello is closed at once')
  for (const connection of idle) connection.socket.destroy()
  await Promise.all(idle.map(async connection => await connection.closed))
  const answer = await client().read(request(7), 60_000).answer
  t.equal(answer.served?.file, 7, 'a peer with the token reads once they are gone')
  t.same(refused, [], 'none of them was a wrong token')
})

t.test('an owner that goes away mid-read fails the read as unreachable; a deadline too', async t => {
  const { client, close } = await serve(t, { reclaim: noReclaim, read: async () => await new Promise<ReadReply>(() => {}) })
  const one = client()
  const pending = one.read(request(1), 60_000).answer
  const late = one.read(request(2), 200).answer
  const timedOut = await failure(late)
  t.same([timedOut.status, timedOut.unreachable], [grpc.status.DEADLINE_EXCEEDED, true])
  close()
  t.ok((await failure(pending)).unreachable, 'the connection\'s end fails the read as unreachable')
  t.ok((await failure(one.read(request(3), 5000).answer)).unreachable, 'a new connection to a closed port too')
})

t.test('an answer\'s buffers go back to the owner once written, and a cancelled read\'s bytes are dropped', async t => {
  const shipped = shipments()
  const { client } = await serve(t, {
    reclaim: noReclaim,
    read: async r => await new Promise<ReadReply>(resolve => setTimeout(() => resolve({ served: { file: r.file, data: bytesOf(1, 10) }, batch: [{ file: 9, data: bytesOf(9, 20) }], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }), r.file === 2 ? 100 : r.file === 3 ? 200 : 0)),
    shipped: shipped.shipped
  })
  const one = client()
  await one.read(request(1), 5000).answer
  const cancelled = one.read(request(2), 5000)
  cancelled.cancel(new PeerCallError('the owner', grpc.status.CANCELLED, 'the opener gave up'))
  t.equal((await failure(cancelled.answer)).details, 'the opener gave up')
  t.equal((await one.read(request(3), 5000).answer).served?.file, 3, 'the connection goes on after the dropped answer')
  await shipped.reached(3)
  t.same(shipped.sizes, [[10, 20], [10, 20], [10, 20]], 'every answer\'s buffers, the cancelled one\'s too')
})

t.test('over mutual TLS: a peer with the cluster CA reads; one that trusts another CA does not', async t => {
  const files = await makeCertificates(work)
  const credentials = await loadCredentials(files)
  const { client } = await serve(t, { reclaim: noReclaim, read: async r => ({ served: { file: r.file, data: bytesOf(r.file, 400_000) }, batch: [], batchNumber: 0, vcEpoch: 0, generation: FIRST_GENERATION }) }, credentials)
  t.ok((await client().read(request(5), 5000).answer).served?.data.equals(bytesOf(5, 400_000)), 'bytes intact over TLS')
  const stranger = await failure(client(TOKEN, await loadCredentials({ ...files, ca: files.otherCa })).read(request(5), 5000).answer)
  t.ok(stranger.unreachable, `refused at the TLS handshake (${stranger.details})`)
})
