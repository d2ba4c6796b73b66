/**
 * The peer protocol (proto/redirfs.proto) as TypeScript sees it: the
 * message types generated from the .proto (src/cluster/generated, by
 * scripts/proto-types.sh with the options `loadSync` gets below), the
 * service grpc-js serves and calls, and the encoding of the data channel's
 * messages (data-channel.ts), which do not go through gRPC.
 */
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import * as protobuf from 'protobufjs'
import type { ProtoGrpcType } from './generated/redirfs'
import type { HandshakeReply__Output } from './generated/redirfs/v1/HandshakeReply'
import type { HandshakeRequest__Output } from './generated/redirfs/v1/HandshakeRequest'
import type { PeerClient as GeneratedPeerClient, PeerDefinition } from './generated/redirfs/v1/Peer'
import type { DataHello__Output } from './generated/redirfs/v1/DataHello'
import type { ReadAnswer__Output } from './generated/redirfs/v1/ReadAnswer'
import type { ReclaimAnswer__Output } from './generated/redirfs/v1/ReclaimAnswer'
import type { ReadRequest__Output } from './generated/redirfs/v1/ReadRequest'
import type { ReclaimRequest__Output } from './generated/redirfs/v1/ReclaimRequest'
import type { ServedNotice__Output } from './generated/redirfs/v1/ServedNotice'
import type { StandbyVc__Output } from './generated/redirfs/v1/StandbyVc'
import type { StatsReply__Output } from './generated/redirfs/v1/StatsReply'
import type { SyncReply__Output } from './generated/redirfs/v1/SyncReply'
import type { SyncRequest__Output } from './generated/redirfs/v1/SyncRequest'
import type { TakeoverStateReply__Output } from './generated/redirfs/v1/TakeoverStateReply'
import type { TakeoverStateRequest__Output } from './generated/redirfs/v1/TakeoverStateRequest'
import type { VcState__Output } from './generated/redirfs/v1/VcState'
import type { Generation__Output } from './generated/redirfs/v1/Generation'
import type { RenewRequest__Output } from './generated/redirfs/v1/RenewRequest'
import type { RenewReply__Output } from './generated/redirfs/v1/RenewReply'
import type { GenerationId } from './generations'

/** Bumped whenever a message or its meaning changes; checked at handshake. 2: ReadReply lost `unreadable`. 3: Read and Reclaim left gRPC for the data channel. 4: generations and incarnations. 5: leases, suspicions and deaths (Renew). 6: read answers acknowledged by batch number, reclaims name the file given back before. 7: handshake replies and renewals name the peers known alive. 8: takeover reports name the batch each held file came in. 9: takeover reports name the files served from mirrors, and standby copies the batch each file went into a mirror in. */
export const PROTOCOL_VERSION = 9

export const PROTO_FILE = path.resolve(__dirname, '../../proto/redirfs.proto')

// Messages as grpc-js hands them over (every field present, with the loader
// options below); what this node sends has the same shape.
export type HandshakeRequest = HandshakeRequest__Output
export type HandshakeReply = HandshakeReply__Output
export type ReadRequest = ReadRequest__Output
/** A file's bytes, as a data-channel answer brings them. */
export interface FileData {
  readonly file: number
  readonly data: Buffer
}
/** A Read's answer as both ends handle it; on the data channel it is a ReadAnswer followed by the files' bytes. */
export interface ReadReply {
  /** The file the open is bound to; null when the owner could not read the data the open would have been given. */
  readonly served: FileData | null
  /** The opportunistic batch; each file lands on its offset's slot. */
  readonly batch: FileData[]
  readonly batchNumber: number
  readonly vcEpoch: number
  /** The owner's generation when it answered (generations.ts). */
  readonly generation: GenerationId
}
export type DataHello = DataHello__Output
export type ReadAnswer = ReadAnswer__Output
export type ReclaimRequest = ReclaimRequest__Output
/** A Reclaim's answer as both ends handle it; on the data channel it is a ReclaimAnswer followed by the returned file's bytes. */
export interface ReclaimReply {
  /** What the holder still holds of the VC. */
  readonly held: number[]
  readonly lastBatch: number
  /** The file given back, if one was. */
  readonly returned: FileData | null
  /** Files given back before this answer, each with the batch it had come in: see redirect/mirror.ts, `givenBack`. */
  readonly givenBackBefore: ReadonlyArray<{ readonly file: number, readonly batch: number }>
}
export type ReclaimAnswer = ReclaimAnswer__Output
export type TakeoverStateRequest = TakeoverStateRequest__Output
export type VcState = VcState__Output
export type TakeoverStateReply = TakeoverStateReply__Output
export type StatsReply = StatsReply__Output
export type StandbyVc = StandbyVc__Output
export type ServedNotice = ServedNotice__Output
export type SyncRequest = SyncRequest__Output
export type SyncReply = SyncReply__Output
export type PeerStub = GeneratedPeerClient
export type Generation = Generation__Output
export type RenewRequest = RenewRequest__Output
export type RenewReply = RenewReply__Output

