/**
 * Measures of what redirection costs, computed from a simulation.
 *
 * - Chunk loads per PC per epoch: 1.0 means every chunk is read once.
 * - Read amplification: bytes a whole-chunk reader reads per epoch over the
 *   dataset's bytes (placed files plus wasted ones).
 * - Same-chunk pairs per batch relative to a uniform shuffle: how much less
 *   random the served order is. In a uniform shuffle two distinct samples
 *   share a chunk with probability sum(n_pc (n_pc - 1)) / (F (F - 1)); a
 *   ratio of 1 means batches mix chunks as a uniform shuffle does.
 */
import type { Layout } from './layout'
import type { SimulationResult } from './simulator'

export interface FidelityFigures {
  chunkLoadsPerPcPerEpoch: number
  readAmplification: number
  wastedBytesPerEpoch: number
  sameChunkPairsPerBatch: number
  uniformSameChunkPairsPerBatch: number
  sameChunkRatio: number
}

export function measureFidelity (layout: Layout, result: SimulationResult, batchSize: number): FidelityFigures {
  const epochs = result.epochs.length
  const { counters } = result
  let placedBytes = 0
  for (const loaded of result.loaded) for (const file of loaded) placedBytes += layout.files[file].size

  let pairs = 0
  let batches = 0
  for (const epoch of result.epochs) {
    for (let start = 0; start + batchSize <= epoch.length; start += batchSize) {
      const perPc = new Map<number, number>()
      for (const open of epoch.slice(start, start + batchSize)) {
        if (open.served === undefined) continue
        const pc = layout.filePc[open.served]
        perPc.set(pc, (perPc.get(pc) ?? 0) + 1)
      }
      for (const n of perPc.values()) pairs += n * (n - 1) / 2
      batches++
    }
  }
  const F = layout.files.length
  let samePcOrderedPairs = 0
  for (const pc of layout.pcs) samePcOrderedPairs += pc.files.length * (pc.files.length - 1)
  const uniform = (batchSize * (batchSize - 1) / 2) * samePcOrderedPairs / (F * (F - 1))
  const measured = batches === 0 ? 0 : pairs / batches

  return {
    chunkLoadsPerPcPerEpoch: counters.chunkLoads / layout.pcs.length / epochs,
    readAmplification: (placedBytes + counters.wastedBytes) / layout.totalBytes / epochs,
    wastedBytesPerEpoch: counters.wastedBytes / epochs,
    sameChunkPairsPerBatch: measured,
    uniformSameChunkPairsPerBatch: uniform,
    sameChunkRatio: uniform === 0 ? 0 : measured / uniform
  }
}
