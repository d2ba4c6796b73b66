// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';

export interface ReclaimRequest {
  /**
   * The owner asking.
   */
  'node'?: (number);
  'vc'?: (number);
  /**
   * Give one held file back: one at `offsets`, or any when `offsets` is empty.
   */
  'giveBack'?: (boolean);
  'offsets'?: (number)[];
  'generation'?: (_redirfs_v1_Generation | null);
}

export interface ReclaimRequest__Output {
  /**
   * The owner asking.
   */
  'node': (number);
  'vc': (number);
  /**
   * Give one held file back: one at `offsets`, or any when `offsets` is empty.
   */
  'giveBack': (boolean);
  'offsets': (number)[];
  'generation': (_redirfs_v1_Generation__Output | null);
}
