// Original file: proto/redirfs.proto

import type { Generation as _redirfs_v1_Generation, Generation__Output as _redirfs_v1_Generation__Output } from '../../redirfs/v1/Generation';
import type { Long } from '@grpc/proto-loader';

export interface ReadAnswer {
  /**
   * A gRPC status code: 0 is an answer; else `details` says why not, and no
   * bytes follow.
   */
  'status'?: (number);
  'details'?: (string);
  /**
   * files[0] is the file the open is bound to, unless `served_absent` (the
   * owner could not read the data the open would have been given); the
   * rest is the opportunistic batch, each landing on its offset's slot.
   */
  'files'?: (number)[];
  'sizes'?: (number)[];
  'servedAbsent'?: (boolean);
  'batchNumber'?: (number | string | Long);
  /**
   * How many times this VC's epoch has ended at the owner.
   */
  'vcEpoch'?: (number);
  /**
   * The owner's, when it answered: files of another generation than the caller's are not kept.
   */
  'generation'?: (_redirfs_v1_Generation | null);
}

export interface ReadAnswer__Output {
  /**
   * A gRPC status code: 0 is an answer; else `details` says why not, and no
   * bytes follow.
   */
  'status': (number);
  'details': (string);
  /**
   * files[0] is the file the open is bound to, unless `served_absent` (the
   * owner could not read the data the open would have been given); the
   * rest is the opportunistic batch, each landing on its offset's slot.
   */
  'files': (number)[];
  'sizes': (number)[];
  'servedAbsent': (boolean);
  'batchNumber': (number);
  /**
   * How many times this VC's epoch has ended at the owner.
   */
  'vcEpoch': (number);
  /**
   * The owner's, when it answered: files of another generation than the caller's are not kept.
   */
  'generation': (_redirfs_v1_Generation__Output | null);
}
