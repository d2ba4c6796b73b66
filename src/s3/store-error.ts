/**
 * What a failed object-storage request means, and whether to try again.
 *
 * A request fails in one of two ways. A *transient* failure says nothing
 * about the object: a 5xx, throttling (503 SlowDown, 429), a 408, a
 * connection reset, a request that stalled, a body that ended before its
 * Content-Length. Sending it again may well work, so the store does, with
 * backoff. A *definite* failure is the store's answer about the object or
 * the caller and will be the same next time: 404, 403, 412, a missing
 * bucket, a bad key id or signature. Retrying it only delays the error.
 *
 * A refused connection is the one that depends on history: to an endpoint
 * that has answered before, it is a server restarting (transient); to one
 * that never has, nothing is listening there, and the user should hear so
 * at once rather than after a round of backoff.
 *
 * Every error the store throws is a `StoreError`: one `kind` a caller can
 * act on (the mount answers `not-found` and `changed` differently from
 * `unreachable`) and one line a user can act on. It is a `UsageError`, so
 * the CLI prints that line and no stack trace.
 */
import { STATUS_CODES } from 'node:http'
import { UsageError, codeOf } from '../errors'

export type StoreErrorKind =
  /** The key does not exist (404 NoSuchKey). */
  | 'not-found'
  /** The object is not the one expected: If-Match failed (412), its ETag or length differs, or a range is past its end. */
  | 'changed'
  /** Credentials are missing, unknown (InvalidAccessKeyId), wrong (SignatureDoesNotMatch) or not allowed (403). */
  | 'denied'
  /** The bucket does not exist (NoSuchBucket). */
  | 'no-bucket'
  /** No answer: connection refused, host unknown, or resets and timeouts past the retries. */
  | 'unreachable'
  /** Anything else: 5xx past the retries, other 4xx, a malformed answer. */
  | 'failed'

export class StoreError extends UsageError {
  constructor (readonly kind: StoreErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'StoreError'
  }
}

/** One line for a user, whatever the store (or the SDK below it) threw. */
export function describeStoreError (err: unknown): string {
  if (err instanceof StoreError) return err.message
  const message = err instanceof Error ? err.message : String(err)
  return `object storage request failed: ${firstLine(message)}`
}

/** A failure of the transfer itself, found by the store rather than the SDK. */
export class TransferFault extends Error {
  constructor (readonly fault: 'timeout' | 'short-body', message: string) {
    super(message)
    this.name = 'TransferFault'
  }
}

export interface Verdict {
  /** Whether sending the request again may succeed. */
  readonly transient: boolean
  readonly kind: StoreErrorKind
  /** Short, for retry notices and messages: "503 SlowDown", "connection reset". */
  readonly reason: string
  /** The HTTP status, when there was an answer. */
  readonly status?: number
  /** The S3 error code, when there was one (NoSuchKey, SignatureDoesNotMatch, …). */
  readonly code?: string
}

