// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Death as _redirfs_v1_Death, Death__Output as _redirfs_v1_Death__Output } from '../../redirfs/v1/Death';
import type { Suspicion as _redirfs_v1_Suspicion, Suspicion__Output as _redirfs_v1_Suspicion__Output } from '../../redirfs/v1/Suspicion';
import type { Incarnation as _redirfs_v1_Incarnation, Incarnation__Output as _redirfs_v1_Incarnation__Output } from '../../redirfs/v1/Incarnation';
import type { Long } from '@grpc/proto-loader';

export interface RenewRequest {
  'node'?: (number);
  'incarnation'?: (number | string | Long);
  'generation'?: (_redirfs_v1_Generation | null);
  'dead'?: (_redirfs_v1_Death)[];
  'suspicions'?: (_redirfs_v1_Suspicion)[];
  /**
   * The runs named by a launcher that this node's trainers read now, to
   * tell two jobs reading at once across the cluster.
   */
  'reading'?: (string)[];
  /**
   * It answers for no virtual chunk in this generation (it was fenced, and
   * not every peer has had its handshake yet).
   */
  'rejoining'?: (boolean);
  /**
   * As in a handshake reply: the nodes it knows alive, with the deaths it tells.
   */
  'alive'?: (_redirfs_v1_Incarnation)[];
}

export interface RenewRequest__Output {
  'node': (number);
  'incarnation': (number);
  'generation': (_redirfs_v1_Generation__Output | null);
  'dead': (_redirfs_v1_Death__Output)[];
  'suspicions': (_redirfs_v1_Suspicion__Output)[];
  /**
   * The runs named by a launcher that this node's trainers read now, to
   * tell two jobs reading at once across the cluster.
   */
  'reading': (string)[];
  /**
   * It answers for no virtual chunk in this generation (it was fenced, and
   * not every peer has had its handshake yet).
   */
  'rejoining': (boolean);
  /**
   * As in a handshake reply: the nodes it knows alive, with the deaths it tells.
   */
  'alive': (_redirfs_v1_Incarnation__Output)[];
}
