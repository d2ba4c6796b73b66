/**
 * What a pool or mix load reads (docs/design.md, "The protocol"); strict
 * mode's choice is refill.ts. Each function only chooses: the protocol
 * starts the load and keeps the state.
 *
 * pool reads one whole PC of the VC, chosen at random among those with
 * files left to serve this epoch. mix reads blocks of consecutive files,
 * each block from a PC of its own, so the files that arrive together change
 * with every load and every epoch. Once a VC has served all its files,
 * either reads for the VC's next epoch: only files already served in this
 * one, so each file is still read once per epoch.
 */
import type { FileId, Layout, PcId, VcId } from './layout'
import type { SeededRandom } from './random'
import type { SlotTable } from './slots'

/** A run of files of one PC that a load reads with one read. */
export interface LoadPiece {
  readonly pc: PcId
  /** The files wanted from it, in offset order. */
  readonly files: readonly FileId[]
}

/** pool: a PC of `vc` (outside `exclude`) with files not yet served this epoch, at random; undefined when none. */
export function choosePoolPc (layout: Layout, slots: SlotTable, random: SeededRandom, vc: VcId, exclude?: ReadonlySet<PcId>): PcId | undefined {
  const candidates = layout.vcs[vc].pcs.filter(pc => exclude?.has(pc) !== true && slots.unconsumedFilesOf(pc).length > 0)
  return candidates.length === 0 ? undefined : candidates[random.below(candidates.length)]
}

/**
 * mix: a load fills the VC's slots block by block (`block` offsets each),
 * every block from a PC of its own, drawn at random among those with
 * unconsumed files there. Blocks sit at their own offsets, so the files of
 * one load never want the same slot. With `wholeBlocksOf` (reading for the
 * next epoch), a block qualifies only if every file of it does, since a
 * block is one read. Undefined when no PC (outside `exclude`) qualifies.
 */
export function chooseMixPieces (layout: Layout, slots: SlotTable, random: SeededRandom, vc: VcId, block: number,
  exclude?: ReadonlySet<PcId>, wholeBlocksOf?: (file: FileId) => boolean): LoadPiece[] | undefined {
  const pieces: LoadPiece[] = []
  for (let start = 0; start < slots.capacity[vc]; start += block) {
    const wantedBlock = wholeBlocksOf === undefined
      ? (pc: PcId): FileId[] => layout.pcs[pc].files.slice(start, start + block).filter(file => !slots.isConsumed(file))
      : (pc: PcId): FileId[] => { const files = layout.pcs[pc].files.slice(start, start + block); return files.every(wholeBlocksOf) ? files : [] }
    const candidates = layout.vcs[vc].pcs.filter(pc => exclude?.has(pc) !== true && wantedBlock(pc).length > 0)
    if (candidates.length === 0) continue
    const pc = candidates[random.below(candidates.length)]
    pieces.push({ pc, files: wantedBlock(pc) })
  }
  return pieces.length === 0 ? undefined : pieces
}

/** The PCs of PCS(v), less `exclude`, every file of which `servedThisEpoch` holds: a next epoch's candidates. */
export function servedOutPcs (layout: Layout, vc: VcId, exclude: ReadonlySet<PcId>, servedThisEpoch: (file: FileId) => boolean): PcId[] {
  return layout.vcs[vc].pcs.filter(pc => !exclude.has(pc) && layout.pcs[pc].files.every(servedThisEpoch))
}

/**
 * What to read for an emptied VC's next epoch: a whole PC (pool) or whole
 * blocks (mix, `block` > 0) every file of which `servedThisEpoch` says
 * nothing can serve again before the rollover, chosen among all of PCS(v)
 * as at any epoch's first load. Undefined when nothing qualifies.
 */
export function chooseNextEpochPieces (layout: Layout, slots: SlotTable, random: SeededRandom, vc: VcId, mixBlock: number | undefined,
  exclude: ReadonlySet<PcId>, servedThisEpoch: (file: FileId) => boolean): LoadPiece[] | undefined {
  if (mixBlock !== undefined) return chooseMixPieces(layout, slots, random, vc, mixBlock, exclude, servedThisEpoch)
  const candidates = servedOutPcs(layout, vc, exclude, servedThisEpoch)
  if (candidates.length === 0) return undefined
  const pc = candidates[random.below(candidates.length)]
  return [{ pc, files: [...layout.pcs[pc].files] }]
}
