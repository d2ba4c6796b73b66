/**
 * Strict mode's refill choice (the Redox paper's FindReplacePC).
 *
 * Correctness: when an open needs slot O, only a PC whose file at offset O
 * is unconsumed can be loaded, otherwise the open would get nothing.
 * Efficiency: a PC's files can only land on empty slots, and only if they
 * are unconsumed; the rest of the chunk is read for nothing. So among the
 * candidates, take the one that fills the most empty slots; break ties at
 * random so no PC is systematically favoured.
 */
import type { Layout, PcId, VcId } from './layout'
import type { SeededRandom } from './random'
import type { SlotTable } from './slots'

/** Empty slots of v that PC `pc` would fill with unconsumed files. */
export function usefulFill (layout: Layout, slots: SlotTable, vc: VcId, pc: PcId): number {
  let fill = 0
  layout.pcs[pc].files.forEach((file, offset) => {
    if (slots.isSlotEmpty(vc, offset) && !slots.isConsumed(file)) fill++
  })
  return fill
}

/**
 * The PC of PCS(v) to load. With `targetOffset`, only PCs that can fill
 * that slot qualify; without (readahead), any PC that fills something.
 * PCs in `exclude` never qualify.
 * Undefined when no PC qualifies.
 */
export function chooseRefill (layout: Layout, slots: SlotTable, random: SeededRandom, vc: VcId, targetOffset?: number, exclude?: ReadonlySet<PcId>): PcId | undefined {
  let best: PcId[] = []
  let bestFill = 0
  for (const pc of layout.vcs[vc].pcs) {
    if (exclude?.has(pc) === true) continue
    if (targetOffset !== undefined) {
      const target = layout.pcs[pc].files[targetOffset]
      if (target === undefined || slots.isConsumed(target)) continue
    }
    const fill = usefulFill(layout, slots, vc, pc)
    if (fill === 0) continue
    if (fill > bestFill) { best = [pc]; bestFill = fill } else if (fill === bestFill) best.push(pc)
  }
  return best.length === 0 ? undefined : best[random.below(best.length)]
}
