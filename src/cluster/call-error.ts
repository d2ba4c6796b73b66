/**
 * A call to a peer that failed, over gRPC or the data channel alike; an
 * open that needed it fails with EIO.
 */
import * as grpc from '@grpc/grpc-js'
import { FsError } from '../errors'

export class PeerCallError extends FsError {
  constructor (readonly peer: string, readonly status: grpc.status, readonly details: string) {
    super('EIO', `peer ${peer}: ${details}`)
  }

  /** The peer did not answer at all (not up, gone, or too slow). */
  get unreachable (): boolean {
    return this.status === grpc.status.UNAVAILABLE || this.status === grpc.status.DEADLINE_EXCEEDED || this.status === grpc.status.CANCELLED
  }
}
