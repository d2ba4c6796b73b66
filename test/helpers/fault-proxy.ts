// An HTTP proxy of the tests' own in front of the S3 server, that forwards
// every request and, when told, breaks the next few that match in one of
// the ways networks and S3 break: a 503 SlowDown or 500 InternalError
// answer, a connection reset before any answer, no answer at all, an
// answer whose body stops halfway and hangs, or one whose body is cut
// short (the real Content-Length, half the bytes, then the connection
// closed). It can also hold requests until the test releases them, which
// makes "these requests were all in flight at once" a fact to check rather
// than a race. It counts requests by kind, faulted ones included.
//
// Signing. The client is given the proxy's address as its endpoint, so it
// signs `Host: 127.0.0.1:<proxy port>`, and the proxy forwards the Host
// header unchanged: the server checks the signature against the Host it
// received, the one that was signed, and accepts it (moto with
// authentication on, test/s3/fault-proxy.test.ts). Rewriting Host to the
// server's own address (`rewriteHost`) breaks the signature: moto answers
// 403 SignatureDoesNotMatch, which the same test shows.
import http from 'node:http'
import type net from 'node:net'

interface Teardown { teardown: (fn: () => Promise<void> | void) => void }

export type Fault = 'slow-down' | 'internal-error' | 'reset' | 'stall' | 'stall-body' | 'short-body' | 'hold'
export type RequestKind = 'get' | 'head' | 'list' | 'put' | 'post' | 'delete'

export interface ProxiedRequest {
  readonly method: string
  readonly kind: RequestKind
  readonly bucket: string
  /** Decoded, '' for the bucket itself. */
  readonly key: string
  readonly query: URLSearchParams
  readonly range?: string
  readonly headers: http.IncomingHttpHeaders
}

export interface FaultProxy {
  readonly endpoint: string
  /** The next `times` (default 1) requests that `match` (default: all) get `fault`. */
  inject: (fault: Fault, options?: { times?: number, match?: (request: ProxiedRequest) => boolean }) => void
  /** Requests received, by kind. */
  readonly requests: Record<RequestKind, number>
  /** Every request received, in order. */
  readonly log: ProxiedRequest[]
  /** Faults dealt, by fault. */
  readonly injected: Record<Fault, number>
  /** Faults told and not dealt yet. */
  pending: () => number
  /** Requests held now (fault 'hold'); one whose client went away is dropped. */
  held: () => number
  /** Forwards the held requests. */
  release: () => void
  stop: () => Promise<void>
}

interface Rule { readonly fault: Fault, times: number, readonly match: (request: ProxiedRequest) => boolean }

const ERRORS: Partial<Record<Fault, { status: number, code: string, message: string }>> = {
  'slow-down': { status: 503, code: 'SlowDown', message: 'Please reduce your request rate.' },
  'internal-error': { status: 500, code: 'InternalError', message: 'We encountered an internal error. Please try again.' }
}

export async function startFaultProxy (t: Teardown, target: string, options: { rewriteHost?: boolean } = {}): Promise<FaultProxy> {
  const upstream = new URL(target)
  const agent = new http.Agent({ keepAlive: true })
  const rules: Rule[] = []
  const requests: Record<RequestKind, number> = { get: 0, head: 0, list: 0, put: 0, post: 0, delete: 0 }
  const injected: Record<Fault, number> = { 'slow-down': 0, 'internal-error': 0, reset: 0, stall: 0, 'stall-body': 0, 'short-body': 0, hold: 0 }
  let held: Array<() => void> = []
  const log: ProxiedRequest[] = []

  const server = http.createServer((request, response) => {
    const facts = describe(request)
    log.push(facts)
    requests[facts.kind]++
    const rule = rules.find(candidate => candidate.times > 0 && candidate.match(facts))
    if (rule !== undefined) {
      rule.times--
      injected[rule.fault]++
    }
    const fault = rule?.fault
    if (fault === 'reset') {
      request.socket.resetAndDestroy()
      return
    }
    if (fault === 'hold') {
      const release = (): void => forward(request, response, undefined)
      held.push(release)
      // A held request whose client went away is dropped, never forwarded: a killed client's request never reaches the server.
      request.socket.once('close', () => { held = held.filter(waiting => waiting !== release) })
      return
    }
    if (fault === 'stall') {
      request.resume() // take the body, answer nothing, until the client gives up or the proxy stops
      return
    }
    const error = fault === undefined ? undefined : ERRORS[fault]
    if (error !== undefined) {
      request.resume()
      request.once('end', () => {
        const xml = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${error.code}</Code><Message>${error.message}</Message><RequestId>fault-proxy</RequestId></Error>`
        response.writeHead(error.status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(xml) })
        response.end(request.method === 'HEAD' ? undefined : xml)
      })
      return
    }
    forward(request, response, fault)
  })

  function forward (request: http.IncomingMessage, response: http.ServerResponse, fault: Fault | undefined): void {
    const headers = { ...request.headers }
    if (options.rewriteHost === true) headers.host = upstream.host
    const outgoing = http.request({ host: upstream.hostname, port: upstream.port, method: request.method, path: request.url, headers, agent }, answer => {
      if (fault === undefined) {
        response.writeHead(answer.statusCode ?? 502, answer.headers)
        answer.pipe(response)
        return
      }
      const chunks: Buffer[] = []
      answer.on('data', (chunk: Buffer) => chunks.push(chunk))
      answer.on('end', () => {
        const body = Buffer.concat(chunks)
        response.writeHead(answer.statusCode ?? 502, answer.headers)
        response.write(body.subarray(0, Math.floor(body.length / 2)), () => {
          if (fault === 'short-body') response.socket?.destroy()
          // 'stall-body': nothing more, until the client gives up or the proxy stops.
        })
      })
    })
    outgoing.on('error', () => response.socket?.destroy())
    request.pipe(outgoing)
  }

  const sockets = new Set<net.Socket>()
  server.on('connection', socket => {
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo

  let stopping: Promise<void> | undefined
  const stop = async (): Promise<void> => {
    stopping ??= new Promise<void>(resolve => {
      server.close(() => resolve())
      for (const socket of sockets) socket.destroy()
      agent.destroy()
    })
    await stopping
  }
  t.teardown(stop)

  return {
    endpoint: `http://127.0.0.1:${port}`,
    inject: (fault, { times = 1, match = () => true } = {}) => { rules.push({ fault, times, match }) },
    requests,
    log,
    injected,
    pending: () => rules.reduce((sum, rule) => sum + rule.times, 0),
    held: () => held.length,
    release: () => {
      const waiting = held
      held = []
      for (const go of waiting) go()
    },
    stop
  }
}

/** What a path-style S3 request is: /<bucket>/<key>?<query>. */
function describe (request: http.IncomingMessage): ProxiedRequest {
  const url = new URL(request.url ?? '/', 'http://proxy')
  const [, bucket = '', ...rest] = url.pathname.split('/')
  const key = decodeURIComponent(rest.join('/'))
  const method = request.method ?? 'GET'
  const query = url.searchParams
  const range = request.headers.range
  let kind: RequestKind
  switch (method) {
    case 'HEAD': kind = 'head'; break
    case 'PUT': kind = 'put'; break
    case 'POST': kind = 'post'; break
    case 'DELETE': kind = 'delete'; break
    default: kind = key === '' || query.has('list-type') || query.has('uploads') || query.has('uploadId') ? 'list' : 'get'
  }
  return { method, kind, bucket: decodeURIComponent(bucket), key, query, range, headers: request.headers }
}
