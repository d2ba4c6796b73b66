// Original file: proto/redirfs.proto


export interface HandshakeReply {
  'protocolVersion'?: (number);
  'node'?: (number);
  'layoutHash'?: (string);
}

export interface HandshakeReply__Output {
  'protocolVersion': (number);
  'node': (number);
  'layoutHash': (string);
}
