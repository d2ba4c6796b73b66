// Original file: proto/redirfs.proto


export interface StatsReply {
  'json'?: (string);
}

export interface StatsReply__Output {
  'json': (string);
}
