// Original file: proto/redirfs.proto


export interface HandshakeRequest {
  'protocolVersion'?: (number);
  'node'?: (number);
  'nodes'?: (number);
  'layoutHash'?: (string);
}

export interface HandshakeRequest__Output {
  'protocolVersion': (number);
  'node': (number);
  'nodes': (number);
  'layoutHash': (string);
}
