// Original file: proto/redirfs.proto


export interface DataHello {
  /**
   * The cluster token, as the x-redirfs-token metadata of a gRPC call.
   */
  'token'?: (string);
  'protocolVersion'?: (number);
}

export interface DataHello__Output {
  /**
   * The cluster token, as the x-redirfs-token metadata of a gRPC call.
   */
  'token': (string);
  'protocolVersion': (number);
}
