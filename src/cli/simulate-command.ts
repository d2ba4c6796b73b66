/**
 * `redirfs simulate`: the protocol on random traces, with no FUSE and no
 * disk, over a grid of modes, chunk sizes and memory fractions.
 */
import { scanTree } from '../chunks/scan'
import { UsageError } from '../errors'
import { planMemory } from '../redirect/budget'
import { measureFidelity, type ChunkedFiles, type FidelityFigures } from '../redirect/fidelity'
import { buildLayout, type SampleFile } from '../redirect/layout'
import type { RedirectMode } from '../redirect/protocol'
import { SeededRandom } from '../redirect/random'
import { buildSharedLayout } from '../redirect/shared-layout'
import { simulate, simulateShared, type SimulationResult } from '../redirect/simulator'
import { simulateCluster } from '../redirect/cluster-simulator'

export interface SimulateOptions {
  source?: string
  files: number
  classes: number
  meanSize: number
  modes: RedirectMode[]
  /** Which layouts to compare: class chunks (one class each, `modes` apply) and shared chunks (many classes each). */
  layouts?: LayoutKind[]
  chunkSizes: number[]
  memoryFractions: number[]
  epochs: number
  batchSize: number
  readers: number
  seed: number
  /** More than 1: simulate a cluster of this many nodes (each with the memory fraction). */
  nodes?: number
  /** A node's mirror memory, as a fraction of its memory. */
  remoteMemory?: number
  /** mix, and the shared layout: files per block (one read). */
  mixBlock?: number
}

export type LayoutKind = 'class' | 'shared'
export const LAYOUT_KINDS: readonly LayoutKind[] = ['class', 'shared']

interface RowKey {
  layout: LayoutKind
  /** The class layout's mode; the shared layout has one protocol of its own ('shared'). */
  mode: RedirectMode | 'shared'
  chunkSize: number
  /** Files one read brings: a mix or shared-layout block, else a whole chunk. */
  blockSize: number
  memoryFraction: number
}

export interface MeasuredRow extends RowKey, FidelityFigures {
  /** Opens that waited for a load, of all opens. */
  waitedShare: number
  virtualChunks: number
  physicalChunks: number
}

/** A layout that cannot serve with this memory, and why. */
export interface RefusedRow extends RowKey { refused: string }

export type SimulationRow = MeasuredRow | RefusedRow

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
  const classes = new Set(samples.map(s => s.group)).size
  const layouts = options.layouts ?? LAYOUT_KINDS
  const mixBlock = options.mixBlock ?? 1
  const rows: SimulationRow[] = []
  for (const chunkSize of options.chunkSizes) {
    for (const memoryFraction of options.memoryFractions) {
      const memoryBytes = Math.round(datasetBytes * memoryFraction)
      const traces = { memoryBytes, epochs: options.epochs, seed: options.seed, readers: options.readers }
      const measured = (key: RowKey, layout: ChunkedFiles, result: SimulationResult, virtualChunks: number): MeasuredRow => ({
        ...key,
        waitedShare: result.counters.waitedOpens / Math.max(1, result.counters.opens),
        virtualChunks,
        physicalChunks: layout.pcs.length,
        ...measureFidelity(layout, result, options.batchSize)
      })
      if (layouts.includes('class')) {
        const plan = planMemory(samples, chunkSize, memoryBytes)
        for (const mode of options.modes) {
          const key: RowKey = { layout: 'class', mode, chunkSize, blockSize: mode === 'mix' ? mixBlock : chunkSize, memoryFraction }
          if (plan.vcCount < classes) {
            rows.push({ ...key, refused: `every class needs a chunk of its files in memory: at least ${percent(plan.minimumBytes / datasetBytes)} of the dataset` })
            continue
          }
          const layout = buildLayout(samples, { chunkSize, seed: options.seed, vcCount: plan.vcCount })
          rows.push(measured(key, layout, simulate(layout, { ...traces, mode, mixBlock }), layout.vcs.length))
        }
      }
      if (layouts.includes('shared')) {
        const layout = buildSharedLayout(samples, { chunkSize, blockSize: mixBlock, seed: options.seed })
        const key: RowKey = { layout: 'shared', mode: 'shared', chunkSize, blockSize: layout.blockSize, memoryFraction }
        rows.push(measured(key, layout, simulateShared(layout, traces), 0))
      }
    }
  }
  return rows
}

function percent (share: number): string {
  return share < 0.1 ? `${(share * 100).toFixed(1)}%` : `${Math.round(share * 100)}%`
}

