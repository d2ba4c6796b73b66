/**
 * The object-storage access layer: one `ObjectStore` per mount or command,
 * over one bucket, on the AWS SDK for JavaScript v3.
 *
 * The SDK signs, serializes and finds credentials (its whole default
 * chain: variables, shared files and profiles, web identity, container and
 * instance roles); this layer decides how requests are sent. Its own
 * choices, each for a reason:
 *
 * - **Retries are ours.** The SDK's `maxAttempts` is 1. Its retry
 *   strategy cannot see a body that ends short (the response was a
 *   success by the time it is read) and does not say how often it
 *   retried; here every attempt goes through one loop that judges the
 *   failure (`store-error.ts`), counts it, tells `onRetry`, and waits with
 *   exponential backoff and full jitter, which spreads a fleet of clients
 *   that met the same 503 instead of bringing them back together.
 * - **Bytes are checked.** A GET's body is streamed straight into its
 *   target (a buffer, or a `RangeSink` that scatters it: no chunk list,
 *   no concatenation) and must be exactly the length asked for; one that
 *   ends short is retried. A range larger than `partSize` is split into
 *   ranged GETs that run in parallel and fill one target; if any fails
 *   for good, the others are stopped and waited for, so nothing writes
 *   into the target after the call returns.
 * - **A read serves one version.** Every request of a read after the
 *   first sends `If-Match` with the ETag the first answer had (or the one
 *   the caller gave), and every answer's ETag is compared: an object
 *   replaced during a read, between the parts of a split range or between
 *   a failure and its retry, is a `changed` error, never a mix of two
 *   versions.
 * - **Bounded concurrency.** One `p-limit` over every request of the store
 *   (retries wait outside it), and keep-alive agents with as many sockets,
 *   so callers can issue as many reads as they like and the endpoint sees
 *   at most `concurrency`.
 * - **Timeouts cover the body.** A request fails when nothing arrives for
 *   `timeoutMs`: before the answer's headers or between two pieces of its
 *   body. An idle limit rather than a deadline, so a large part on a slow
 *   link is not cut while it is still moving. Uploads rely on the socket's
 *   own idle timer, which sees the bytes going out too.
 * - **Listings are read here.** A ListObjectsV2 answer is parsed by
 *   listing-xml.ts, not the SDK's general deserializer, which at a million
 *   keys would cost a mount a minute of CPU and a heap full of garbage.
 * - **Quiet, plain requests.** Checksums only where S3 requires them, so
 *   S3-compatible stores that know no CRC headers accept the requests; no
 *   `Expect: 100-continue` (the SDK would send large bodies over a fresh
 *   connection outside the agent and wait for an answer some servers never
 *   send); no logging (`onRetry` lets the caller log).
 *
 * Keys are absolute within the bucket everywhere, listings included, so a
 * key from a listing goes back into a read unchanged.
 */
import http from 'node:http'
import https from 'node:https'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  AbortMultipartUploadCommand, CompleteMultipartUploadCommand, CreateMultipartUploadCommand, DeleteObjectCommand,
  DeleteObjectsCommand, GetObjectCommand, HeadBucketCommand, HeadObjectCommand, ListMultipartUploadsCommand,
  ListObjectsV2Command, PutObjectCommand, S3Client, UploadPartCommand, type GetObjectCommandOutput, type S3ClientConfig
} from '@aws-sdk/client-s3'
import { loadConfig, NODE_REGION_CONFIG_FILE_OPTIONS, NODE_REGION_CONFIG_OPTIONS } from '@smithy/core/config'
import { NodeHttpHandler } from '@smithy/node-http-handler'
import pLimit from 'p-limit'
import { clip, UsageError, codeOf } from '../errors'
import { sortByKey } from './key-order'
import { ListingError, parseListing, type ListingPage } from './listing-xml'
import { bucketNameProblem, s3Url } from './location'
import { MultipartObjectWriter, type ObjectWriter, type ObjectWriterOptions, type PartTransport, type WrittenObject } from './object-writer'
import { StoreError, TransferFault, firstLine, judge, storeErrorMessage, type Verdict } from './store-error'

