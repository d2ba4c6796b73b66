// Original file: proto/redirfs.proto


export interface TakeoverStateRequest {
  /**
   * The node taking over, and the dead one.
   */
  'node'?: (number);
  'dead'?: (number);
  'vcs'?: (number)[];
}

export interface TakeoverStateRequest__Output {
  /**
   * The node taking over, and the dead one.
   */
  'node': (number);
  'dead': (number);
  'vcs': (number)[];
}
