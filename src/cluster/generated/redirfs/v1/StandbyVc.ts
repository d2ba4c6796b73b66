// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface StandbyVc {
  'vc'?: (number);
  'epoch'?: (number);
  /**
   * served_files[i] answered an open of node served_nodes[i].
   */
  'servedFiles'?: (number)[];
  'servedNodes'?: (number)[];
  /**
   * The batch served_files[i] went in, into served_nodes[i]'s mirror (0:
   * an answer to an open).
   */
  'servedBatches'?: (number | string | Long)[];
}

export interface StandbyVc__Output {
  'vc': (number);
  'epoch': (number);
  /**
   * served_files[i] answered an open of node served_nodes[i].
   */
  'servedFiles': (number)[];
  'servedNodes': (number)[];
  /**
   * The batch served_files[i] went in, into served_nodes[i]'s mirror (0:
   * an answer to an open).
   */
  'servedBatches': (number)[];
}