export function formatSimulationTable (rows: SimulationRow[]): string {
  const header = '| layout | mode | K | block | memory | opens that waited | chunk loads / PC / epoch | read amplification | wasted / epoch | same-chunk pairs per batch (vs uniform) | pairs repeated from the epoch before, per batch (vs uniform) | order kept from the epoch before (uniform 0) |'
  const lines = rows.map(r => {
    const key = `| ${r.layout} | ${r.mode} | ${r.chunkSize} | ${r.blockSize} | ${percent(r.memoryFraction)} |`
    if ('refused' in r) return `${key} refused: ${r.refused} | | | | | | |`
    return `${key} ${percent(r.waitedShare)} | ${r.chunkLoadsPerPcPerEpoch.toFixed(2)} | ${r.readAmplification.toFixed(2)} | ${(r.wastedBytesPerEpoch / 2 ** 20).toFixed(1)} MiB | ${r.sameChunkPairsPerBatch.toFixed(2)} (${r.sameChunkRatio.toFixed(1)}x) | ${r.repeatedPairsPerBatch.toFixed(3)} (${r.repeatedPairsRatio.toFixed(2)}x) | ${Number.isNaN(r.orderKept) ? '-' : r.orderKept.toFixed(2)} |`
  })
  return [header, '|---|---|---|---|---|---|---|---|---|---|---|---|', ...lines].join('\n')
}

export interface ClusterSimulationRow {
  nodes: number
  mode: RedirectMode
  chunkSize: number
  memoryFraction: number
  prefetch: boolean
  /** Epochs whose union over the nodes was exactly the dataset, with right labels. */
  exactEpochs: number
  epochs: number
  remoteShare: number
  requestsPerRemoteSample: number
  prefetchUsedShare: number
  reclaimsPerEpoch: number
}

/**
 * The cluster protocol on DistributedSampler-like traces: what share of
 * opens is remote, how many requests a remote sample costs with and
 * without prefetch, and whether every epoch's union is the dataset.
 */
export async function runClusterSimulations (options: SimulateOptions): Promise<ClusterSimulationRow[]> {
  const nodes = options.nodes ?? 1
  const samples = options.source !== undefined
    ? (await scanTree(options.source)).samples
    : syntheticSamples(options.files, options.classes, options.meanSize, options.seed)
  const datasetBytes = samples.reduce((sum, s) => sum + s.size, 0)
  const everyFile = JSON.stringify(samples.map((_, id) => id))
  const rows: ClusterSimulationRow[] = []
  for (const chunkSize of options.chunkSizes) {
    for (const memoryFraction of options.memoryFractions) {
      const memoryBytes = Math.round(datasetBytes * memoryFraction)
      const plan = planMemory(samples, chunkSize, memoryBytes, nodes)
      let layout
      try {
        layout = buildLayout(samples, { chunkSize, seed: options.seed, vcCount: plan.vcCount, nodes })
      } catch (err) {
        throw new UsageError(`memory ${memoryFraction} of the dataset per node is too small for chunk size ${chunkSize}: ${(err as Error).message}`)
      }
      for (const mode of options.modes) {
        for (const prefetch of [true, false]) {
          const result = simulateCluster(layout, { mode, memoryBytes, remoteMemoryBytes: memoryBytes * (options.remoteMemory ?? 0.25), epochs: options.epochs, seed: options.seed, readers: options.readers, prefetch, mixBlock: options.mixBlock })
          const remoteOpens = result.mirrors.reduce((sum, m) => sum + m.counters.remoteOpens, 0)
          const exactEpochs = result.epochs.filter(epoch =>
            epoch.every(o => o.served !== undefined && samples[o.served].group === samples[o.opened].group) &&
            JSON.stringify(epoch.map(o => o.served ?? -1).sort((a, b) => a - b)) === everyFile).length
          rows.push({
            nodes,
            mode,
            chunkSize,
            memoryFraction,
            prefetch,
            exactEpochs,
            epochs: options.epochs,
            remoteShare: remoteOpens / (samples.length * options.epochs),
            requestsPerRemoteSample: result.mirrors.reduce((sum, m) => sum + m.counters.remoteRequests, 0) / Math.max(1, remoteOpens),
            prefetchUsedShare: result.mirrors.reduce((sum, m) => sum + m.counters.prefetchUsed, 0) / Math.max(1, remoteOpens),
            reclaimsPerEpoch: result.protocols.reduce((sum, p) => sum + p.counters.reclaims, 0) / options.epochs
          })
        }
      }
    }
  }
  return rows
}

export function formatClusterSimulationTable (rows: ClusterSimulationRow[]): string {
  const header = '| nodes | mode | K | memory per node | prefetch | exact epochs | remote samples | requests per remote sample | remote samples from the mirror | reclaim rounds / epoch |'
  const lines = rows.map(r => `| ${r.nodes} | ${r.mode} | ${r.chunkSize} | ${Math.round(r.memoryFraction * 100)}% | ${r.prefetch ? 'on' : 'off'} | ${r.exactEpochs} of ${r.epochs} | ${(r.remoteShare * 100).toFixed(0)}% | ${r.requestsPerRemoteSample.toFixed(2)} | ${(r.prefetchUsedShare * 100).toFixed(0)}% | ${r.reclaimsPerEpoch.toFixed(0)} |`)
  return [header, '|---|---|---|---|---|---|---|---|---|---|', ...lines].join('\n')
}
