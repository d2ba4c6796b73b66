// Original file: proto/redirfs.proto

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
}