export interface ObjectStoreOptions {
  /** The bucket every key is in. */
  readonly bucket: string
  /**
   * `--s3-endpoint`: an S3-compatible endpoint, `http(s)://host[:port]`.
   * Default: what the SDK finds (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
   * profile's endpoint_url), else AWS's endpoint for the region.
   */
  readonly endpoint?: string
  /** Default: the SDK's chain (AWS_REGION, the profile's region), else us-east-1. */
  readonly region?: string
  /** `--s3-path-style`: the bucket in the path, not the host name. Default false (the SDK picks path style itself for an IP address endpoint). */
  readonly pathStyle?: boolean
  /** Default: the SDK's default provider chain. Tests pass fixed keys. */
  readonly credentials?: S3ClientConfig['credentials']
  /** Requests in flight at once, across all callers (and sockets per agent). Default 64. */
  readonly concurrency?: number
  /** Attempts after the first, for transient failures only. Default 5. */
  readonly retries?: number
  /** A request fails when nothing arrives for this long: before the answer, or within its body (an upload: nothing moves either way for about this long). Default 20000. */
  readonly timeoutMs?: number
  /** The first retry waits up to this long, each next one up to twice as long as the one before (at most 10 s). Default 100. */
  readonly retryDelayMs?: number
  /** Ranges longer than this are read as parallel ranged GETs of this size. Default 8 MiB. */
  readonly partSize?: number
  /** Keys per listing page (MaxKeys). Default 1000, S3's most. */
  readonly listPageSize?: number
  /** Told of every retry, before its wait. */
  readonly onRetry?: (info: RetryInfo) => void
}

export interface RetryInfo {
  /** The S3 operation: GetObject, ListObjectsV2, … */
  readonly operation: string
  readonly url: string
  /** The attempt that failed, from 1. */
  readonly attempt: number
  readonly delayMs: number
  /** Why: "503 SlowDown", "connection reset", "no answer for 5 s", … */
  readonly reason: string
}

export interface ObjectInfo {
  /** Absolute within the bucket. */
  readonly key: string
  readonly size: number
  /** As S3 gives it, quoted. */
  readonly etag: string
  readonly lastModified: Date
}

export type ObjectHead = Omit<ObjectInfo, 'key'>

export interface PendingUpload {
  readonly key: string
  readonly uploadId: string
}

export interface ReadOptions {
  /** The ETag the object must still have (from a listing or head): `If-Match`. */
  readonly ifMatch?: string
  /** Fill this buffer (from its start) instead of a new one; the result is a view of it. */
  readonly into?: Buffer
}

/**
 * Where a ranged GET's bytes go: `write` gets each piece of the body at its
 * offset in the range, in order within a part (a retry starts its part
 * again from its first byte).
 */
export interface RangeSink {
  readonly length: number
  write (at: number, bytes: Buffer): void
}

/** A sink that fills `target` from its start. */
export const bufferSink = (target: Buffer): RangeSink => ({ length: target.length, write: (at, bytes) => { bytes.copy(target, at) } })

/** The part of `sink` from `start`, `length` bytes long. */
const partOf = (sink: RangeSink, start: number, length: number): RangeSink => ({ length, write: (at, bytes) => { sink.write(start + at, bytes) } })

export interface StoreStats {
  /** Requests sent, retries included. */
  getRequests: number
  listRequests: number
  /** HeadObject and HeadBucket. */
  headRequests: number
  /** Everything that writes: PutObject and the multipart requests. */
  putRequests: number
  deleteRequests: number
  /** Body bytes of GETs that succeeded. */
  bytesRead: number
  /** Body bytes of PUTs and parts that succeeded. */
  bytesWritten: number
  /** Attempts sent again. */
  retries: number
  /** Requests that failed after their retries (a HEAD's 404 is an answer, not a failure). */
  failures: number
  /** Requests in flight now. */
  inFlight: number
}

type Counted = 'getRequests' | 'listRequests' | 'headRequests' | 'putRequests' | 'deleteRequests'

/** What one attempt can use: its signal, and a way to say its body moved. */
interface Attempt {
  readonly signal: AbortSignal
  /** Some bytes arrived: the idle timer starts again. */
  progress (): void
  /** The body being read, to destroy if the attempt times out or is cancelled. */
  watch (body: Readable): void
}

const MAX_RETRY_DELAY_MS = 10_000
/** S3 deletes at most this many keys per DeleteObjects. */
const DELETE_BATCH = 1000

export class ObjectStore {
  readonly bucket: string
  private readonly client: S3Client
  private readonly httpAgent: http.Agent
  private readonly httpsAgent: https.Agent
  private readonly limit: ReturnType<typeof pLimit>
  private readonly retries: number
  private readonly timeoutMs: number
  private readonly retryDelayMs: number
  private readonly partSize: number
  private readonly listPageSize: number
  private readonly onRetry?: (info: RetryInfo) => void
  private readonly endpoint?: string
  private readonly counters: Omit<StoreStats, 'inFlight'> = {
    getRequests: 0,
    listRequests: 0,
    headRequests: 0,
    putRequests: 0,
    deleteRequests: 0,
    bytesRead: 0,
    bytesWritten: 0,
    retries: 0,
    failures: 0
  }

  private inFlight = 0
  /** The endpoint has answered at least once: a refused connection now is a restart, worth retrying. */
  private answered = false
  /** The bucket is known to exist, so a HEAD's bare 404 is about the key. */
  private bucketSeen = false

