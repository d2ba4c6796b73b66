// Original file: proto/redirfs.proto


export interface HandshakeReply {
  'protocolVersion'?: (number);
  'node'?: (number);
  'layoutHash'?: (string);
  /**
   * Where this node's data channel listens (its peer service's host).
   */
  'dataPort'?: (number);
}

export interface HandshakeReply__Output {
  'protocolVersion': (number);
  'node': (number);
  'layoutHash': (string);
  /**
   * Where this node's data channel listens (its peer service's host).
   */
  'dataPort': (number);
}
