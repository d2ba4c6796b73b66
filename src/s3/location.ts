/**
 * Where a dataset lives in object storage, as users write it:
 * `s3://<bucket>/<prefix>`.
 *
 * The prefix is kept as written (S3 keys may hold `//`, spaces and any
 * other character) except that it ends with `/` unless it is empty, so
 * that `s3://b/train` and `s3://b/train/` name the same tree and a key is
 * always `prefix + relative path`. The bucket name is checked against S3's
 * rules here, where the user can be told which rule it breaks, rather than
 * left to fail at the first request with a less precise answer. A URL that
 * is not valid is a `UsageError` whose one line says what is wrong.
 */
import { UsageError } from '../errors'

export interface S3Location {
  readonly bucket: string
  /** Empty, or ending with `/`. */
  readonly prefix: string
}

const SCHEME = /^s3:\/\//i

/** S3 refuses keys longer than this many UTF-8 bytes. */
const MAX_KEY_BYTES = 1024

export function isS3Url (text: string): boolean {
  return SCHEME.test(text)
}

export function parseS3Url (text: string): S3Location {
  if (!isS3Url(text)) throw new UsageError(`'${text}' is not an S3 URL: write s3://<bucket>/<prefix>`)
  const rest = text.replace(SCHEME, '')
  const slash = rest.indexOf('/')
  const bucket = slash < 0 ? rest : rest.slice(0, slash)
  if (bucket === '') throw new UsageError(`'${text}' names no bucket: write s3://<bucket>/<prefix>`)
  const problem = bucketNameProblem(bucket)
  if (problem !== undefined) throw new UsageError(`'${text}' has an invalid bucket name '${bucket}': ${problem}`)
  let prefix = slash < 0 ? '' : rest.slice(slash + 1)
  if (prefix !== '' && !prefix.endsWith('/')) prefix += '/'
  if (Buffer.byteLength(prefix) > MAX_KEY_BYTES) throw new UsageError(`'${text}' has a prefix longer than S3's ${MAX_KEY_BYTES}-byte limit on keys`)
  return { bucket, prefix }
}

/** The URL of a key (or prefix) in a bucket, as messages show it. */
export function s3Url (bucket: string, key = ''): string {
  return `s3://${bucket}/${key}`
}

/**
 * What is wrong with a bucket name under S3's current naming rules, or
 * undefined. (Buckets made in us-east-1 before 2018 may have uppercase
 * letters and underscores; S3 itself makes no new ones, and such names
 * cannot be addressed virtual-host style, so they are refused here too.)
 */
export function bucketNameProblem (name: string): string | undefined {
  if (name.length < 3 || name.length > 63) return `bucket names are 3 to 63 characters long, this one has ${name.length}`
  if (!/^[a-z0-9.-]+$/.test(name)) return 'bucket names use only lowercase letters, digits, dots and hyphens'
  if (!/^[a-z0-9]/.test(name) || !/[a-z0-9]$/.test(name)) return 'bucket names start and end with a lowercase letter or a digit'
  if (name.includes('..')) return 'bucket names have no two dots in a row'
  if (/^\d+\.\d+\.\d+\.\d+$/.test(name)) return 'bucket names are not IP addresses'
  return undefined
}
