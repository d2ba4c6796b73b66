// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

/**
 * One incarnation of a node is dead: never again will it answer for
 * anything. `gone`: its process is gone (its port refused a connection);
 * otherwise a majority of the cluster stopped hearing from it, or it said
 * so itself.
 */
export interface Death {
  'node'?: (number);
  'incarnation'?: (number | string | Long);
  'gone'?: (boolean);
}

/**
 * One incarnation of a node is dead: never again will it answer for
 * anything. `gone`: its process is gone (its port refused a connection);
 * otherwise a majority of the cluster stopped hearing from it, or it said
 * so itself.
 */
export interface Death__Output {
  'node': (number);
  'incarnation': (number);
  'gone': (boolean);
}
