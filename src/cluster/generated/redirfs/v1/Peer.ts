// Original file: proto/redirfs.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { HandshakeReply as _redirfs_v1_HandshakeReply, HandshakeReply__Output as _redirfs_v1_HandshakeReply__Output } from '../../redirfs/v1/HandshakeReply';
import type { HandshakeRequest as _redirfs_v1_HandshakeRequest, HandshakeRequest__Output as _redirfs_v1_HandshakeRequest__Output } from '../../redirfs/v1/HandshakeRequest';
import type { RenewReply as _redirfs_v1_RenewReply, RenewReply__Output as _redirfs_v1_RenewReply__Output } from '../../redirfs/v1/RenewReply';
import type { RenewRequest as _redirfs_v1_RenewRequest, RenewRequest__Output as _redirfs_v1_RenewRequest__Output } from '../../redirfs/v1/RenewRequest';
import type { StatsReply as _redirfs_v1_StatsReply, StatsReply__Output as _redirfs_v1_StatsReply__Output } from '../../redirfs/v1/StatsReply';
import type { StatsRequest as _redirfs_v1_StatsRequest, StatsRequest__Output as _redirfs_v1_StatsRequest__Output } from '../../redirfs/v1/StatsRequest';
import type { SyncReply as _redirfs_v1_SyncReply, SyncReply__Output as _redirfs_v1_SyncReply__Output } from '../../redirfs/v1/SyncReply';
import type { SyncRequest as _redirfs_v1_SyncRequest, SyncRequest__Output as _redirfs_v1_SyncRequest__Output } from '../../redirfs/v1/SyncRequest';
import type { TakeoverStateReply as _redirfs_v1_TakeoverStateReply, TakeoverStateReply__Output as _redirfs_v1_TakeoverStateReply__Output } from '../../redirfs/v1/TakeoverStateReply';
import type { TakeoverStateRequest as _redirfs_v1_TakeoverStateRequest, TakeoverStateRequest__Output as _redirfs_v1_TakeoverStateRequest__Output } from '../../redirfs/v1/TakeoverStateRequest';

