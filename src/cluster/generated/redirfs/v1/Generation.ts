// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

/**
 * A generation: the cluster's epochs from one training run's start on.
 * Every node resets its epoch state, mirrors and ledgers when it starts a
 * later one, and every message that depends on epoch state carries the
 * sender's, so nothing of an earlier generation is ever taken for this one.
 * Ordered by number, then key.
 */
export interface Generation {
  'number'?: (number | string | Long);
  /**
   * The run that began it (its launcher's job, or a trainer process).
   */
  'key'?: (string);
}

/**
 * A generation: the cluster's epochs from one training run's start on.
 * Every node resets its epoch state, mirrors and ledgers when it starts a
 * later one, and every message that depends on epoch state carries the
 * sender's, so nothing of an earlier generation is ever taken for this one.
 * Ordered by number, then key.
 */
export interface Generation__Output {
  'number': (number);
  /**
   * The run that began it (its launcher's job, or a trainer process).
   */
  'key': (string);
}
