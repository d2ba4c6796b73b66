// Original file: proto/redirfs.proto

import type { StandbyVc as _redirfs_v1_StandbyVc, StandbyVc__Output as _redirfs_v1_StandbyVc__Output } from '../../redirfs/v1/StandbyVc';
import type { ServedNotice as _redirfs_v1_ServedNotice, ServedNotice__Output as _redirfs_v1_ServedNotice__Output } from '../../redirfs/v1/ServedNotice';

export interface SyncRequest {
  'node'?: (number);
  'standby'?: (_redirfs_v1_StandbyVc)[];
  'served'?: (_redirfs_v1_ServedNotice)[];
}

export interface SyncRequest__Output {
  'node': (number);
  'standby': (_redirfs_v1_StandbyVc__Output)[];
  'served': (_redirfs_v1_ServedNotice__Output)[];
}
