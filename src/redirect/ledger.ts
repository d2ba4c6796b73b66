/**
 * The home's ledger of files it shipped into other nodes' mirrors.
 *
 * A file shipped in a prefetch batch is consumed at its home, but only the
 * node that holds it can serve it. If that node never opens a file of its
 * slot again this epoch, the file would sit there while another node's
 * open ends the VC's epoch early: one sample lost, one served twice. So the
 * home remembers where each shipped file went, and before it rolls a VC
 * over (or when an open needs exactly such a file) it asks the holders
 * what they still hold and takes one back (a *reclaim*, see protocol.ts).
 *
 * Every batch has a sequence number, and a holder always says which batch
 * of a VC it received last (at most one request per VC is out, so a VC's
 * batches arrive in order). An entry of a later batch is *in transit*: it
 * cannot have been served yet. Entries leave the ledger only on evidence:
 * the holder says it served the file (its periodic notices, naming the
 * batch, so a late notice cannot remove a newer shipment of the same file),
 * its bitmap shows the slot empty, a reclaim answer does not list it, it
 * gave the file back, it never got the batch, or it is dead (then the file
 * never reached a trainer, as far as anyone can tell).
 */
import type { FileId, NodeId, VcId } from './layout'

export interface Holding {
  readonly node: NodeId
  /** The batch that shipped the file. */
  readonly batch: number
}

export class ShippedLedger {
  private readonly byVc = new Map<VcId, Map<FileId, Holding>>()

  add (vc: VcId, file: FileId, holding: Holding): void {
    let entries = this.byVc.get(vc)
    if (entries === undefined) this.byVc.set(vc, entries = new Map())
    entries.set(file, holding)
  }

  remove (vc: VcId, file: FileId): void {
    const entries = this.byVc.get(vc)
    if (entries === undefined) return
    entries.delete(file)
    if (entries.size === 0) this.byVc.delete(vc)
  }

  get (vc: VcId, file: FileId): Holding | undefined { return this.byVc.get(vc)?.get(file) }

  /** Files of `vc` held elsewhere, with their holdings. */
  entries (vc: VcId): [FileId, Holding][] { return [...(this.byVc.get(vc) ?? [])] }

  files (vc: VcId): FileId[] { return [...(this.byVc.get(vc)?.keys() ?? [])] }

  holders (vc: VcId): NodeId[] { return [...new Set([...(this.byVc.get(vc)?.values() ?? [])].map(h => h.node))].sort((a, b) => a - b) }

  /** Files of `vc` that `node` holds or is being sent, by our record. */
  heldBy (vc: VcId, node: NodeId): [FileId, Holding][] {
    return this.entries(vc).filter(([, holding]) => holding.node === node)
  }

  /** Every VC with an entry for `node`. */
  vcsHeldBy (node: NodeId): VcId[] {
    return [...this.byVc].filter(([, entries]) => [...entries.values()].some(h => h.node === node)).map(([vc]) => vc)
  }

  get size (): number {
    let size = 0
    for (const entries of this.byVc.values()) size += entries.size
    return size
  }

  clear (): void { this.byVc.clear() }
}
