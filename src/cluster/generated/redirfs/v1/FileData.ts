// Original file: proto/redirfs.proto


export interface FileData {
  'file'?: (number);
  'data'?: (Buffer | Uint8Array | string);
}

export interface FileData__Output {
  'file': (number);
  'data': (Buffer);
}
