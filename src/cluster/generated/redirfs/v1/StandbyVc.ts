// Original file: proto/redirfs.proto


export interface StandbyVc {
  'vc'?: (number);
  'epoch'?: (number);
  /**
   * served_files[i] answered an open of node served_nodes[i].
   */
  'servedFiles'?: (number)[];
  'servedNodes'?: (number)[];
}

export interface StandbyVc__Output {
  'vc': (number);
  'epoch': (number);
  /**
   * served_files[i] answered an open of node served_nodes[i].
   */
  'servedFiles': (number)[];
  'servedNodes': (number)[];
}