/** The options both the gRPC loader and the data channel's codecs read the .proto with (scripts/proto-types.sh too). */
const PROTO_OPTIONS = { keepCase: false, longs: Number, enums: String, defaults: true, oneofs: true }

let loaded: ProtoGrpcType | undefined

function peerPackage (): ProtoGrpcType['redirfs']['v1'] {
  if (loaded === undefined) {
    // The generator (scripts/proto-types.sh) is given the same options.
    const definition = protoLoader.loadSync(PROTO_FILE, PROTO_OPTIONS)
    loaded = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType
  }
  return loaded.redirfs.v1
}

export function peerService (): PeerDefinition { return peerPackage().Peer.service }

/** A client stub of the peer service at `address`. */
export function peerStub (address: string, credentials: grpc.ChannelCredentials): PeerStub {
  return new (peerPackage().Peer)(address, credentials, CHANNEL_OPTIONS)
}

/**
 * Channel options: chunk-sized messages, keepalive so a dead peer is
 * noticed, and reconnection tried at least every second: grpc-js's default
 * backoff grows to two minutes, and a peer back from a long absence was
 * then out of reach for longer than a call waits for it (a call waiting for
 * a connection is no sign of a death, docs/design.md, "Deaths and fencing").
 */
export const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  'grpc.max_receive_message_length': 1024 * 2 ** 20,
  'grpc.max_send_message_length': 1024 * 2 ** 20,
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 1000
}

/**
 * The largest request a node's peer service takes, for a layout of
 * `samples` files. A stranger's request is refused from its headers, unread
 * (peer-server.ts); the cap bounds what a member, buggy or hostile, can make
 * a node hold per call: as small as the largest honest request allows. Those are a sync's lists (each file
 * in at most one standby copy, with the node it served, and in at most one
 * served notice: sync.ts sends as many as there are files at most; with
 * one VC per file, every id and batch at its widest, about 61 bytes a file) and a
 * takeover's, smaller; so 64 bytes a sample, above a floor for the rest.
 */
export function requestLimit (samples: number): number {
  return Math.min(CHANNEL_OPTIONS['grpc.max_receive_message_length'] as number, 4 * 2 ** 20 + 64 * samples)
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

/** Encodes and decodes one message of the .proto, for the data channel. */
export interface MessageCodec<T> {
  encode (message: T): Uint8Array
  decode (bytes: Uint8Array): T
}

let root: protobuf.Root | undefined

function codec<T> (name: string): MessageCodec<T> {
  root ??= protobuf.loadSync(PROTO_FILE)
  const type = root.lookupType(`redirfs.v1.${name}`)
  return {
    encode: message => type.encode(type.fromObject(message as Record<string, unknown>)).finish(),
    decode: bytes => type.toObject(type.decode(bytes), PROTO_OPTIONS) as T
  }
}

/** The data channel's messages (proto/redirfs.proto, "The data channel"). */
export function dataMessages (): {
  hello: MessageCodec<DataHello>
  read: MessageCodec<ReadRequest>
  readAnswer: MessageCodec<ReadAnswer>
  reclaim: MessageCodec<ReclaimRequest>
  reclaimAnswer: MessageCodec<ReclaimAnswer>
} {
  return { hello: codec('DataHello'), read: codec('ReadRequest'), readAnswer: codec('ReadAnswer'), reclaim: codec('ReclaimRequest'), reclaimAnswer: codec('ReclaimAnswer') }
}