  constructor (options: ObjectStoreOptions) {
    const problem = bucketNameProblem(options.bucket)
    if (problem !== undefined) throw new UsageError(`invalid bucket name '${options.bucket}': ${problem}`)
    this.bucket = options.bucket
    const concurrency = whole(options.concurrency ?? 64, 1, 'S3 concurrency')
    this.retries = whole(options.retries ?? 5, 0, 'S3 retries')
    this.timeoutMs = whole(options.timeoutMs ?? 20_000, 1, 'S3 timeout (ms)')
    this.retryDelayMs = whole(options.retryDelayMs ?? 100, 0, 'S3 retry delay (ms)')
    this.partSize = whole(options.partSize ?? 8 * 2 ** 20, 1, 'S3 part size')
    this.listPageSize = whole(options.listPageSize ?? 1000, 1, 'S3 listing page size')
    this.onRetry = options.onRetry
    if (options.endpoint !== undefined) this.endpoint = checkEndpoint(options.endpoint)
    this.limit = pLimit(concurrency)
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets: concurrency })
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets: concurrency })
    // redirfs runs on Node 20 (package.json's engines) with this SDK version pinned; the SDK's
    // notice that its releases after January 2027 need Node 22 would otherwise reach every user.
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
    const regionFromChain = loadConfig(NODE_REGION_CONFIG_OPTIONS, NODE_REGION_CONFIG_FILE_OPTIONS)
    this.client = new S3Client({
      region: options.region ?? (async () => await regionFromChain().catch(() => 'us-east-1')),
      endpoint: this.endpoint,
      forcePathStyle: options.pathStyle ?? false,
      credentials: options.credentials,
      maxAttempts: 1,
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      expectContinueHeader: false,
      // A bucket in another region than the one configured answers 301; the SDK then asks again there.
      followRegionRedirects: true,
      requestHandler: new NodeHttpHandler({
        httpAgent: this.httpAgent,
        httpsAgent: this.httpsAgent,
        connectionTimeout: this.timeoutMs,
        // The socket's idle timer: the one that sees an upload's bytes leave. A second later than
        // the store's own, so that for reads the store's (which knows where the body is) decides.
        socketTimeout: this.timeoutMs + 1000,
        logger: SILENT
      })
    })
  }

  /** Exactly `length` bytes from `offset`; split into parallel ranged GETs above `partSize`. */
  async getRange (key: string, offset: number, length: number, options: ReadOptions = {}): Promise<Buffer> {
    checkRange(offset, length)
    const target = targetOf(length, options.into)
    if (length > 0) await this.readRanges(key, offset, bufferSink(target), new VersionPin(options.ifMatch))
    return target
  }

  /** Exactly `sink.length` bytes from `offset`, written to `sink` (split as `getRange`); nothing writes to it after this returns. */
  async readRangeTo (key: string, offset: number, sink: RangeSink, options: Pick<ReadOptions, 'ifMatch'> = {}): Promise<void> {
    checkRange(offset, sink.length)
    if (sink.length > 0) await this.readRanges(key, offset, sink, new VersionPin(options.ifMatch))
  }

  /** The whole object, which must be `expectedLength` bytes when that is given. */
  async getObject (key: string, options: ReadOptions & { readonly expectedLength?: number } = {}): Promise<Buffer> {
    const pin = new VersionPin(options.ifMatch)
    if (options.expectedLength !== undefined && options.expectedLength > 0) {
      // Known length: ranged GETs, split as any range, each answer's Content-Range giving the object's size to check.
      const target = targetOf(options.expectedLength, options.into)
      await this.readRanges(key, 0, bufferSink(target), pin, options.expectedLength)
      return target
    }
    return await this.run('GetObject', 'getRequests', key, async attempt => {
      const response = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key, IfMatch: pin.etag }), { abortSignal: attempt.signal })
      const body = bodyOf(response, attempt)
      try {
        pin.check(response.ETag, () => this.changed(key, `its ETag is now ${response.ETag ?? 'missing'}, not ${pin.etag ?? ''}`))
        const announced = response.ContentLength
        if (announced === undefined) throw new StoreError('failed', `GetObject ${s3Url(this.bucket, key)} failed (the answer has no Content-Length)`)
        if (options.expectedLength !== undefined && announced !== options.expectedLength) throw this.changed(key, `it has ${announced} bytes, not ${options.expectedLength}`)
        if (options.into !== undefined && announced > options.into.length) throw this.changed(key, `it has ${announced} bytes, more than the ${options.into.length} expected`)
        const target = options.into?.subarray(0, announced) ?? Buffer.allocUnsafe(announced)
        await readBody(body, bufferSink(target), attempt)
        this.counters.bytesRead += announced
        return target
      } finally {
        // A body read to its end leaves its socket to the agent for the next request; any other is cut.
        if (!body.readableEnded) body.destroy()
      }
    })
  }

  /** Size, ETag and time of an object; undefined when there is none. */
  async head (key: string): Promise<ObjectHead | undefined> {
    const found = await this.run('HeadObject', 'headRequests', key, async attempt => {
      try {
        const response = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }), { abortSignal: attempt.signal })
        return { size: response.ContentLength ?? 0, etag: response.ETag ?? '', lastModified: response.LastModified ?? new Date(0) }
      } catch (err) {
        if (statusOf(err) === 404) return undefined
        throw err
      }
    })
    // A HEAD's 404 has no body to say whether the key or the bucket is missing; ask once.
    if (found !== undefined) this.bucketSeen = true
    else if (!this.bucketSeen) await this.checkBucket()
    return found
  }

  /** Every object whose key starts with `prefix`, in key order. */
  async list (prefix: string): Promise<ObjectInfo[]> {
    return sortByKey((await this.listPages(prefix)).objects)
  }

  /** Whether any object's key starts with `prefix` (one LIST of one key). */
  async any (prefix: string): Promise<boolean> {
    const page = await this.run('ListObjectsV2', 'listRequests', prefix, async attempt =>
      await this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, MaxKeys: 1 }), { abortSignal: attempt.signal }))
    return (page.KeyCount ?? page.Contents?.length ?? 0) > 0
  }

  /**
   * Every object under `prefix` (empty or ending with '/'), fast for an
   * ImageFolder: one delimited listing finds the first-level directories
   * (the classes) and the objects beside them, then each directory is
   * listed on its own, all in parallel. A flat listing is one request per
   * 1000 keys, one after another; this is the same count of requests, as
   * many at a time as `concurrency` allows.
   */
  async listTree (prefix: string): Promise<ObjectInfo[]> {
    const objects: ObjectInfo[] = []
    await this.listTreePages(prefix, page => { for (const object of page) objects.push(object) })
    return sortByKey(objects)
  }

  /**
   * `listTree` a page at a time, each handed to `onPage` as it arrives and
   * not kept: first the objects beside the directories, then each
   * directory's pages in key order (directories interleaved). A caller
   * that builds something smaller than the listing from it (a mount's tree
   * of a million objects) never holds the whole listing at once.
   */
  async listTreePages (prefix: string, onPage: (objects: ObjectInfo[]) => void): Promise<void> {
    const top = await this.listPages(prefix, '/')
    onPage(top.objects)
    await Promise.all(top.prefixes.map(async directory => await this.listPages(directory, undefined, onPage)))
  }

  async put (key: string, bytes: Buffer): Promise<WrittenObject> {
    return await this.run('PutObject', 'putRequests', key, async attempt => {
      const response = await this.client.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: bytes, ContentLength: bytes.length }), { abortSignal: attempt.signal })
      this.counters.bytesWritten += bytes.length
      return { etag: response.ETag ?? '', size: bytes.length }
    }, undefined, false)
  }

  /** A writer for an object of unknown size: multipart when it outgrows one part (see object-writer.ts). */
  createObjectWriter (key: string, options: ObjectWriterOptions = {}): ObjectWriter {
    return new MultipartObjectWriter(this.partTransport, key, options)
  }

  async delete (key: string): Promise<void> {
    await this.run('DeleteObject', 'deleteRequests', key, async attempt => {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }), { abortSignal: attempt.signal })
    })
  }

  /** Deletes every object under `prefix` and aborts the multipart uploads there. Resolves with the objects deleted. */
  async deletePrefix (prefix: string): Promise<number> {
    const keys = (await this.listPages(prefix)).objects.map(object => object.key)
    const batches: string[][] = []
    for (let i = 0; i < keys.length; i += DELETE_BATCH) batches.push(keys.slice(i, i + DELETE_BATCH))
    await Promise.all(batches.map(async batch => await this.run('DeleteObjects', 'deleteRequests', prefix, async attempt => {
      const response = await this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: batch.map(Key => ({ Key })), Quiet: true } }), { abortSignal: attempt.signal })
      const refused = response.Errors ?? []
      if (refused.length > 0) throw new StoreError('failed', `DeleteObjects ${s3Url(this.bucket, prefix)} failed for ${refused.length} keys (first: ${refused[0].Key ?? ''}: ${refused[0].Code ?? ''} ${refused[0].Message ?? ''})`)
    })))
    for (const upload of await this.listUploads(prefix)) await this.partTransport.abortUpload(upload.key, upload.uploadId)
    return keys.length
  }

  /** Multipart uploads begun under `prefix` and neither completed nor aborted. */
  async listUploads (prefix: string): Promise<PendingUpload[]> {
    const uploads: PendingUpload[] = []
    let keyMarker: string | undefined
    let uploadIdMarker: string | undefined
    for (;;) {
      const page = await this.run('ListMultipartUploads', 'listRequests', prefix, async attempt =>
        await this.client.send(new ListMultipartUploadsCommand({ Bucket: this.bucket, Prefix: prefix, KeyMarker: keyMarker, UploadIdMarker: uploadIdMarker }), { abortSignal: attempt.signal }))
      for (const upload of page.Uploads ?? []) uploads.push({ key: upload.Key ?? '', uploadId: upload.UploadId ?? '' })
      if (page.IsTruncated !== true) return uploads
      keyMarker = page.NextKeyMarker
      uploadIdMarker = page.NextUploadIdMarker
    }
  }

  stats (): StoreStats {
    return { ...this.counters, inFlight: this.inFlight }
  }

  async close (): Promise<void> {
    this.client.destroy()
    this.httpAgent.destroy()
    this.httpsAgent.destroy()
  }

  /** The writer's requests, each run as any other (retried, counted, bounded). */
  private readonly partTransport: PartTransport = {
    put: async (key, bytes) => await this.put(key, bytes),
    createUpload: async key => await this.run('CreateMultipartUpload', 'putRequests', key, async attempt => {
      const response = await this.client.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key }), { abortSignal: attempt.signal })
      if (response.UploadId === undefined) throw new StoreError('failed', `CreateMultipartUpload ${s3Url(this.bucket, key)} failed (the answer has no UploadId)`)
      return response.UploadId
    }),
    uploadPart: async (key, uploadId, partNumber, bytes, cancel) => await this.run('UploadPart', 'putRequests', key, async attempt => {
      const response = await this.client.send(new UploadPartCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId, PartNumber: partNumber, Body: bytes, ContentLength: bytes.length }), { abortSignal: attempt.signal })
      if (response.ETag === undefined) throw new StoreError('failed', `UploadPart ${s3Url(this.bucket, key)} failed (the answer has no ETag)`)
      this.counters.bytesWritten += bytes.length
      return response.ETag
    }, cancel, false),
    completeUpload: async (key, uploadId, etags, size) => {
      const etag = await this.run('CompleteMultipartUpload', 'putRequests', key, async attempt => {
        const response = await this.client.send(new CompleteMultipartUploadCommand({
          Bucket: this.bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: etags.map((ETag, i) => ({ ETag, PartNumber: i + 1 })) }
        }), { abortSignal: attempt.signal })
        return response.ETag ?? ''
      }, undefined, false)
      if (bareEtag(etag) !== '') return etag
      // Ceph RGW 16.2 answers with an empty ETag (its HEAD and GET give the right one), and a caller may
      // pin later reads to it (If-Match): ask the object, which must be the size just written.
      const head = await this.head(key)
      if (head === undefined || head.size !== size || bareEtag(head.etag) === '') {
        throw new StoreError('failed', `CompleteMultipartUpload ${s3Url(this.bucket, key)} failed (its answer has no ETag, and the object ${head === undefined ? 'is missing' : `has ${head.size} bytes, not the ${size} written${bareEtag(head.etag) === '' ? ', and no ETag' : ''}`})`)
      }
      return head.etag
    },
    abortUpload: async (key, uploadId) => await this.run('AbortMultipartUpload', 'putRequests', key, async attempt => {
      try {
        await this.client.send(new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }), { abortSignal: attempt.signal })
      } catch (err) {
        if (statusOf(err) !== 404) throw err // NoSuchUpload: already gone, which is what was asked
      }
    })
  }

  /** Fills `target` from `offset`, in parallel parts when it is larger than `partSize`. */
  private async readRanges (key: string, offset: number, target: RangeSink, pin: VersionPin, objectSize?: number): Promise<void> {
    if (target.length <= this.partSize) return await this.readRange(key, offset, target, pin, objectSize)
    const cancel = new AbortController()
    const parts: Array<Promise<void>> = []
    for (let start = 0; start < target.length; start += this.partSize) {
      const part = partOf(target, start, Math.min(this.partSize, target.length - start))
      parts.push(this.readRange(key, offset + start, part, pin, objectSize, cancel.signal).catch(err => {
        if (!cancel.signal.aborted) cancel.abort(err)
        throw err
      }))
    }
    // Every part settles before the call returns: no part writes into `target` afterwards.
    await Promise.allSettled(parts)
    if (cancel.signal.aborted) throw cancel.signal.reason
  }

  private async readRange (key: string, offset: number, target: RangeSink, pin: VersionPin, objectSize?: number, cancel?: AbortSignal): Promise<void> {
    const last = offset + target.length - 1
    await this.run('GetObject', 'getRequests', key, async attempt => {
      const response = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key, Range: `bytes=${offset}-${last}`, IfMatch: pin.etag }), { abortSignal: attempt.signal })
      const body = bodyOf(response, attempt)
      try {
        pin.check(response.ETag, () => this.changed(key, `its ETag is now ${response.ETag ?? 'missing'}, not ${pin.etag ?? ''}`))
        const size = objectSizeOf(response.ContentRange)
        if (objectSize !== undefined && size !== undefined && size !== objectSize) throw this.changed(key, `it has ${size} bytes, not ${objectSize}`)
        if (response.ContentLength !== target.length) {
          // The answer's own length (not a transfer cut short): retrying would get the same.
          if (size !== undefined) throw this.changed(key, `bytes ${offset}-${last} were asked, it has ${size} bytes`)
          throw new StoreError('failed', `GetObject ${s3Url(this.bucket, key)} failed (asked for bytes ${offset}-${last}, got an answer of ${response.ContentLength ?? 'unknown'} bytes without a Content-Range)`)
        }
        await readBody(body, target, attempt)
      } finally {
        // A body read to its end leaves its socket to the agent for the next request; any other is cut.
        if (!body.readableEnded) body.destroy()
      }
      this.counters.bytesRead += target.length
    }, cancel)
  }

  /** Every page of a listing, in key order: kept and returned, or each handed to `onPage` instead. */
  private async listPages (prefix: string, delimiter?: string, onPage?: (objects: ObjectInfo[]) => void): Promise<{ objects: ObjectInfo[], prefixes: string[] }> {
    const objects: ObjectInfo[] = []
    const prefixes: string[] = []
    let token: string | undefined
    const tokens = new Set<string>()
    const failed = (why: string): StoreError => new StoreError('failed', `ListObjectsV2 ${clip(s3Url(this.bucket, prefix))} failed (${why})`)
    do {
      const continuation = token
      const page = await this.run('ListObjectsV2', 'listRequests', prefix, async attempt => await this.listPage(prefix, delimiter, continuation, attempt))
      if (onPage !== undefined) onPage(page.objects)
      else for (const object of page.objects) objects.push(object)
      for (const common of page.prefixes) prefixes.push(common)
      token = page.next
      if (page.truncated && token === undefined) throw failed('a truncated page without a continuation token')
      // An endpoint that hands back a token it gave before would be listed for ever.
      if (token !== undefined && tokens.has(token)) throw failed('a continuation token it gave before: the listing repeats itself')
      if (token !== undefined) tokens.add(token)
    } while (token !== undefined)
    return { objects, prefixes }
  }

  /**
   * One ListObjectsV2 request, its answer read by listing-xml.ts rather
   * than the SDK's deserializer (which costs most of a large mount's CPU):
   * a step of the SDK's own middleware, just below its deserializer, takes
   * a successful answer's body, and leaves the deserializer an empty
   * listing to read. Errors reach the SDK as they came.
   */
  private async listPage (prefix: string, delimiter: string | undefined, token: string | undefined, attempt: Attempt): Promise<ListingPage> {
    // Keys URL-encoded where the endpoint honours it (and says so: listing-xml.ts): XML cannot carry every character a key may hold.
    const command = new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, Delimiter: delimiter, ContinuationToken: token, MaxKeys: this.listPageSize, EncodingType: 'url' })
    let page: ListingPage | undefined
    command.middlewareStack.add(next => async args => {
      const out = await next(args)
      const response = out.response as { statusCode?: number, body?: unknown }
      if (response.statusCode !== 200) return out
      const body = response.body as Readable
      attempt.watch(body)
      const xml = await readAll(body, attempt)
      try {
        page = parseListing(xml)
      } catch (err) {
        // A key it says is URL-encoded and is not: another try gets the same answer.
        if (err instanceof ListingError) throw new StoreError('failed', `ListObjectsV2 ${clip(s3Url(this.bucket, prefix))} failed (${err.message})`)
        throw err
      }
      if (page === undefined) throw new TransferFault('short-body', `listing cut short after ${xml.length} bytes`)
      response.body = Readable.from([EMPTY_LISTING])
      return out
    }, { step: 'deserialize', priority: 'low', name: 'redirfsListing' })
    await this.client.send(command, { abortSignal: attempt.signal })
    if (page === undefined) throw new StoreError('failed', `ListObjectsV2 ${clip(s3Url(this.bucket, prefix))} failed (an answer without a listing)`)
    return page
  }

  private async checkBucket (): Promise<void> {
    await this.run('HeadBucket', 'headRequests', '', async attempt => {
      try {
        await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }), { abortSignal: attempt.signal })
      } catch (err) {
        if (statusOf(err) !== 404) throw err
        throw new StoreError('no-bucket', storeErrorMessage({ transient: false, kind: 'no-bucket', reason: '404' }, await this.context('HeadBucket', '', 1)), { cause: err })
      }
    })
    this.bucketSeen = true
  }

  /**
   * Runs one request with retries: each attempt within the concurrency
   * bound, each transient failure followed by a jittered wait outside it.
   * `idleTimeout`: the attempt fails when nothing arrives for `timeoutMs`;
   * off for uploads, whose bytes go out while nothing comes in (the
   * socket's idle timer covers them). `cancel`: give up (a sibling part
   * failed); the sibling's error is the one reported.
   */
  private async run<T> (operation: string, counter: Counted, key: string, send: (attempt: Attempt) => Promise<T>, cancel?: AbortSignal, idleTimeout = true): Promise<T> {
    for (let attempts = 1; ; attempts++) {
      if (cancelled(cancel)) throw cancel?.reason
      let failure: unknown
      try {
        return await this.limit(async () => await this.attempt(counter, send, cancel, idleTimeout))
      } catch (err) {
        failure = err
      }
      if (cancelled(cancel)) throw cancel?.reason
      const verdict = judge(failure, this.answered)
      if (!verdict.transient || attempts > this.retries) {
        this.counters.failures++
        if (failure instanceof StoreError) throw failure
        throw new StoreError(verdict.kind, storeErrorMessage(verdict, await this.context(operation, key, attempts)), { cause: failure })
      }
      const delayMs = Math.round(Math.random() * Math.min(MAX_RETRY_DELAY_MS, this.retryDelayMs * 2 ** (attempts - 1)))
      this.counters.retries++
      this.onRetry?.({ operation, url: s3Url(this.bucket, key), attempt: attempts, delayMs, reason: verdict.reason })
      await sleep(delayMs, undefined, { signal: cancel }).catch(() => {})
    }
  }

  private async attempt<T> (counter: Counted, send: (attempt: Attempt) => Promise<T>, cancel: AbortSignal | undefined, idleTimeout: boolean): Promise<T> {
    if (cancelled(cancel)) throw cancel?.reason // cancelled while it waited for a slot: send nothing
    this.counters[counter]++
    this.inFlight++
    const watchdog = new Watchdog(idleTimeout ? this.timeoutMs : 0, cancel)
    try {
      const result = await send(watchdog)
      this.answered = true
      // Any success proves the bucket, except a HEAD's: its 404 is a success here, and says nothing of buckets.
      if (counter !== 'headRequests') this.bucketSeen = true
      return result
    } catch (err) {
      const verdict: Verdict | undefined = statusOf(err) !== undefined ? judge(err, true) : undefined
      if (verdict !== undefined) {
        this.answered = true
        if (verdict.code === 'NoSuchKey') this.bucketSeen = true
      }
      throw watchdog.explain(err)
    } finally {
      watchdog.stop()
      this.inFlight--
    }
  }

  private changed (key: string, reason: string): StoreError {
    return new StoreError('changed', storeErrorMessage({ transient: false, kind: 'changed', reason }, { operation: 'GetObject', bucket: this.bucket, key, endpoint: '', attempts: 1 }))
  }

  private async context (operation: string, key: string, attempts: number): Promise<{ operation: string, bucket: string, key: string, endpoint: string, attempts: number }> {
    return { operation, bucket: this.bucket, key, endpoint: await this.endpointName(), attempts }
  }

  /** The endpoint as the user configured it, for messages. */
  private async endpointName (): Promise<string> {
    if (this.endpoint !== undefined) return this.endpoint
    const config = this.client.config as { serviceConfiguredEndpoint?: () => Promise<string | undefined> }
    const configured = await config.serviceConfiguredEndpoint?.().catch(() => undefined)
    // AWS_ENDPOINT_URL, or a profile's endpoint_url: never a user and password of it in a message.
    if (configured !== undefined) return configured.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#]*@/i, '$1')
    const region = await this.client.config.region().catch(() => 'us-east-1')
    return `https://s3.${region}.amazonaws.com`
  }
}

