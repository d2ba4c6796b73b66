/**
 * Peer addresses as users write them: `host:port`, `[v6]:port`. `--peers`
 * lists every node in node-id order, this node's own included, so every
 * node gets the same list; a node listens on its own entry unless
 * `--listen` says otherwise. Nothing listens on a wildcard address unless
 * `--listen` asks for it: a peer entry must be an address others can reach.
 */
import { UsageError } from '../errors'

export interface PeerAddress {
  readonly host: string
  readonly port: number
  /** As given, for messages and for gRPC targets. */
  readonly text: string
}

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]', '*', ''])

export function parseAddress (text: string, what: string): PeerAddress {
  const trimmed = text.trim()
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]*):(\d{1,5})$/.exec(trimmed)
  if (match === null) throw new UsageError(`${what} '${text}' is not an address like host:port or [::1]:port`)
  const port = Number(match[2])
  if (port < 1 || port > 65535) throw new UsageError(`${what} '${text}': port must be from 1 to 65535`)
  return { host: match[1], port, text: trimmed }
}

function isWildcard (address: PeerAddress): boolean { return WILDCARDS.has(address.host) }

export function parsePeers (text: string): PeerAddress[] {
  const peers = text.split(',').map(item => item.trim()).filter(Boolean).map((item, i) => parseAddress(item, `--peers entry ${i}`))
  if (peers.length < 2) throw new UsageError('--peers must list every node of the cluster (at least two), in node-id order, this node included')
  peers.forEach((peer, i) => {
    if (isWildcard(peer)) throw new UsageError(`--peers entry ${i} '${peer.text}' is a wildcard address; list addresses the other nodes can reach (use --listen to listen on all interfaces)`)
    const first = peers.findIndex(other => other.text === peer.text)
    if (first !== i) throw new UsageError(`--peers lists ${peer.text} twice (entries ${first} and ${i})`)
  })
  return peers
}
