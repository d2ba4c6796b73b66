// Original file: proto/redirfs.proto

import type { FileData as _redirfs_v1_FileData, FileData__Output as _redirfs_v1_FileData__Output } from '../../redirfs/v1/FileData';
import type { Long } from '@grpc/proto-loader';

export interface ReadReply {
  /**
   * The file the open is bound to; absent when the owner could not read the
   * data the open would have been given.
   */
  'served'?: (_redirfs_v1_FileData | null);
  /**
   * The opportunistic batch; each file lands on its offset's slot.
   */
  'batch'?: (_redirfs_v1_FileData)[];
  'batchNumber'?: (number | string | Long);
  /**
   * How many times this VC's epoch has ended at the owner.
   */
  'vcEpoch'?: (number);
}

export interface ReadReply__Output {
  /**
   * The file the open is bound to; absent when the owner could not read the
   * data the open would have been given.
   */
  'served': (_redirfs_v1_FileData__Output | null);
  /**
   * The opportunistic batch; each file lands on its offset's slot.
   */
  'batch': (_redirfs_v1_FileData__Output)[];
  'batchNumber': (number);
  /**
   * How many times this VC's epoch has ended at the owner.
   */
  'vcEpoch': (number);
}
