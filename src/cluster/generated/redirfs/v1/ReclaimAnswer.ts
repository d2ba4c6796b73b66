// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface ReclaimAnswer {
  /**
   * As in ReadAnswer.
   */
  'status'?: (number);
  'details'?: (string);
  /**
   * The file given back, if one is (at most one), and its size.
   */
  'files'?: (number)[];
  'sizes'?: (number)[];
  /**
   * What the holder still holds of the VC, and the last batch it received.
   */
  'held'?: (number)[];
  'lastBatch'?: (number | string | Long);
  /**
   * Files it gave back before this answer (to reclaims of the VC), each with
   * the batch it had come in, until a read answered says the owner has
   * heard of them: an owner whose ledger still has one there never got that
   * answer, and the file may be loaded again.
   */
  'givenBackFiles'?: (number)[];
  'givenBackBatches'?: (number | string | Long)[];
}

export interface ReclaimAnswer__Output {
  /**
   * As in ReadAnswer.
   */
  'status': (number);
  'details': (string);
  /**
   * The file given back, if one is (at most one), and its size.
   */
  'files': (number)[];
  'sizes': (number)[];
  /**
   * What the holder still holds of the VC, and the last batch it received.
   */
  'held': (number)[];
  'lastBatch': (number);
  /**
   * Files it gave back before this answer (to reclaims of the VC), each with
   * the batch it had come in, until a read answered says the owner has
   * heard of them: an owner whose ledger still has one there never got that
   * answer, and the file may be loaded again.
   */
  'givenBackFiles': (number)[];
  'givenBackBatches': (number)[];
}
