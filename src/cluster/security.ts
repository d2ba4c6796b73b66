/**
 * What makes a peer a member: the cluster token, carried by every call and
 * compared in constant time, and optionally mutual TLS (each node presents
 * a certificate signed by the cluster's CA and checks the other's).
 */
import { promises as fs, type Stats } from 'node:fs'
import { timingSafeEqual, createHash } from 'node:crypto'
import * as grpc from '@grpc/grpc-js'
import { UsageError } from '../errors'

export const TOKEN_METADATA = 'x-redirfs-token'

export interface TlsFiles { cert: string, key: string, ca: string }

/**
 * A secret file (the cluster token, the TLS key) is refused, as ssh refuses
 * a private key, when others could read or change it: anyone who can read
 * the token can read every sample the cluster serves.
 */
function checkSecretFile (file: string, what: string, stat: Stats): void {
  const me = process.getuid?.() ?? 0
  if (stat.uid !== me && stat.uid !== 0) throw new UsageError(`${what} ${file} belongs to uid ${stat.uid}, not to you or root: anyone who can change it can join the cluster; use a file of your own`)
  if ((stat.mode & 0o077) !== 0) throw new UsageError(`${what} ${file} can be read by other users (mode ${(stat.mode & 0o777).toString(8)}): it is a secret; run: chmod 600 ${file}`)
}

export async function readToken (file: string): Promise<string> {
  let stat: Stats
  let text: string
  try {
    stat = await fs.stat(file)
    text = await fs.readFile(file, 'utf8')
  } catch (err) {
    throw new UsageError(`cannot read --token-file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
  checkSecretFile(file, '--token-file', stat)
  const token = text.trim()
  if (token.length < 16) throw new UsageError(`--token-file ${file} must hold a token of at least 16 characters (e.g. openssl rand -hex 32 > ${file})`)
  return token
}

/** Constant-time comparison of a presented token with ours. */
export function tokenMatches (presented: unknown, token: string): boolean {
  if (typeof presented !== 'string') return false
  // Hash both so lengths match and timing says nothing about the token.
  const digest = (text: string): Buffer => createHash('sha256').update(text).digest()
  return timingSafeEqual(digest(presented), digest(token))
}

async function readPem (file: string, what: string): Promise<Buffer> {
  try {
    return await fs.readFile(file)
  } catch (err) {
    throw new UsageError(`cannot read ${what} ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`)
  }
}

export interface Credentials {
  readonly server: grpc.ServerCredentials
  readonly client: grpc.ChannelCredentials
  readonly tls: boolean
  /** The TLS files' contents, for the data channel (which is not gRPC); absent without TLS. */
  readonly pem?: { readonly cert: Buffer, readonly key: Buffer, readonly ca: Buffer }
}

export async function loadCredentials (tls: Partial<TlsFiles>): Promise<Credentials> {
  const given = [tls.cert, tls.key, tls.ca].filter(value => value !== undefined).length
  if (given === 0) return { server: grpc.ServerCredentials.createInsecure(), client: grpc.credentials.createInsecure(), tls: false }
  if (given !== 3) throw new UsageError('TLS needs all three of --tls-cert, --tls-key and --tls-ca')
  const [cert, key, ca] = await Promise.all([readPem(tls.cert!, '--tls-cert'), readPem(tls.key!, '--tls-key'), readPem(tls.ca!, '--tls-ca')])
  checkSecretFile(tls.key!, '--tls-key', await fs.stat(tls.key!))
  try {
    return {
      server: grpc.ServerCredentials.createSsl(ca, [{ cert_chain: cert, private_key: key }], true),
      client: grpc.credentials.createSsl(ca, key, cert),
      tls: true,
      pem: { cert, key, ca }
    }
  } catch (err) {
    throw new UsageError(`cannot use the TLS files: ${(err as Error).message}`)
  }
}
