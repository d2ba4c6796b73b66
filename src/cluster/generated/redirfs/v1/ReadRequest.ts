// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Long } from '@grpc/proto-loader';

export interface ReadRequest {
  /**
   * The requesting node.
   */
  'node'?: (number);
  /**
   * The file opened there.
   */
  'file'?: (number);
  /**
   * Bit i set: offset i of the requester's mirror of this VC is empty.
   */
  'emptyOffsets'?: (Buffer | Uint8Array | string);
  /**
   * Bytes the requester can take into its mirrors for this answer.
   */
  'freeBytes'?: (number | string | Long);
  /**
   * The last batch of this VC the requester received (0: none).
   */
  'lastBatch'?: (number | string | Long);
  'generation'?: (_redirfs_v1_Generation | null);
  /**
   * As in ReclaimAnswer: files the requester gave back to reclaims of this
   * VC, with the batches they had come in, not yet known to have arrived.
   */
  'givenBackFiles'?: (number)[];
  'givenBackBatches'?: (number | string | Long)[];
}

export interface ReadRequest__Output {
  /**
   * The requesting node.
   */
  'node': (number);
  /**
   * The file opened there.
   */
  'file': (number);
  /**
   * Bit i set: offset i of the requester's mirror of this VC is empty.
   */
  'emptyOffsets': (Buffer);
  /**
   * Bytes the requester can take into its mirrors for this answer.
   */
  'freeBytes': (number);
  /**
   * The last batch of this VC the requester received (0: none).
   */
  'lastBatch': (number);
  'generation': (_redirfs_v1_Generation__Output | null);
  /**
   * As in ReclaimAnswer: files the requester gave back to reclaims of this
   * VC, with the batches they had come in, not yet known to have arrived.
   */
  'givenBackFiles': (number)[];
  'givenBackBatches': (number)[];
}