/**
 * The idle timer of one attempt, and its way out: on timeout or when the
 * read is cancelled, the SDK's request is aborted and the body destroyed.
 */
class Watchdog implements Attempt {
  private readonly controller = new AbortController()
  readonly signal = this.controller.signal
  private readonly timer: NodeJS.Timeout | undefined
  private body: Readable | undefined
  private timedOut = false
  private readonly onCancel = (): void => { this.stopWith(this.cancel?.reason) }

  constructor (private readonly idleMs: number, private readonly cancel?: AbortSignal) {
    if (idleMs > 0) this.timer = setTimeout(() => { this.timedOut = true; this.stopWith(this.fault()) }, idleMs)
    cancel?.addEventListener('abort', this.onCancel, { once: true })
  }

  progress (): void {
    this.timer?.refresh()
  }

  watch (body: Readable): void {
    this.body = body
  }

  /** The error an attempt ended with, as the store judges it: a timeout if the timer fired. */
  explain (err: unknown): unknown {
    return this.timedOut ? this.fault() : err
  }

  stop (): void {
    clearTimeout(this.timer)
    this.cancel?.removeEventListener('abort', this.onCancel)
  }

  private fault (): TransferFault {
    // In seconds, as --s3-timeout is given.
    return new TransferFault('timeout', `no answer for ${this.idleMs / 1000} s`)
  }

