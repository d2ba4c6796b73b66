/**
 * Ranged GETs sent without the SDK's command pipeline.
 *
 * For every request the SDK runs its endpoint rules, its serializers, a
 * middleware stack built anew, and the signer: about 2.5 ms of CPU per GET
 * on the machines we measure on (bench/results/s3-cost-sdk-gets), a third of a core
 * at the rate a mount reads a bucket. A store's GETs all take one route:
 * the same scheme, host and port, the same path before the key, the same
 * signing region. So once the SDK has sent a GET that succeeded, the route
 * it took is learned from that request, and the store's next GETs are
 * signed with the SDK's own SigV4 signer (@smithy/signature-v4), with its
 * credentials and clock offset, and sent on the store's own agents.
 *
 * The SDK stays the authority on the route. An answer other than a success
 * or a plain error (a redirect, a 400 or a 403: another region, a skewed
 * clock, credentials to refresh) is not judged here: the request goes back
 * to the SDK, which knows those cases, and the route is learned again from
 * its next success. A request the route cannot be read from (a signer
 * other than SigV4, a path that does not end in the key as the SDK encodes
 * it) teaches nothing, and the SDK sends every GET as before.
 */
import http, { type IncomingMessage } from 'node:http'
import https from 'node:https'
import { extendedEncodeURIComponent, HttpRequest } from '@smithy/core/protocols'
import { SignatureV4 } from '@smithy/signature-v4'
import type { S3Client } from '@aws-sdk/client-s3'

/** Where a store's GETs go and how they are signed, as read from one the SDK sent. */
export interface Route {
  readonly protocol: 'http:' | 'https:'
  readonly hostname: string
  readonly port?: number
  /** The Host header, as signed. */
  readonly host: string
  /** The path before the key: '/' for a bucket in the host name, '/bucket/' in path style. */
  readonly pathPrefix: string
  /** The query the SDK adds to a GetObject (`x-id=GetObject`). */
  readonly query: Record<string, string>
  /** The payload hash header's value: a GET has no body. */
  readonly payloadHash: string
  readonly region: string
  readonly service: string
}

/** The parts of an HTTP request the route is read from. */
export interface SentRequest {
  readonly protocol?: string
  readonly hostname?: string
  readonly port?: number
  readonly path?: string
  readonly query?: Record<string, string | string[] | null>
  readonly headers: Record<string, string>
}

/** A GET's answer: the fields the store reads, named as the SDK names them. */
export interface GetAnswer {
  readonly ETag?: string
  readonly ContentRange?: string
  readonly ContentLength?: number
  readonly Body: IncomingMessage
}

/** An S3 error answer, shaped as the SDK's service errors are, so the store judges both alike. */
export interface ServiceError extends Error {
  readonly Code?: string
  readonly $metadata: { readonly httpStatusCode: number }
}

const CREDENTIAL_SCOPE = /^AWS4-HMAC-SHA256 Credential=[^/]+\/\d{8}\/([^/]+)\/([^/]+)\/aws4_request,/
/** The most of an error answer's body read to find its code: S3's are a few hundred bytes. */
const ERROR_BODY_LIMIT = 64 * 1024

/** The key as the SDK puts it in a path: each segment encoded, the slashes kept. */
export function keyPath (key: string): string {
  return key.split('/').map(extendedEncodeURIComponent).join('/')
}

/** The route of a GetObject the SDK sent for `key`, or undefined when it cannot be read from it. */
export function learnRoute (request: SentRequest, key: string): Route | undefined {
  const scope = CREDENTIAL_SCOPE.exec(request.headers.authorization ?? '')
  const path = request.path ?? ''
  const encodedKey = keyPath(key)
  const payloadHash = request.headers['x-amz-content-sha256']
  const host = request.headers.host
  if (scope === null || host === undefined || payloadHash === undefined || !path.endsWith(`/${encodedKey}`)) return undefined
  if (request.protocol !== 'http:' && request.protocol !== 'https:') return undefined
  if (request.hostname === undefined || request.hostname === '') return undefined
  const query: Record<string, string> = {}
  for (const [name, value] of Object.entries(request.query ?? {})) {
    // Only the SDK's own marker; anything else belonged to that one request.
    if (name === 'x-id' && typeof value === 'string') query[name] = value
  }
  return {
    protocol: request.protocol,
    hostname: request.hostname,
    port: request.port,
    host,
    pathPrefix: path.slice(0, path.length - encodedKey.length),
    query,
    payloadHash,
    region: scope[1],
    service: scope[2]
  }
}

