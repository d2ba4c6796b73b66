/**
 * Taking over a dead home's VCs (shared storage), as pure functions.
 *
 * Who: each VC of the dead node goes to a successor, the first live node
 * in a per-VC rotation of the others, so the dead node's load spreads; if
 * that node dies too, the next one in the rotation takes the VC over.
 *
 * With what: the new owner must know which files of the VC's current epoch
 * some trainer already got, or it would serve them again in that epoch.
 * Survivors report what they received and still hold. What went to dead
 * nodes (the dead home's own trainer, or a node that died earlier) only the
 * dead home knew, so every home keeps a *standby copy* at the next node of
 * each VC's owner order, refreshed a few times a second: the VC's epoch and
 * every file it answered an open with, and whose open. The new owner takes
 * the newest epoch anyone knows and counts as consumed: what each survivor
 * received in it, what survivors hold (those go on its ledger), and the
 * standby copy's files whose opens came from nodes now dead. A file sent to
 * a live node is counted only on that node's word: an answer lost on the
 * way must stay loadable for the open that will ask again. A file that
 * went into a mirror in a batch (shipped in the epoch, or carried into it
 * while held there: the holder's trainer gets it in this epoch) counts
 * when its holder says it served it from that batch: a holder that hears
 * of the new epoch only later, or not at all, still says so, and a batch
 * lost on its way, or a file given back in a lost answer, was never served
 * from it. Everything else may be served again: it died in the dead node's memory, or went out after
 * the last refresh to a node that is dead now; no one alive got it. A
 * survivor that dies after it reported (or is fenced and comes back as a
 * new incarnation, its mirrors dropped) holds nothing any more: its held
 * files may be served again, or the new owner's ledger would wait for them
 * for good ("in transit" to a mirror that restarted at batch 0).
 */
import type { FileId, Layout, NodeId, VcId } from './layout'

/** Who answers for `vc`, in order: its home, then the others in a per-VC rotation. */
export function ownerOrder (layout: Layout, vc: VcId): NodeId[] {
  const { nodes } = layout
  const home = layout.vcs[vc].home
  const order = [home]
  for (let step = 0; step < nodes - 1; step++) order.push(((home + 1 + ((vc + step) % (nodes - 1))) % nodes) as NodeId)
  return order
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
  /**
   * The batch each held file came in, in the order of `held`. The new
   * owner's ledger must name each file by it: the holder's notice that it
   * served one, or its word that it gave one back in an answer that was
   * lost, names the file's own batch, and an entry under another number
   * would match neither (a file given back and lost then stays "held" for
   * good, and its slot's opens find nothing to load: the VC ends its epoch
   * early and serves the next one's files in this one).
   */
  readonly heldBatches: readonly number[]
  /**
   * Every file its trainer got from its mirror of the VC, with the batch
   * it had come in, whatever the epoch then: the standby copy names the
   * files carried into an epoch by their batch.
   */
  readonly servedFromMirror: readonly Shipment[]
  /**
   * It died, or came back as another incarnation, after it reported: what
   * it held died in its memory (its trainer never got it), what else it
   * received stays consumed.
   */
  readonly gone?: boolean
}

/** A file that went into a mirror, and the batch it went in. */
export interface Shipment { readonly file: FileId, readonly batch: number }

/** A file a home sent out: to which node, and in which batch when into its mirror (0: an answer to an open). */
export interface StandbyEntry { readonly file: FileId, readonly node: NodeId, readonly batch: number }

export interface StandbyCopy {
  readonly epoch: number
  /** Files the home sent out in that epoch (answers and batches, and files carried into it in mirrors). */
  readonly served: readonly StandbyEntry[]
}

export interface Adoption {
  readonly epoch: number
  readonly consumed: FileId[]
  /** Files held in other survivors' mirrors (the new owner's ledger). */
  readonly heldElsewhere: { file: FileId, node: NodeId, batch: number }[]
  /** Files the new owner's own trainer got in that epoch (they go into its own standby copy). */
  readonly servedHere: FileId[]
  /**
   * The standby copy's entries counted as consumed: the new owner's own
   * standby copy names them again, so that a second takeover in the epoch
   * counts them too.
   */
  readonly standbyKept: readonly StandbyEntry[]
  /**
   * The last batch of the VC any survivor received, numbered by the dead
   * owner. The new owner's batches must number after it: a requester whose
   * answer from the new owner is lost on its way asks again with this
   * number, and an answer numbered below it would pass for one received.
   */
  readonly lastBatch: number
}

/** Merges the standby copy and the survivors' reports; `self` is the new owner. */
export function planAdoption (reports: readonly SurvivorReport[], standby: StandbyCopy | undefined, self: NodeId, isDead: (node: NodeId) => boolean): Adoption {
  const epoch = Math.max(standby?.epoch ?? 0, ...reports.map(r => r.epoch))
  const shipmentKey = (node: NodeId, { file, batch }: Shipment): string => `${node}:${file}:${batch}`
  const servedFromMirrors = new Set(reports.flatMap(r => r.servedFromMirror.map(shipment => shipmentKey(r.node, shipment))))
  const servedFromMirror = (entry: StandbyEntry): boolean => entry.batch > 0 && servedFromMirrors.has(shipmentKey(entry.node, entry))
  // A survivor gone since it reported held these when it went: they died in its memory, unserved.
  const diedHeld = new Set(reports.filter(r => r.gone === true).flatMap(r => r.held.map((file, i) => shipmentKey(r.node, { file, batch: r.heldBatches[i] }))))
  const counts = (entry: StandbyEntry): boolean => servedFromMirror(entry) || (isDead(entry.node) && !(entry.batch > 0 && diedHeld.has(shipmentKey(entry.node, entry))))
  const fromStandby = standby?.epoch === epoch ? standby.served.filter(counts) : []
  const consumed = new Set<FileId>(fromStandby.map(entry => entry.file))
  for (const report of reports) {
    if (report.epoch !== epoch) continue
    for (const file of report.received) if (report.gone !== true || !report.held.includes(file)) consumed.add(file)
  }
  const heldElsewhere = reports.filter(r => r.node !== self && r.gone !== true).flatMap(r => r.held.map((file, i) => ({ file, node: r.node, batch: r.heldBatches[i] })))
  const own = reports.find(r => r.node === self)
  const servedHere = own === undefined || own.epoch !== epoch ? [] : own.received.filter(file => !own.held.includes(file))
  const lastBatch = Math.max(0, ...reports.map(r => r.lastBatch))
  return { epoch, consumed: [...consumed], heldElsewhere, servedHere, standbyKept: fromStandby, lastBatch }
}