const THROTTLING = new Set([
  'SlowDown', 'Throttling', 'ThrottlingException', 'ThrottledException', 'RequestThrottled', 'RequestThrottledException',
  'TooManyRequestsException', 'RequestLimitExceeded', 'BandwidthLimitExceeded', 'ProvisionedThroughputExceededException'
])
const CREDENTIALS = new Set(['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'AccessDenied', 'ExpiredToken', 'InvalidToken', 'TokenRefreshRequired', 'AllAccessDisabled', 'AccountProblem'])
const NETWORK_TRANSIENT: Record<string, string> = {
  ECONNRESET: 'connection reset',
  EPIPE: 'connection reset',
  ECONNABORTED: 'connection aborted',
  ETIMEDOUT: 'timed out',
  EAI_AGAIN: 'name lookup failed for now',
  ENETUNREACH: 'network unreachable',
  EHOSTUNREACH: 'host unreachable',
  ENETDOWN: 'network down',
  EHOSTDOWN: 'host down'
}

/** Judges one failed attempt. `answeredBefore`: the endpoint has answered this store at least once. */
export function judge (err: unknown, answeredBefore: boolean): Verdict {
  if (err instanceof TransferFault) {
    return { transient: true, kind: err.fault === 'timeout' ? 'unreachable' : 'failed', reason: err.message }
  }
  if (err instanceof StoreError) return { transient: false, kind: err.kind, reason: err.message }
  const status = (err as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode
  const name = (err as { name?: unknown } | undefined)?.name
  const sdkCode = (err as { Code?: unknown } | undefined)?.Code
  const named = typeof sdkCode === 'string' ? sdkCode : typeof name === 'string' ? name : undefined
  // An answer without a body (a HEAD's) has no code; the SDK then names it Unknown or by its status.
  const code = named === undefined || /^(Unknown|UnknownError|\d+)$/.test(named) ? undefined : named
  if (typeof status === 'number' && status > 0) {
    const reason = `${status} ${code ?? STATUS_CODES[status] ?? 'error'}`
    const answer = (transient: boolean, kind: StoreErrorKind): Verdict => ({ transient, kind, reason, status, code })
    if (status === 429 || status === 408 || status >= 500 || (code !== undefined && (THROTTLING.has(code) || code === 'RequestTimeout'))) return answer(true, 'failed')
    if (code === 'NoSuchBucket') return answer(false, 'no-bucket')
    if (status === 412 || code === 'PreconditionFailed' || status === 416 || code === 'InvalidRange') return answer(false, 'changed')
    if (status === 404 || code === 'NoSuchKey' || code === 'NotFound') return answer(false, 'not-found')
    if (status === 403 || (code !== undefined && CREDENTIALS.has(code))) return answer(false, 'denied')
    return answer(false, 'failed')
  }
  if (name === 'CredentialsProviderError') return { transient: false, kind: 'denied', reason: 'no credentials', code: name }
  // Before the name: the SDK renames resets and broken pipes TimeoutError, and their code says more.
  const errno = codeOf(err)
  if (errno === 'ECONNREFUSED') return { transient: answeredBefore, kind: 'unreachable', reason: 'connection refused', code: errno }
  if (errno === 'ENOTFOUND') return { transient: false, kind: 'unreachable', reason: 'host not found', code: errno }
  if (errno !== undefined && errno in NETWORK_TRANSIENT) return { transient: true, kind: 'unreachable', reason: NETWORK_TRANSIENT[errno], code: errno }
  if (name === 'TimeoutError') return { transient: true, kind: 'unreachable', reason: 'timed out' }
  return { transient: false, kind: 'failed', reason: firstLine(err instanceof Error ? err.message : String(err)) }
}

export function firstLine (text: string): string {
  const line = text.split('\n', 1)[0].trim()
  return line === '' ? 'no message' : line
}

/** What a message needs to say where a request went. */
export interface RequestContext {
  /** The S3 operation: GetObject, ListObjectsV2, … */
  readonly operation: string
  readonly bucket: string
  /** The key or prefix, '' for the bucket itself. */
  readonly key: string
  /** The endpoint as the user would recognize it (the option, the variable, or AWS's own). */
  readonly endpoint: string
  /** Attempts made, the failed last one included. */
  readonly attempts: number
}

/** The one line for a final failure. */
export function storeErrorMessage (verdict: Verdict, context: RequestContext): string {
  const url = `s3://${context.bucket}/${context.key}`
  const tries = context.attempts > 1 ? `, ${context.attempts} attempts` : ''
  const credentials = 'check your AWS credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ~/.aws)'
  switch (verdict.kind) {
    case 'not-found': return `${url} does not exist`
    case 'no-bucket': return `the bucket ${context.bucket} does not exist at ${context.endpoint}`
    case 'changed': return `${url} changed while redirfs read it (${verdict.reason}): it was replaced or rewritten since it was listed`
    case 'unreachable': return `cannot reach the S3 endpoint ${context.endpoint} (${verdict.reason}${tries}); check --s3-endpoint`
    case 'denied':
      switch (verdict.code) {
        case 'CredentialsProviderError': return 'no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where an instance or container role is available'
        case 'InvalidAccessKeyId': return `${context.endpoint} does not know the access key id in use (InvalidAccessKeyId): ${credentials}`
        case 'SignatureDoesNotMatch': return `${context.endpoint} rejected the request signature (SignatureDoesNotMatch): the secret key does not match the key id; ${credentials}`
        case 'ExpiredToken': return 'the AWS session token has expired (ExpiredToken): renew your credentials'
        default: return `access denied to ${url} (${verdict.reason}): ${credentials} and the bucket's permissions`
      }
    case 'failed': return `${context.operation} ${url} failed (${verdict.reason}${tries})`
  }
}