export interface DirectGetOptions {
  readonly route: Route
  /** The SDK's credentials: cached, and refreshed before they expire. */
  readonly credentials: S3Client['config']['credentials']
  /** The SDK's hash, for the signer. */
  readonly sha256: S3Client['config']['sha256']
  /** The SDK's correction of this machine's clock, in ms, read at each signing. */
  readonly clockOffsetMs: () => number
  readonly httpAgent: http.Agent
  readonly httpsAgent: https.Agent
}

/** Sends ranged GETs on a learned route. */
export class DirectGet {
  readonly route: Route
  private readonly signer: SignatureV4
  private readonly query: string

  constructor (private readonly options: DirectGetOptions) {
    this.route = options.route
    // As the SDK signs for S3: the path as it is, not escaped again.
    this.signer = new SignatureV4({ credentials: options.credentials, region: this.route.region, service: this.route.service, sha256: options.sha256, uriEscapePath: false, applyChecksum: false })
    this.query = new URLSearchParams(this.route.query).toString()
  }

  /**
   * One GET of `range` (`bytes=a-b`), pinned to `ifMatch` when given.
   * Resolves with a success's answer (its body unread), or undefined when
   * the answer is one for the SDK to handle; rejects with a `ServiceError`
   * for an error answer, or with the connection's own error.
   */
  async get (key: string, range: string, ifMatch: string | undefined, signal: AbortSignal): Promise<GetAnswer | undefined> {
    const route = this.route
    const headers: Record<string, string> = { host: route.host, range, 'x-amz-content-sha256': route.payloadHash }
    if (ifMatch !== undefined) headers['if-match'] = ifMatch
    const path = route.pathPrefix + keyPath(key)
    const unsigned = new HttpRequest({ method: 'GET', protocol: route.protocol, hostname: route.hostname, port: route.port, path, query: route.query, headers })
    const signed = await this.signer.sign(unsigned, { signingDate: new Date(Date.now() + this.options.clockOffsetMs()) })
    const response = await send(route.protocol === 'https:' ? https : http, {
      agent: route.protocol === 'https:' ? this.options.httpsAgent : this.options.httpAgent,
      method: 'GET',
      hostname: route.hostname,
      port: route.port,
      path: this.query === '' ? path : `${path}?${this.query}`,
      headers: signed.headers,
      signal
    })
    const status = response.statusCode ?? 0
    if (status >= 200 && status < 300) {
      return { ETag: header(response, 'etag'), ContentRange: header(response, 'content-range'), ContentLength: contentLength(response), Body: response }
    }
    if ((status >= 300 && status < 400) || status === 400 || status === 403) {
      response.destroy()
      return undefined
    }
    throw await serviceError(response, status)
  }
}

async function send (transport: typeof http | typeof https, options: http.RequestOptions): Promise<IncomingMessage> {
  return await new Promise((resolve, reject) => {
    const request = transport.request(options, resolve)
    request.once('error', reject)
    request.end()
  })
}

/** An error answer as the SDK would throw it: its S3 code (NoSuchKey, SlowDown, …) as name and Code. */
async function serviceError (response: IncomingMessage, status: number): Promise<ServiceError> {
  let text = ''
  try {
    for await (const piece of response as AsyncIterable<Buffer>) {
      text += piece.toString('utf8')
      if (text.length > ERROR_BODY_LIMIT) break
    }
  } catch {
    // A body that breaks off still leaves the status to judge by.
  } finally {
    if (!response.readableEnded) response.destroy()
  }
  const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1]
  const message = /<Message>([^<]*)<\/Message>/.exec(text)?.[1]
  const error = new Error(message ?? code ?? `${status}`) as Error & { Code?: string, $metadata: { httpStatusCode: number } }
  error.name = code ?? `${status}`
  error.Code = code
  error.$metadata = { httpStatusCode: status }
  return error
}

function header (response: IncomingMessage, name: string): string | undefined {
  const value = response.headers[name]
  return Array.isArray(value) ? value[0] : value
}

function contentLength (response: IncomingMessage): number | undefined {
  const value = header(response, 'content-length')
  return value === undefined || !/^\d+$/.test(value) ? undefined : Number(value)
}
