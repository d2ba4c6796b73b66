// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface ServedNotice {
  'vc'?: (number);
  'file'?: (number);
  /**
   * The batch the file came in.
   */
  'batch'?: (number | string | Long);
}

export interface ServedNotice__Output {
  'vc': (number);
  'file': (number);
  /**
   * The batch the file came in.
   */
  'batch': (number);
}
