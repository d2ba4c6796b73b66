/**
 * `redirfs simulate`: the protocol on random traces, with no FUSE and no
 * disk, over a grid of modes, chunk sizes and memory fractions.
 */
import { scanTree } from '../chunks/scan'
import { RedirfsError } from '../errors'
import { planMemory } from '../redirect/budget'
import { measureFidelity, type FidelityFigures } from '../redirect/fidelity'
import { buildLayout, type SampleFile } from '../redirect/layout'
import type { RedirectMode } from '../redirect/protocol'
import { SeededRandom } from '../redirect/random'
import { simulate } from '../redirect/simulator'

export interface SimulateOptions {
  source?: string
  files: number
  classes: number
  meanSize: number
  modes: RedirectMode[]
  chunkSizes: number[]
  memoryFractions: number[]
  epochs: number
  batchSize: number
  readers: number
  seed: number
}

export interface SimulationRow extends FidelityFigures {
  mode: RedirectMode
  chunkSize: number
  memoryFraction: number
  virtualChunks: number
  physicalChunks: number
}

/** A synthetic ImageNet-like sample list: uneven classes, log-normal sizes around the mean. */
export function syntheticSamples (files: number, classes: number, meanSize: number, seed: number): SampleFile[] {
  const random = new SeededRandom(seed)
  const weights = Array.from({ length: classes }, () => 0.5 + random.below(1000) / 1000)
  const total = weights.reduce((a, b) => a + b, 0)
  const samples: SampleFile[] = []
  weights.forEach((w, c) => {
    const count = Math.max(1, Math.round(files * w / total))
    for (let i = 0; i < count; i++) {
      const normal = Array.from({ length: 6 }, () => random.below(10_000) / 10_000).reduce((a, b) => a + b, 0) - 3
      const size = Math.max(1, Math.round(meanSize * Math.exp(0.5 * normal - 0.125)))
      samples.push({ path: `c${String(c).padStart(4, '0')}/f${String(i).padStart(7, '0')}.jpg`, size, group: `c${c}` })
    }
  })
  return samples.sort((a, b) => (a.path < b.path ? -1 : 1))
}

export async function runSimulations (options: SimulateOptions): Promise<SimulationRow[]> {
  const samples = options.source !== undefined
    ? (await scanTree(options.source)).samples
    : syntheticSamples(options.files, options.classes, options.meanSize, options.seed)
  const datasetBytes = samples.reduce((sum, s) => sum + s.size, 0)
  const rows: SimulationRow[] = []
  for (const chunkSize of options.chunkSizes) {
    for (const memoryFraction of options.memoryFractions) {
      const memoryBytes = Math.round(datasetBytes * memoryFraction)
      const plan = planMemory(samples, chunkSize, memoryBytes)
      if (plan.vcCount < new Set(samples.map(s => s.group)).size) {
        throw new RedirfsError(`memory ${memoryFraction} of the dataset is too small for chunk size ${chunkSize}: every class needs one virtual chunk`)
      }
      const layout = buildLayout(samples, { chunkSize, seed: options.seed, vcCount: plan.vcCount })
      for (const mode of options.modes) {
        const result = simulate(layout, { mode, memoryBytes, epochs: options.epochs, seed: options.seed, readers: options.readers })
        rows.push({ mode, chunkSize, memoryFraction, virtualChunks: layout.vcs.length, physicalChunks: layout.pcs.length, ...measureFidelity(layout, result, options.batchSize) })
      }
    }
  }
  return rows
}

export function formatSimulationTable (rows: SimulationRow[]): string {
  const header = '| mode | K | memory | chunk loads / PC / epoch | read amplification | wasted / epoch | same-chunk pairs per batch (vs uniform) |'
  const lines = rows.map(r => `| ${r.mode} | ${r.chunkSize} | ${Math.round(r.memoryFraction * 100)}% | ${r.chunkLoadsPerPcPerEpoch.toFixed(2)} | ${r.readAmplification.toFixed(2)} | ${(r.wastedBytesPerEpoch / 2 ** 20).toFixed(1)} MiB | ${r.sameChunkPairsPerBatch.toFixed(2)} (${r.sameChunkRatio.toFixed(1)}x) |`)
  return [header, '|---|---|---|---|---|---|---|', ...lines].join('\n')
}
