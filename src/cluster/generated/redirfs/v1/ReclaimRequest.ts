// Original file: proto/redirfs.proto


export interface ReclaimRequest {
  /**
   * The owner asking.
   */
  'node'?: (number);
  'vc'?: (number);
  /**
   * Give one held file back: one at `offsets`, or any when `offsets` is empty.
   */
  'giveBack'?: (boolean);
  'offsets'?: (number)[];
}

export interface ReclaimRequest__Output {
  /**
   * The owner asking.
   */
  'node': (number);
  'vc': (number);
  /**
   * Give one held file back: one at `offsets`, or any when `offsets` is empty.
   */
  'giveBack': (boolean);
  'offsets': (number)[];
}
