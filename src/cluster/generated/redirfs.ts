import type * as grpc from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';

import type { DataHello as _redirfs_v1_DataHello, DataHello__Output as _redirfs_v1_DataHello__Output } from './redirfs/v1/DataHello';
import type { Death as _redirfs_v1_Death, Death__Output as _redirfs_v1_Death__Output } from './redirfs/v1/Death';
import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from './redirfs/v1/Generation';
import type { HandshakeReply as _redirfs_v1_HandshakeReply, HandshakeReply__Output as _redirfs_v1_HandshakeReply__Output } from './redirfs/v1/HandshakeReply';
import type { HandshakeRequest as _redirfs_v1_HandshakeRequest, HandshakeRequest__Output as _redirfs_v1_HandshakeRequest__Output } from './redirfs/v1/HandshakeRequest';
import type { Incarnation as _redirfs_v1_Incarnation, Incarnation__Output as _redirfs_v1_Incarnation__Output } from './redirfs/v1/Incarnation';
import type { PeerClient as _redirfs_v1_PeerClient, PeerDefinition as _redirfs_v1_PeerDefinition } from './redirfs/v1/Peer';
import type { ReadAnswer as _redirfs_v1_ReadAnswer, ReadAnswer__Output as _redirfs_v1_ReadAnswer__Output } from './redirfs/v1/ReadAnswer';
import type { ReadRequest as _redirfs_v1_ReadRequest, ReadRequest__Output as _redirfs_v1_ReadRequest__Output } from './redirfs/v1/ReadRequest';
import type { ReclaimAnswer as _redirfs_v1_ReclaimAnswer, ReclaimAnswer__Output as _redirfs_v1_ReclaimAnswer__Output } from './redirfs/v1/ReclaimAnswer';
import type { ReclaimRequest as _redirfs_v1_ReclaimRequest, ReclaimRequest__Output as _redirfs_v1_ReclaimRequest__Output } from './redirfs/v1/ReclaimRequest';
import type { RenewReply as _redirfs_v1_RenewReply, RenewReply__Output as _redirfs_v1_RenewReply__Output } from './redirfs/v1/RenewReply';
import type { RenewRequest as _redirfs_v1_RenewRequest, RenewRequest__Output as _redirfs_v1_RenewRequest__Output } from './redirfs/v1/RenewRequest';
import type { ServedNotice as _redirfs_v1_ServedNotice, ServedNotice__Output as _redirfs_v1_ServedNotice__Output } from './redirfs/v1/ServedNotice';
import type { StandbyVc as _redirfs_v1_StandbyVc, StandbyVc__Output as _redirfs_v1_StandbyVc__Output } from './redirfs/v1/StandbyVc';
import type { StatsReply as _redirfs_v1_StatsReply, StatsReply__Output as _redirfs_v1_StatsReply__Output } from './redirfs/v1/StatsReply';
import type { StatsRequest as _redirfs_v1_StatsRequest, StatsRequest__Output as _redirfs_v1_StatsRequest__Output } from './redirfs/v1/StatsRequest';
import type { Suspicion as _redirfs_v1_Suspicion, Suspicion__Output as _redirfs_v1_Suspicion__Output } from './redirfs/v1/Suspicion';
import type { SyncReply as _redirfs_v1_SyncReply, SyncReply__Output as _redirfs_v1_SyncReply__Output } from './redirfs/v1/SyncReply';
import type { SyncRequest as _redirfs_v1_SyncRequest, SyncRequest__Output as _redirfs_v1_SyncRequest__Output } from './redirfs/v1/SyncRequest';
import type { TakeoverStateReply as _redirfs_v1_TakeoverStateReply, TakeoverStateReply__Output as _redirfs_v1_TakeoverStateReply__Output } from './redirfs/v1/TakeoverStateReply';
import type { TakeoverStateRequest as _redirfs_v1_TakeoverStateRequest, TakeoverStateRequest__Output as _redirfs_v1_TakeoverStateRequest__Output } from './redirfs/v1/TakeoverStateRequest';
import type { VcState as _redirfs_v1_VcState, VcState__Output as _redirfs_v1_VcState__Output } from './redirfs/v1/VcState';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  redirfs: {
    v1: {
      DataHello: MessageTypeDefinition<_redirfs_v1_DataHello, _redirfs_v1_DataHello__Output>
      Death: MessageTypeDefinition<_redirfs_v1_Death, _redirfs_v1_Death__Output>
      Generation: MessageTypeDefinition<_redirfs_v1_Generation, _redirfs_v1_Generation__Output>
      HandshakeReply: MessageTypeDefinition<_redirfs_v1_HandshakeReply, _redirfs_v1_HandshakeReply__Output>
      HandshakeRequest: MessageTypeDefinition<_redirfs_v1_HandshakeRequest, _redirfs_v1_HandshakeRequest__Output>
      Incarnation: MessageTypeDefinition<_redirfs_v1_Incarnation, _redirfs_v1_Incarnation__Output>
      Peer: SubtypeConstructor<typeof grpc.Client, _redirfs_v1_PeerClient> & { service: _redirfs_v1_PeerDefinition }
      ReadAnswer: MessageTypeDefinition<_redirfs_v1_ReadAnswer, _redirfs_v1_ReadAnswer__Output>
      ReadRequest: MessageTypeDefinition<_redirfs_v1_ReadRequest, _redirfs_v1_ReadRequest__Output>
      ReclaimAnswer: MessageTypeDefinition<_redirfs_v1_ReclaimAnswer, _redirfs_v1_ReclaimAnswer__Output>
      ReclaimRequest: MessageTypeDefinition<_redirfs_v1_ReclaimRequest, _redirfs_v1_ReclaimRequest__Output>
      RenewReply: MessageTypeDefinition<_redirfs_v1_RenewReply, _redirfs_v1_RenewReply__Output>
      RenewRequest: MessageTypeDefinition<_redirfs_v1_RenewRequest, _redirfs_v1_RenewRequest__Output>
      ServedNotice: MessageTypeDefinition<_redirfs_v1_ServedNotice, _redirfs_v1_ServedNotice__Output>
      StandbyVc: MessageTypeDefinition<_redirfs_v1_StandbyVc, _redirfs_v1_StandbyVc__Output>
      StatsReply: MessageTypeDefinition<_redirfs_v1_StatsReply, _redirfs_v1_StatsReply__Output>
      StatsRequest: MessageTypeDefinition<_redirfs_v1_StatsRequest, _redirfs_v1_StatsRequest__Output>
      Suspicion: MessageTypeDefinition<_redirfs_v1_Suspicion, _redirfs_v1_Suspicion__Output>
      SyncReply: MessageTypeDefinition<_redirfs_v1_SyncReply, _redirfs_v1_SyncReply__Output>
      SyncRequest: MessageTypeDefinition<_redirfs_v1_SyncRequest, _redirfs_v1_SyncRequest__Output>
      TakeoverStateReply: MessageTypeDefinition<_redirfs_v1_TakeoverStateReply, _redirfs_v1_TakeoverStateReply__Output>
      TakeoverStateRequest: MessageTypeDefinition<_redirfs_v1_TakeoverStateRequest, _redirfs_v1_TakeoverStateRequest__Output>
      VcState: MessageTypeDefinition<_redirfs_v1_VcState, _redirfs_v1_VcState__Output>
    }
  }
}