  private stopWith (reason: unknown): void {
    this.controller.abort(reason)
    this.body?.destroy(reason instanceof Error ? reason : undefined)
  }
}

/** The one version of an object a read serves: the ETag asked for, or else the first one an answer has. */
class VersionPin {
  constructor (public etag?: string) {}

  check (etag: string | undefined, changed: () => StoreError): void {
    if (etag === undefined) return
    if (this.etag === undefined) this.etag = etag
    else if (bareEtag(etag) !== bareEtag(this.etag)) throw changed()
  }
}

/** What the SDK's deserializer reads in place of a listing listing-xml.ts has read. */
const EMPTY_LISTING = Buffer.from('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult></ListBucketResult>')

/** A whole body of unknown length; one that breaks off is a short body, as in readBody. */
async function readAll (body: Readable, attempt: Attempt): Promise<Buffer> {
  const chunks: Buffer[] = []
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      attempt.progress()
      chunks.push(chunk)
    }
  } catch (err) {
    if (attempt.signal.aborted) throw err
    throw new TransferFault('short-body', `body cut short: ${chunks.reduce((sum, chunk) => sum + chunk.length, 0)} bytes (${codeOf(err) ?? firstLine(String(err))})`)
  }
  return Buffer.concat(chunks)
}

/**
 * Streams a body into `target`, which it must fill exactly. A connection
 * that closes before the announced length surfaces from Node as a reset
 * ('aborted'); after the headers it is a short body, and said so.
 */
