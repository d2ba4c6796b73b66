// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';

export interface TakeoverStateRequest {
  /**
   * The node taking over, and the dead one.
   */
  'node'?: (number);
  'dead'?: (number);
  'vcs'?: (number)[];
  'generation'?: (_redirfs_v1_Generation | null);
}

export interface TakeoverStateRequest__Output {
  /**
   * The node taking over, and the dead one.
   */
  'node': (number);
  'dead': (number);
  'vcs': (number)[];
  'generation': (_redirfs_v1_Generation__Output | null);
}
