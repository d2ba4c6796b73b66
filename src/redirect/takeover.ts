/**
 * Taking over a dead home's VCs (shared storage), as pure functions.
 *
 * Who: each VC of the dead node goes to a successor, the first live node
 * in a per-VC rotation of the others, so the dead node's load spreads.
 *
 * With what: the new owner must know which files of the VC's current epoch
 * some trainer already got, or it would serve them again in that epoch.
 * Survivors report what they received and still hold; what the dead node's
 * own trainer got only the dead node knew, so every home keeps a *standby
 * copy* of that (and of its VC epochs) at each VC's successor, refreshed a
 * few times a second. The new owner takes the newest epoch anyone knows and
 * counts as consumed: the standby copy if it is of that epoch, what each
 * survivor received in it, and what survivors hold (those go on its ledger).
 * Everything else may be served again: it died in the dead node's memory,
 * was lost on the way, or went to its trainer after the last refresh; none
 * of that is a duplicate to anyone alive.
 */
import type { FileId, Layout, NodeId, VcId } from './layout'

export function successorOf (layout: Layout, vc: VcId, isDead: (node: NodeId) => boolean): NodeId | undefined {
  const { nodes } = layout
  const home = layout.vcs[vc].home
  for (let step = 0; step < nodes - 1; step++) {
    const candidate = (home + 1 + ((vc + step) % (nodes - 1))) % nodes
    if (!isDead(candidate)) return candidate
  }
  return undefined
}

/** What one survivor knows of a dead home's VC. */
export interface SurvivorReport {
  readonly node: NodeId
  /** The VC's epoch as this survivor last heard it, and the files it received in it. */
  readonly epoch: number
  readonly received: readonly FileId[]
  /** Files it still holds in its mirror, and the last batch it received. */
  readonly held: readonly FileId[]
  readonly lastBatch: number
}

export interface StandbyCopy {
  readonly epoch: number
  /** Files the home's own trainer got in that epoch. */
  readonly servedHere: readonly FileId[]
}

export interface Adoption {
  readonly epoch: number
  readonly consumed: FileId[]
  /** Files held in other survivors' mirrors (the new owner's ledger). */
  readonly heldElsewhere: { file: FileId, node: NodeId, batch: number }[]
}

/** Merges the standby copy and the survivors' reports; `self` is the new owner. */
export function planAdoption (reports: readonly SurvivorReport[], standby: StandbyCopy | undefined, self: NodeId): Adoption {
  const epoch = Math.max(standby?.epoch ?? 0, ...reports.map(r => r.epoch))
  const consumed = new Set<FileId>(standby?.epoch === epoch ? standby.servedHere : [])
  for (const report of reports) if (report.epoch === epoch) for (const file of report.received) consumed.add(file)
  const heldElsewhere = reports.filter(r => r.node !== self).flatMap(r => r.held.map(file => ({ file, node: r.node, batch: r.lastBatch })))
  return { epoch, consumed: [...consumed], heldElsewhere }
}