async function readBody (body: Readable, target: RangeSink, attempt: Attempt): Promise<void> {
  let filled = 0
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      attempt.progress()
      if (filled + chunk.length > target.length) throw new TransferFault('short-body', `body longer than its ${target.length} bytes`)
      target.write(filled, chunk)
      filled += chunk.length
    }
  } catch (err) {
    if (err instanceof TransferFault || attempt.signal.aborted) throw err
    throw new TransferFault('short-body', `body cut short: ${filled} of ${target.length} bytes (${codeOf(err) ?? firstLine(String(err))})`)
  }
  if (filled !== target.length) throw new TransferFault('short-body', `body cut short: ${filled} of ${target.length} bytes`)
}

function bodyOf (response: GetObjectCommandOutput, attempt: Attempt): Readable {
  const body = response.Body as Readable | undefined
  if (body === undefined) throw new StoreError('failed', 'GetObject answered without a body')
  attempt.watch(body)
  return body
}

/** The object's size from `Content-Range: bytes a-b/size`. */
function objectSizeOf (contentRange: string | undefined): number | undefined {
  const match = contentRange === undefined ? null : /\/(\d+)\s*$/.exec(contentRange)
  return match === null ? undefined : Number(match[1])
}

function checkRange (offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(length) || length < 0) throw new RangeError(`invalid range: ${length} bytes at ${offset}`)
}