export interface PeerClient extends grpc.Client {
  /**
   * Checks that both ends run the same protocol version over the same layout.
   * A mismatch fails with FAILED_PRECONDITION and says what differs.
   */
  Handshake(argument: _redirfs_v1_HandshakeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  Handshake(argument: _redirfs_v1_HandshakeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  Handshake(argument: _redirfs_v1_HandshakeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  Handshake(argument: _redirfs_v1_HandshakeRequest, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  /**
   * Checks that both ends run the same protocol version over the same layout.
   * A mismatch fails with FAILED_PRECONDITION and says what differs.
   */
  handshake(argument: _redirfs_v1_HandshakeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  handshake(argument: _redirfs_v1_HandshakeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  handshake(argument: _redirfs_v1_HandshakeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  handshake(argument: _redirfs_v1_HandshakeRequest, callback: grpc.requestCallback<_redirfs_v1_HandshakeReply__Output>): grpc.ClientUnaryCall;
  
  /**
   * A new training run began somewhere in the cluster: every node starts
   * the generation it names (docs/design.md, "Runs"), unless it has a later one.
   */
  NewGeneration(argument: _redirfs_v1_Generation, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  NewGeneration(argument: _redirfs_v1_Generation, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  NewGeneration(argument: _redirfs_v1_Generation, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  NewGeneration(argument: _redirfs_v1_Generation, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  /**
   * A new training run began somewhere in the cluster: every node starts
   * the generation it names (docs/design.md, "Runs"), unless it has a later one.
   */
  newGeneration(argument: _redirfs_v1_Generation, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  newGeneration(argument: _redirfs_v1_Generation, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  newGeneration(argument: _redirfs_v1_Generation, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  newGeneration(argument: _redirfs_v1_Generation, callback: grpc.requestCallback<_redirfs_v1_Generation__Output>): grpc.ClientUnaryCall;
  
  /**
   * A few times a peer timeout, each node asks each peer to renew its lease:
   * the peer's promise not to take it for dead for a while. A node serves
   * only while a majority of the cluster promised so; both ways the call
   * carries what each knows of deaths and suspicions (docs/design.md,
   * "Deaths and fencing").
   */
  Renew(argument: _redirfs_v1_RenewRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  Renew(argument: _redirfs_v1_RenewRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  Renew(argument: _redirfs_v1_RenewRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  Renew(argument: _redirfs_v1_RenewRequest, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  /**
   * A few times a peer timeout, each node asks each peer to renew its lease:
   * the peer's promise not to take it for dead for a while. A node serves
   * only while a majority of the cluster promised so; both ways the call
   * carries what each knows of deaths and suspicions (docs/design.md,
   * "Deaths and fencing").
   */
  renew(argument: _redirfs_v1_RenewRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  renew(argument: _redirfs_v1_RenewRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  renew(argument: _redirfs_v1_RenewRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  renew(argument: _redirfs_v1_RenewRequest, callback: grpc.requestCallback<_redirfs_v1_RenewReply__Output>): grpc.ClientUnaryCall;
  
  /**
   * The node's counters, as the JSON `<mnt>/.redirfs/stats` shows.
   */
  Stats(argument: _redirfs_v1_StatsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  Stats(argument: _redirfs_v1_StatsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  Stats(argument: _redirfs_v1_StatsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  Stats(argument: _redirfs_v1_StatsRequest, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  /**
   * The node's counters, as the JSON `<mnt>/.redirfs/stats` shows.
   */
  stats(argument: _redirfs_v1_StatsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  stats(argument: _redirfs_v1_StatsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  stats(argument: _redirfs_v1_StatsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  stats(argument: _redirfs_v1_StatsRequest, callback: grpc.requestCallback<_redirfs_v1_StatsReply__Output>): grpc.ClientUnaryCall;
  
  /**
   * A few times a second, each node sends each peer: the standby copy of the
   * VCs it owns whose next owner that peer is (every file it answered an open
   * with in their current epoch, and whose open, which no one could report
   * if it and the opener died), and the files it served from its mirrors of
   * that peer's VCs (so the owner's ledger of shipped files stays true).
   */
  Sync(argument: _redirfs_v1_SyncRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  Sync(argument: _redirfs_v1_SyncRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  Sync(argument: _redirfs_v1_SyncRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  Sync(argument: _redirfs_v1_SyncRequest, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  /**
   * A few times a second, each node sends each peer: the standby copy of the
   * VCs it owns whose next owner that peer is (every file it answered an open
   * with in their current epoch, and whose open, which no one could report
   * if it and the opener died), and the files it served from its mirrors of
   * that peer's VCs (so the owner's ledger of shipped files stays true).
   */
  sync(argument: _redirfs_v1_SyncRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  sync(argument: _redirfs_v1_SyncRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  sync(argument: _redirfs_v1_SyncRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  sync(argument: _redirfs_v1_SyncRequest, callback: grpc.requestCallback<_redirfs_v1_SyncReply__Output>): grpc.ClientUnaryCall;
  
  /**
   * For a takeover of a dead node's VCs (shared storage): what this node
   * received of them in their current epoch, and what it still holds.
   */
  TakeoverState(argument: _redirfs_v1_TakeoverStateRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  TakeoverState(argument: _redirfs_v1_TakeoverStateRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  TakeoverState(argument: _redirfs_v1_TakeoverStateRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  TakeoverState(argument: _redirfs_v1_TakeoverStateRequest, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  /**
   * For a takeover of a dead node's VCs (shared storage): what this node
   * received of them in their current epoch, and what it still holds.
   */
  takeoverState(argument: _redirfs_v1_TakeoverStateRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  takeoverState(argument: _redirfs_v1_TakeoverStateRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  takeoverState(argument: _redirfs_v1_TakeoverStateRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  takeoverState(argument: _redirfs_v1_TakeoverStateRequest, callback: grpc.requestCallback<_redirfs_v1_TakeoverStateReply__Output>): grpc.ClientUnaryCall;
  
}

export interface PeerHandlers extends grpc.UntypedServiceImplementation {
  /**
   * Checks that both ends run the same protocol version over the same layout.
   * A mismatch fails with FAILED_PRECONDITION and says what differs.
   */
  Handshake: grpc.handleUnaryCall<_redirfs_v1_HandshakeRequest__Output, _redirfs_v1_HandshakeReply>;
  
  /**
   * A new training run began somewhere in the cluster: every node starts
   * the generation it names (docs/design.md, "Runs"), unless it has a later one.
   */
  NewGeneration: grpc.handleUnaryCall<_redirfs_v1_Generation__Output, _redirfs_v1_Generation>;
  
  /**
   * A few times a peer timeout, each node asks each peer to renew its lease:
   * the peer's promise not to take it for dead for a while. A node serves
   * only while a majority of the cluster promised so; both ways the call
   * carries what each knows of deaths and suspicions (docs/design.md,
   * "Deaths and fencing").
   */
  Renew: grpc.handleUnaryCall<_redirfs_v1_RenewRequest__Output, _redirfs_v1_RenewReply>;
  
  /**
   * The node's counters, as the JSON `<mnt>/.redirfs/stats` shows.
   */
  Stats: grpc.handleUnaryCall<_redirfs_v1_StatsRequest__Output, _redirfs_v1_StatsReply>;
  
  /**
   * A few times a second, each node sends each peer: the standby copy of the
   * VCs it owns whose next owner that peer is (every file it answered an open
   * with in their current epoch, and whose open, which no one could report
   * if it and the opener died), and the files it served from its mirrors of
   * that peer's VCs (so the owner's ledger of shipped files stays true).
   */
  Sync: grpc.handleUnaryCall<_redirfs_v1_SyncRequest__Output, _redirfs_v1_SyncReply>;
  
  /**
   * For a takeover of a dead node's VCs (shared storage): what this node
   * received of them in their current epoch, and what it still holds.
   */
  TakeoverState: grpc.handleUnaryCall<_redirfs_v1_TakeoverStateRequest__Output, _redirfs_v1_TakeoverStateReply>;
  
}

export interface PeerDefinition extends grpc.ServiceDefinition {
  Handshake: MethodDefinition<_redirfs_v1_HandshakeRequest, _redirfs_v1_HandshakeReply, _redirfs_v1_HandshakeRequest__Output, _redirfs_v1_HandshakeReply__Output>
  NewGeneration: MethodDefinition<_redirfs_v1_Generation, _redirfs_v1_Generation, _redirfs_v1_Generation__Output, _redirfs_v1_Generation__Output>
  Renew: MethodDefinition<_redirfs_v1_RenewRequest, _redirfs_v1_RenewReply, _redirfs_v1_RenewRequest__Output, _redirfs_v1_RenewReply__Output>
  Stats: MethodDefinition<_redirfs_v1_StatsRequest, _redirfs_v1_StatsReply, _redirfs_v1_StatsRequest__Output, _redirfs_v1_StatsReply__Output>
  Sync: MethodDefinition<_redirfs_v1_SyncRequest, _redirfs_v1_SyncReply, _redirfs_v1_SyncRequest__Output, _redirfs_v1_SyncReply__Output>
  TakeoverState: MethodDefinition<_redirfs_v1_TakeoverStateRequest, _redirfs_v1_TakeoverStateReply, _redirfs_v1_TakeoverStateRequest__Output, _redirfs_v1_TakeoverStateReply__Output>
}
