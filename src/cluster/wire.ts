/**
 * The peer protocol (proto/redirfs.proto) as TypeScript sees it: the
 * message types generated from the .proto (src/cluster/generated, by
 * scripts/proto-types.sh with the options `loadSync` gets below), and the
 * service grpc-js serves and calls.
 */
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import type { ProtoGrpcType } from './generated/redirfs'
import type { FileData__Output } from './generated/redirfs/v1/FileData'
import type { HandshakeReply__Output } from './generated/redirfs/v1/HandshakeReply'
import type { HandshakeRequest__Output } from './generated/redirfs/v1/HandshakeRequest'
import type { PeerClient as GeneratedPeerClient, PeerDefinition } from './generated/redirfs/v1/Peer'
import type { ReadReply__Output } from './generated/redirfs/v1/ReadReply'
import type { ReadRequest__Output } from './generated/redirfs/v1/ReadRequest'
import type { ReclaimReply__Output } from './generated/redirfs/v1/ReclaimReply'
import type { ReclaimRequest__Output } from './generated/redirfs/v1/ReclaimRequest'
import type { ServedNotice__Output } from './generated/redirfs/v1/ServedNotice'
import type { StandbyVc__Output } from './generated/redirfs/v1/StandbyVc'
import type { StatsReply__Output } from './generated/redirfs/v1/StatsReply'
import type { SyncReply__Output } from './generated/redirfs/v1/SyncReply'
import type { SyncRequest__Output } from './generated/redirfs/v1/SyncRequest'
import type { TakeoverStateReply__Output } from './generated/redirfs/v1/TakeoverStateReply'
import type { TakeoverStateRequest__Output } from './generated/redirfs/v1/TakeoverStateRequest'
import type { VcState__Output } from './generated/redirfs/v1/VcState'

/** Bumped whenever a message or its meaning changes; checked at handshake. 2: ReadReply lost `unreadable`. */
export const PROTOCOL_VERSION = 2

export const PROTO_FILE = path.resolve(__dirname, '../../proto/redirfs.proto')

// Messages as grpc-js hands them over (every field present, with the loader
// options below); what this node sends has the same shape.
export type HandshakeRequest = HandshakeRequest__Output
export type HandshakeReply = HandshakeReply__Output
export type ReadRequest = ReadRequest__Output
export type FileData = FileData__Output
export type ReadReply = ReadReply__Output
export type ReclaimRequest = ReclaimRequest__Output
export type ReclaimReply = ReclaimReply__Output
export type TakeoverStateRequest = TakeoverStateRequest__Output
export type VcState = VcState__Output
export type TakeoverStateReply = TakeoverStateReply__Output
export type StatsReply = StatsReply__Output
export type StandbyVc = StandbyVc__Output
export type ServedNotice = ServedNotice__Output
export type SyncRequest = SyncRequest__Output
export type SyncReply = SyncReply__Output
export type PeerStub = GeneratedPeerClient

let loaded: ProtoGrpcType | undefined

function peerPackage (): ProtoGrpcType['redirfs']['v1'] {
  if (loaded === undefined) {
    // The generator (scripts/proto-types.sh) is given the same options.
    const definition = protoLoader.loadSync(PROTO_FILE, { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true })
    loaded = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType
  }
  return loaded.redirfs.v1
}

export function peerService (): PeerDefinition { return peerPackage().Peer.service }

/** A client stub of the peer service at `address`. */
export function peerStub (address: string, credentials: grpc.ChannelCredentials): PeerStub {
  return new (peerPackage().Peer)(address, credentials, CHANNEL_OPTIONS)
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