function targetOf (length: number, into: Buffer | undefined): Buffer {
  if (into === undefined) return Buffer.allocUnsafe(length)
  if (into.length < length) throw new RangeError(`the target buffer has ${into.length} bytes, ${length} are to be read`)
  return into.subarray(0, length)
}

function cancelled (cancel: AbortSignal | undefined): boolean {
  return cancel?.aborted === true
}

function statusOf (err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode
}

/** An ETag without its quotes or weak marker, as servers differ in those. */
function bareEtag (etag: string): string {
  return etag.replace(/^W\//, '').replace(/"/g, '')
}

function whole (value: number, least: number, what: string): number {
  if (!Number.isSafeInteger(value) || value < least) throw new UsageError(`${what} must be a whole number of at least ${least}, got ${value}`)
  return value
}

/**
 * `--s3-endpoint` as the store uses it. One holding a user and password is
 * refused, so they never reach a message or a log; credentials come from
 * AWS's chain.
 */
export function checkEndpoint (endpoint: string): string {
  if (endpoint.includes('@')) {
    throw new UsageError('--s3-endpoint must not hold a user name or password (user:password@host): give S3 credentials by AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY')
  }
  let url: URL | undefined
  try { url = new URL(endpoint) } catch {}
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') {
    throw new UsageError(`--s3-endpoint must be a URL like http://127.0.0.1:9000 or https://s3.example.com, got '${endpoint}'`)
  }
  return endpoint.replace(/\/+$/, '')
}

const SILENT = { trace () {}, debug () {}, info () {}, warn () {}, error () {} }
