// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface VcState {
  'vc'?: (number);
  'epoch'?: (number);
  'received'?: (number)[];
  'held'?: (number)[];
  'lastBatch'?: (number | string | Long);
}

export interface VcState__Output {
  'vc': (number);
  'epoch': (number);
  'received': (number)[];
  'held': (number)[];
  'lastBatch': (number);
}
