// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Long } from '@grpc/proto-loader';

export interface HandshakeRequest {
  'protocolVersion'?: (number);
  'node'?: (number);
  'nodes'?: (number);
  'layoutHash'?: (string);
  /**
   * Random at each mount, and again when a node taken for dead rejoins: a
   * node that comes back after it died has a new one.
   */
  'incarnation'?: (number | string | Long);
  'generation'?: (_redirfs_v1_Generation | null);
  /**
   * The samples of its layout, for a message that says how layouts differ.
   */
  'samples'?: (number);
}

export interface HandshakeRequest__Output {
  'protocolVersion': (number);
  'node': (number);
  'nodes': (number);
  'layoutHash': (string);
  /**
   * Random at each mount, and again when a node taken for dead rejoins: a
   * node that comes back after it died has a new one.
   */
  'incarnation': (number);
  'generation': (_redirfs_v1_Generation__Output | null);
  /**
   * The samples of its layout, for a message that says how layouts differ.
   */
  'samples': (number);
}
