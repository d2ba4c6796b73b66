// Original file: proto/redirfs.proto


export interface SyncReply {
}

export interface SyncReply__Output {
}
