// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Death as _redirfs_v1_Death, Death__Output as _redirfs_v1_Death__Output } from '../../redirfs/v1/Death';
import type { Suspicion as _redirfs_v1_Suspicion, Suspicion__Output as _redirfs_v1_Suspicion__Output } from '../../redirfs/v1/Suspicion';
import type { Incarnation as _redirfs_v1_Incarnation, Incarnation__Output as _redirfs_v1_Incarnation__Output } from '../../redirfs/v1/Incarnation';
import type { Long } from '@grpc/proto-loader';

export interface RenewReply {
  /**
   * How long from the request's arrival this node promises not to take the
   * caller for dead; 0 when it refuses, and `refusal` says why.
   */
  'grantedMs'?: (number);
  'refusal'?: (string);
  /**
   * The caller is dead to this node, or suspected by it: it must stop.
   */
  'takenForDead'?: (boolean);
  'incarnation'?: (number | string | Long);
  'generation'?: (_redirfs_v1_Generation | null);
  'dead'?: (_redirfs_v1_Death)[];
  'suspicions'?: (_redirfs_v1_Suspicion)[];
  'reading'?: (string)[];
  'alive'?: (_redirfs_v1_Incarnation)[];
}

export interface RenewReply__Output {
  /**
   * How long from the request's arrival this node promises not to take the
   * caller for dead; 0 when it refuses, and `refusal` says why.
   */
  'grantedMs': (number);
  'refusal': (string);
  /**
   * The caller is dead to this node, or suspected by it: it must stop.
   */
  'takenForDead': (boolean);
  'incarnation': (number);
  'generation': (_redirfs_v1_Generation__Output | null);
  'dead': (_redirfs_v1_Death__Output)[];
  'suspicions': (_redirfs_v1_Suspicion__Output)[];
  'reading': (string)[];
  'alive': (_redirfs_v1_Incarnation__Output)[];
}
