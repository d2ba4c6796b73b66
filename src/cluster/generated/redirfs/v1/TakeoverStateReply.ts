// Original file: proto/redirfs.proto

import type { VcState as _redirfs_v1_VcState, VcState__Output as _redirfs_v1_VcState__Output } from '../../redirfs/v1/VcState';

export interface TakeoverStateReply {
  'vcs'?: (_redirfs_v1_VcState)[];
}

export interface TakeoverStateReply__Output {
  'vcs': (_redirfs_v1_VcState__Output)[];
}
