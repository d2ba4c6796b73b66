// Original file: proto/redirfs.proto

import type { Long } from '@grpc/proto-loader';

export interface VcState {
  'vc'?: (number);
  'epoch'?: (number);
  'received'?: (number)[];
  'held'?: (number)[];
  'lastBatch'?: (number | string | Long);
  /**
   * The batch each held file came in, in the order of `held`: the new
   * owner's ledger names it so, as the holder will in its notices and in
   * the files it gives back.
   */
  'heldBatches'?: (number | string | Long)[];
  /**
   * Every file its trainer got from its mirror of the VC, whatever the
   * epoch then, with the batch each came in (in the same order): the new
   * owner matches them with the standby copy's files carried into an epoch.
   */
  'servedFromMirror'?: (number)[];
  'servedFromMirrorBatches'?: (number | string | Long)[];
}

export interface VcState__Output {
  'vc': (number);
  'epoch': (number);
  'received': (number)[];
  'held': (number)[];
  'lastBatch': (number);
  /**
   * The batch each held file came in, in the order of `held`: the new
   * owner's ledger names it so, as the holder will in its notices and in
   * the files it gives back.
   */
  'heldBatches': (number)[];
  /**
   * Every file its trainer got from its mirror of the VC, whatever the
   * epoch then, with the batch each came in (in the same order): the new
   * owner matches them with the standby copy's files carried into an epoch.
   */
  'servedFromMirror': (number)[];
  'servedFromMirrorBatches': (number)[];
}
