// Original file: proto/redirfs.proto


export interface StatsRequest {
}

export interface StatsRequest__Output {
}
