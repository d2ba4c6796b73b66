/**
 * The peer protocol's messages (proto/redirfs.proto) as TypeScript sees
 * them, and the service definition grpc-js serves and calls.
 */
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'

/** Bumped whenever a message or its meaning changes; checked at handshake. */
export const PROTOCOL_VERSION = 1

export const PROTO_FILE = path.resolve(__dirname, '../../proto/redirfs.proto')

export interface HandshakeRequest { protocolVersion: number, node: number, nodes: number, layoutHash: string }
export interface HandshakeReply { protocolVersion: number, node: number, layoutHash: string }
export interface ReadRequest { node: number, file: number, emptyOffsets: Buffer, freeBytes: number, lastBatch: number }
export interface FileData { file: number, data: Buffer }
export interface ReadReply { served?: FileData | null, batch: FileData[], batchNumber: number, vcEpoch: number, unreadable: boolean }
export interface ReclaimRequest { node: number, vc: number, giveBack: boolean, offsets: number[] }
export interface ReclaimReply { held: number[], lastBatch: number, returned?: FileData | null }
export interface TakeoverStateRequest { node: number, dead: number, vcs: number[] }
export interface VcState { vc: number, epoch: number, received: number[], held: number[], lastBatch: number }
export interface TakeoverStateReply { vcs: VcState[] }
export interface StatsReply { json: string }
export interface StandbyVc { vc: number, epoch: number, servedFiles: number[], servedNodes: number[] }
export interface ServedNotice { vc: number, file: number, batch: number }
export interface SyncRequest { node: number, standby: StandbyVc[], served: ServedNotice[] }

let service: grpc.ServiceDefinition | undefined

export function peerService (): grpc.ServiceDefinition {
  if (service === undefined) {
    const definition = protoLoader.loadSync(PROTO_FILE, { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true })
    const loaded = grpc.loadPackageDefinition(definition) as unknown as { redirfs: { v1: { Peer: grpc.ServiceClientConstructor } } }
    service = loaded.redirfs.v1.Peer.service
  }
  return service
}

/** Channel options: chunk-sized messages, and keepalive so a dead peer is noticed. */
export const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': 1024 * 2 ** 20,
  'grpc.max_send_message_length': 1024 * 2 ** 20,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000
}

export function encodeOffsets (offsets: Iterable<number>, capacity: number): Buffer {
  const bits = Buffer.alloc(Math.ceil(capacity / 8))
  for (const offset of offsets) bits[offset >> 3] |= 1 << (offset & 7)
  return bits
}

export function decodeOffsets (bits: Buffer): Set<number> {
  const offsets = new Set<number>()
  for (let i = 0; i < bits.length * 8; i++) if ((bits[i >> 3] & (1 << (i & 7))) !== 0) offsets.add(i)
  return offsets
}
