// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface Incarnation {
  'node'?: (number);
  'incarnation'?: (number | string | Long);
}

export interface Incarnation__Output {
  'node': (number);
  'incarnation': (number);
}
