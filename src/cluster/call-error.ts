/**
 * How calls between peers fail: a `PeerRefusal` is what the answering node
 * throws (its status is what the caller gets), a `PeerCallError` what the
 * caller sees, over gRPC or the data channel alike; an open that needed the
 * call fails with EIO unless the caller may ask again.
 */
import * as grpc from '@grpc/grpc-js'
import { FsError } from '../errors'

/** A refusal with the gRPC status the caller gets. */
export class PeerRefusal extends Error {
  constructor (readonly status: grpc.status, message: string) { super(message) }
}

/** How a refusal tells the caller that it (that incarnation of it) is dead to the answering node (docs/design.md, "Deaths and fencing"). */
const TAKEN_FOR_DEAD = /^taken for dead \(incarnation (\d+)\): (.*)$/s

/** The refusal of a call from `incarnation` of a node this one takes for dead, or suspects: the caller must stop serving. */
export const takenForDead = (incarnation: number, why: string): PeerRefusal => new PeerRefusal(grpc.status.FAILED_PRECONDITION, `taken for dead (incarnation ${incarnation}): ${why}`)

/**
 * A call this node cannot answer now, but may later or another node may
 * (ownership moved, no quorum): the caller asks again. ABORTED, as the
 * refusal of an earlier generation's call (generations.ts), which the
 * caller tells apart by its details.
 */
export const askAgain = (why: string): PeerRefusal => new PeerRefusal(grpc.status.ABORTED, why)

export class PeerCallError extends FsError {
  constructor (readonly peer: string, readonly status: grpc.status, readonly details: string) {
    super('EIO', `peer ${peer}: ${details}`)
  }

  /** The peer did not answer at all (not up, gone, or too slow). */
  get unreachable (): boolean {
    return this.status === grpc.status.UNAVAILABLE || this.status === grpc.status.DEADLINE_EXCEEDED || this.status === grpc.status.CANCELLED
  }

  /** The peer said to ask again (see `askAgain`). */
  get askAgain (): boolean { return this.status === grpc.status.ABORTED }

  /** The peer takes the caller for dead: which incarnation of it, and why; or undefined. */
  get takenForDead (): { incarnation: number, why: string } | undefined {
    const match = this.status === grpc.status.FAILED_PRECONDITION ? TAKEN_FOR_DEAD.exec(this.details) : null
    return match === null ? undefined : { incarnation: Number(match[1]), why: match[2] }
  }
}
