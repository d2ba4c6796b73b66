// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

/**
 * `by` stopped hearing from that incarnation of `node` for longer than its
 * lease, and will never renew it again.
 */
export interface Suspicion {
  'node'?: (number);
  'incarnation'?: (number | string | Long);
  'by'?: (number);
}

/**
 * `by` stopped hearing from that incarnation of `node` for longer than its
 * lease, and will never renew it again.
 */
export interface Suspicion__Output {
  'node': (number);
  'incarnation': (number);
  'by': (number);
}
