// Original file: proto/redirfs.proto

import type { StandbyVc as _redirfs_v1_StandbyVc, StandbyVc__Output as _redirfs_v1_StandbyVc__Output } from '../../redirfs/v1/StandbyVc';
import type { ServedNotice as _redirfs_v1_ServedNotice, ServedNotice__Output as _redirfs_v1_ServedNotice__Output } from '../../redirfs/v1/ServedNotice';
import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';

export interface SyncRequest {
  'node'?: (number);
  'standby'?: (_redirfs_v1_StandbyVc)[];
  'served'?: (_redirfs_v1_ServedNotice)[];
  'generation'?: (_redirfs_v1_Generation | null);
}

export interface SyncRequest__Output {
  'node': (number);
  'standby': (_redirfs_v1_StandbyVc__Output)[];
  'served': (_redirfs_v1_ServedNotice__Output)[];
  'generation': (_redirfs_v1_Generation__Output | null);
}
