// Original file: proto/redirfs.proto

import type { FileData as _redirfs_v1_FileData, FileData__Output as _redirfs_v1_FileData__Output } from '../../redirfs/v1/FileData';
import type { Long } from '@grpc/proto-loader';

export interface ReclaimReply {
  'held'?: (number)[];
  'lastBatch'?: (number | string | Long);
  'returned'?: (_redirfs_v1_FileData | null);
}

export interface ReclaimReply__Output {
  'held': (number)[];
  'lastBatch': (number);
  'returned': (_redirfs_v1_FileData__Output | null);
}
