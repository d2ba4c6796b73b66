// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Death as _redirfs_v1_Death, Death__Output as _redirfs_v1_Death__Output } from '../../redirfs/v1/Death';

export interface TakeoverStateRequest {
  /**
   * The node taking over, and the dead one.
   */
  'node'?: (number);
  'dead'?: (number);
  'vcs'?: (number)[];
  'generation'?: (_redirfs_v1_Generation | null);
  /**
   * Every death the node taking over knows (whoever answered for these
   * VCs before it among them): the answering node learns them before it
   * reports, and from then on drops any answer of theirs.
   */
  'deaths'?: (_redirfs_v1_Death)[];
}

export interface TakeoverStateRequest__Output {
  /**
   * The node taking over, and the dead one.
   */
  'node': (number);
  'dead': (number);
  'vcs': (number)[];
  'generation': (_redirfs_v1_Generation__Output | null);
  /**
   * Every death the node taking over knows (whoever answered for these
   * VCs before it among them): the answering node learns them before it
   * reports, and from then on drops any answer of theirs.
   */
  'deaths': (_redirfs_v1_Death__Output)[];
}
