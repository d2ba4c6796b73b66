/**
 * Measures of what redirection costs, computed from a simulation.
 *
 * - Chunk loads per PC per epoch: 1.0 means every chunk is read once.
 * - Read amplification: bytes a whole-chunk reader reads per epoch over the
 *   dataset's bytes (placed files plus wasted ones).
 * - Same-chunk pairs per batch relative to a uniform shuffle: how much less
 *   random the served order is within an epoch. Two served samples of a
 *   batch are a same-chunk pair when one read of one PC brought both (the
 *   whole chunk in pool, part of it in strict, a block in mix: files stored
 *   together and so read together every epoch). In a uniform shuffle two
 *   distinct samples share a chunk with probability
 *   sum(n_pc (n_pc - 1)) / (F (F - 1)); a ratio of 1 means batches mix
 *   chunks as a uniform shuffle does.
 * - Repeated pairs per batch relative to a uniform shuffle: pairs served in
 *   one batch in an epoch and again in one batch in the next, which is how
 *   much the same samples keep company epoch after epoch. A uniform shuffle
 *   repeats a pair with probability (B - 1) / (F - 1).
 * - Order kept from the epoch before: the correlation of each file's place
 *   in an epoch with its place in the one before (Pearson, averaged over
 *   pairs of epochs). A uniform shuffle has 0; the same order every epoch,
 *   1. Above 0, files early (or late) in one epoch tend to be early (or
 *   late) in the next, where a fresh shuffle would scatter them.
 */
import type { Layout } from './layout'
import type { ServedOpen, SimulationResult } from './simulator'

export interface FidelityFigures {
  chunkLoadsPerPcPerEpoch: number
  readAmplification: number
  wastedBytesPerEpoch: number
  sameChunkPairsPerBatch: number
  uniformSameChunkPairsPerBatch: number
  sameChunkRatio: number
  repeatedPairsPerBatch: number
  uniformRepeatedPairsPerBatch: number
  repeatedPairsRatio: number
  orderKept: number
}

/** What the measures need of a layout, class or shared: its files and how they are cut into chunks. */
export type ChunkedFiles = Pick<Layout, 'files' | 'totalBytes'> & { readonly pcs: readonly { readonly files: readonly unknown[] }[] }

export function measureFidelity (layout: ChunkedFiles, result: SimulationResult, batchSize: number): FidelityFigures {
  const epochs = result.epochs.length
  const { counters } = result
  let placedBytes = 0
  for (const loaded of result.loaded) for (const file of loaded) placedBytes += layout.files[file].size

  let pairs = 0
  let batches = 0
  for (const epoch of result.epochs) {
    for (let start = 0; start + batchSize <= epoch.length; start += batchSize) {
      const perRead = new Map<string, number>()
      for (const open of epoch.slice(start, start + batchSize)) {
        if (open.read === undefined) continue
        perRead.set(open.read, (perRead.get(open.read) ?? 0) + 1)
      }
      for (const n of perRead.values()) pairs += n * (n - 1) / 2
      batches++
    }
  }
  const F = layout.files.length
  let samePcOrderedPairs = 0
  for (const pc of layout.pcs) samePcOrderedPairs += pc.files.length * (pc.files.length - 1)
  const uniform = (batchSize * (batchSize - 1) / 2) * samePcOrderedPairs / (F * (F - 1))
  const measured = batches === 0 ? 0 : pairs / batches
  const repeated = repeatedPairsPerBatch(result.epochs, batchSize, F)
  const uniformRepeated = (batchSize * (batchSize - 1) / 2) * (batchSize - 1) / (F - 1)

  return {
    chunkLoadsPerPcPerEpoch: (counters.chunkLoads - result.loadsPastTheEnd) / layout.pcs.length / epochs,
    readAmplification: (placedBytes + counters.wastedBytes) / layout.totalBytes / epochs,
    wastedBytesPerEpoch: counters.wastedBytes / epochs,
    sameChunkPairsPerBatch: measured,
    uniformSameChunkPairsPerBatch: uniform,
    sameChunkRatio: uniform === 0 ? 0 : measured / uniform,
    repeatedPairsPerBatch: repeated,
    uniformRepeatedPairsPerBatch: uniformRepeated,
    repeatedPairsRatio: uniformRepeated === 0 ? 0 : repeated / uniformRepeated,
    orderKept: orderKept(result.epochs, F)
  }
}

/**
 * The mean, over pairs of consecutive epochs, of the correlation of files'
 * places in the two (a place counts every open, answered or not): 0 for
 * independent shuffles; NaN with no two epochs to compare.
 */
export function orderKept (epochs: readonly (readonly ServedOpen[])[], fileCount: number): number {
  const placesIn = (epoch: readonly ServedOpen[]): Float64Array => {
    const place = new Float64Array(fileCount).fill(NaN)
    epoch.forEach((open, i) => { if (open.served !== undefined) place[open.served] = i })
    return place
  }
  let sum = 0
  let pairs = 0
  for (let e = 1; e < epochs.length; e++) {
    const [before, now] = [placesIn(epochs[e - 1]), placesIn(epochs[e])]
    // Files served in both epochs only (a partial epoch serves fewer).
    const both = [...before.keys()].filter(file => !Number.isNaN(before[file]) && !Number.isNaN(now[file]))
    if (both.length < 2) continue
    const mean = (places: Float64Array): number => both.reduce((total, file) => total + places[file], 0) / both.length
    const [meanBefore, meanNow] = [mean(before), mean(now)]
    let cross = 0
    let squaresBefore = 0
    let squaresNow = 0
    for (const file of both) {
      const [b, n] = [before[file] - meanBefore, now[file] - meanNow]
      cross += b * n
      squaresBefore += b * b
      squaresNow += n * n
    }
    if (squaresBefore === 0 || squaresNow === 0) continue
    sum += cross / Math.sqrt(squaresBefore * squaresNow)
    pairs++
  }
  return pairs === 0 ? NaN : sum / pairs
}

/** Pairs of served files in one batch of an epoch that shared a batch in the epoch before, per batch. */
function repeatedPairsPerBatch (epochs: readonly (readonly ServedOpen[])[], batchSize: number, fileCount: number): number {
  const batchOf = (epoch: readonly ServedOpen[]): Int32Array => {
    const batch = new Int32Array(fileCount).fill(-1)
    epoch.forEach((open, i) => { if (open.served !== undefined) batch[open.served] = Math.floor(i / batchSize) })
    return batch
  }
  let repeated = 0
  let batches = 0
  for (let e = 1; e < epochs.length; e++) {
    const before = batchOf(epochs[e - 1])
    const epoch = epochs[e]
    for (let start = 0; start + batchSize <= epoch.length; start += batchSize) {
      const served = epoch.slice(start, start + batchSize).flatMap(open => open.served === undefined ? [] : [open.served])
      for (let i = 0; i < served.length; i++) {
        for (let j = i + 1; j < served.length; j++) {
          if (before[served[i]] !== -1 && before[served[i]] === before[served[j]]) repeated++
        }
      }
      batches++
    }
  }
  return batches === 0 ? 0 : repeated / batches
}
