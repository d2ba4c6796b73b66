/**
 * Generations: a cluster's agreement on when a training run began
 * (docs/design.md, "Runs").
 *
 * On one node a new run starts a new epoch by itself (src/runs). A cluster
 * must start it everywhere and agree on when: a node whose trainer already
 * reads the new run's epoch must never have a peer reset it, or answer it
 * from the old one. So a new run begins a *generation*, numbered, and named
 * by the run's key; every node that learns of a later generation (a
 * broadcast, or any request or answer that carries one) starts it, resetting
 * its epoch state, mirrors and ledgers, and drops whatever it is handed from
 * an earlier one. Two nodes that begin the same run at once both name
 * generation n + 1 after the run: the same generation, started once.
 *
 * When a node's trainer begins a run: a run named by its launcher (global)
 * begins a generation unless the cluster is in that run's already; a run
 * only this node can name (a trainer process) begins one only if this
 * node's trainer has already read in the current generation (the last run
 * here ended), else it joins the one it finds. Without a launcher's name,
 * ranks that start at quite different times can reset each other's first
 * reads: the README says to set REDIRFS_RUN_ID for such jobs.
 *
 * A node that comes back after it died joins the generation its peers are
 * in, and takes its virtual chunks back at the next one, when every node
 * starts afresh (membership.ts).
 */
import * as grpc from '@grpc/grpc-js'
import { PeerRefusal } from './call-error'

export interface GenerationId {
  readonly number: number
  readonly key: string
}

export const FIRST_GENERATION: GenerationId = { number: 0, key: '' }

/** Which generation is later: by number, then by key (so two nodes that begin different runs at once agree). */
export function compareGenerations (a: GenerationId, b: GenerationId): number {
  if (a.number !== b.number) return a.number - b.number
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0
}

/** A generation as a message carries it (absent: the first). */
export function generationOf (message: { generation?: { number?: number, key?: string } | null }): GenerationId {
  return { number: Number(message.generation?.number ?? 0), key: message.generation?.key ?? '' }
}

const REFUSAL = /^generation (\d+) (.*)$/s

/** The refusal of a call from an earlier generation: its details name this node's. */
export function staleGeneration (mine: GenerationId): PeerRefusal {
  return new PeerRefusal(grpc.status.ABORTED, `generation ${mine.number} ${mine.key}`)
}

/** The generation a refusal names, if it is one of those. */
export function refusedFor (err: { status?: number, details?: string }): GenerationId | undefined {
  if (err.status !== grpc.status.ABORTED) return undefined
  const match = REFUSAL.exec(err.details ?? '')
  return match === null ? undefined : { number: Number(match[1]), key: match[2] }
}

export const describeGeneration = (g: GenerationId): string => g.number === 0 && g.key === '' ? 'the first generation' : `generation ${g.number} (${g.key})`
