// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Death as _redirfs_v1_Death, Death__Output as _redirfs_v1_Death__Output } from '../../redirfs/v1/Death';
import type { Suspicion as _redirfs_v1_Suspicion, Suspicion__Output as _redirfs_v1_Suspicion__Output } from '../../redirfs/v1/Suspicion';
import type { Incarnation as _redirfs_v1_Incarnation, Incarnation__Output as _redirfs_v1_Incarnation__Output } from '../../redirfs/v1/Incarnation';
import type { Long } from '@grpc/proto-loader';

export interface HandshakeReply {
  'protocolVersion'?: (number);
  'node'?: (number);
  'layoutHash'?: (string);
  /**
   * Where this node's data channel listens (its peer service's host).
   */
  'dataPort'?: (number);
  'generation'?: (_redirfs_v1_Generation | null);
  /**
   * The caller came back after it died (another incarnation): it answers
   * for none of its virtual chunks until the next generation.
   */
  'rejoining'?: (boolean);
  /**
   * The deaths this node knows, so a node that comes back does not wait
   * for the dead at start-up, and never grants them a lease.
   */
  'dead'?: (_redirfs_v1_Death)[];
  /**
   * The answering node's own incarnation.
   */
  'incarnation'?: (number | string | Long);
  'suspicions'?: (_redirfs_v1_Suspicion)[];
  /**
   * The samples of its layout, as in the request.
   */
  'samples'?: (number);
  /**
   * The incarnation of every other node this node knows alive: a node
   * mounted again learns that a peer whose earlier incarnation is dead came
   * back, and waits for its handshake instead of taking it for dead.
   */
  'alive'?: (_redirfs_v1_Incarnation)[];
}

export interface HandshakeReply__Output {
  'protocolVersion': (number);
  'node': (number);
  'layoutHash': (string);
  /**
   * Where this node's data channel listens (its peer service's host).
   */
  'dataPort': (number);
  'generation': (_redirfs_v1_Generation__Output | null);
  /**
   * The caller came back after it died (another incarnation): it answers
   * for none of its virtual chunks until the next generation.
   */
  'rejoining': (boolean);
  /**
   * The deaths this node knows, so a node that comes back does not wait
   * for the dead at start-up, and never grants them a lease.
   */
  'dead': (_redirfs_v1_Death__Output)[];
  /**
   * The answering node's own incarnation.
   */
  'incarnation': (number);
  'suspicions': (_redirfs_v1_Suspicion__Output)[];
  /**
   * The samples of its layout, as in the request.
   */
  'samples': (number);
  /**
   * The incarnation of every other node this node knows alive: a node
   * mounted again learns that a peer whose earlier incarnation is dead came
   * back, and waits for its handshake instead of taking it for dead.
   */
  'alive': (_redirfs_v1_Incarnation__Output)[];
}
