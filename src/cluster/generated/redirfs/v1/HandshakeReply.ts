// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';

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
   * The nodes this one takes for dead, so a node that comes back does not
   * wait for them at start-up.
   */
  'dead'?: (number)[];
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
   * The nodes this one takes for dead, so a node that comes back does not
   * wait for them at start-up.
   */
  'dead': (number)[];
}
